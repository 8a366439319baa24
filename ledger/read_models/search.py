"""The intents a search names: by an identifier, or by a destination's lookup HMAC.

What a caller or a colleague gives is read by the console (`api/console/search.py`: which
kind of thing it is, and the words for it); this module finds the intents, each lookup
through its own index.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from ledger.models import Attempt, Intent

RECIPIENTS_FOUND = 20


def message_ids(text: str) -> tuple[str, ...]:
    """An email's Message-ID as the ledger keeps it (`<...>`).

    Whether given with its angle brackets (as a mail client shows the header) or without
    (as a person copies it).
    """
    if text.startswith("<") and text.endswith(">"):
        return (text,)
    return (text, f"<{text}>") if "@" in text else (text,)


def intents_named(session: Session, text: str) -> set[str]:
    """The intents `text` names exactly.

    As an intent id, a business key, an attempt token, the provider's message id or an
    email's Message-ID.
    """
    ids = set(
        session.execute(
            select(Intent.id).where(or_(Intent.id == text, Intent.business_key == text))
        ).scalars()
    )
    # Each through its own index (Postgres combines them with a bitmap OR).
    ids |= set(
        session.execute(
            select(Attempt.intent_id).where(
                or_(
                    Attempt.token == text,
                    Attempt.remote_id == text,
                    Attempt.message_id.in_(message_ids(text)),
                )
            )
        ).scalars()
    )
    return ids


def intents_to_address(session: Session, exact: str, folded: str) -> set[str]:
    """The intents to an email address.

    By the lookup HMAC of the address as given (`exact`) or of its search form (`folded`,
    `domain.destinations.search_form`).
    """
    return set(
        session.execute(
            select(Intent.id).where(
                or_(Intent.email_destination_hmac == exact, Intent.email_search_hmac == folded)
            )
        ).scalars()
    )


def intents_to_number(session: Session, lookup: str) -> set[str]:
    """The intents to a phone number, by the lookup HMAC of its E.164 form."""
    return set(
        session.execute(select(Intent.id).where(Intent.sms_destination_hmac == lookup)).scalars()
    )


def recipients_of(session: Session, intent_ids: Iterable[str]) -> list[str]:
    """The recipient refs of these intents (at most RECIPIENTS_FOUND), sorted."""
    return sorted(
        session.execute(
            select(Intent.recipient_ref)
            .where(Intent.id.in_(list(intent_ids)))
            .distinct()
            .limit(RECIPIENTS_FOUND)
        ).scalars()
    )
