"""One intent, beyond its timeline (`ledger.timeline`).

Its review items, and its destinations as every surface shows them.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from domain.destinations import masked
from ledger.models import Intent, ReviewItem


def review_items_of(session: Session, intent_id: str) -> list[ReviewItem]:
    """The intent's review items, open and resolved, in the order they were filed."""
    return list(
        session.execute(
            select(ReviewItem).where(ReviewItem.intent_id == intent_id).order_by(ReviewItem.id)
        ).scalars()
    )


def masked_destinations(
    session: Session, intent_id: str, decrypt: Callable[[str, str], str]
) -> dict[str, str]:
    """The intent's destinations masked, by channel; none once purged.

    As every surface shows them (`domain.destinations.masked`: `+44********01`,
    `a***@example.com`), enough to confirm "the number ending 01" with a caller.
    `decrypt(ciphertext, context)` is the ledger's field cipher.
    """
    intent = session.get(Intent, intent_id)
    if intent is None:
        return {}
    return {
        channel: masked(decrypt(ct, intent.business_key))
        for channel, ct in (
            ("sms", intent.sms_destination_ct),
            ("email", intent.email_destination_ct),
        )
        if ct
    }
