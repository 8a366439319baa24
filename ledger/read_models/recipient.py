"""One recipient, and which recipients a destination names.

The consents on record, the suppressions of their destinations, their newest intents; and
which recipients a destination's lookup HMAC names.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ledger.evidence import consents_of
from ledger.listing import ListedIntent, listed, listed_intent, to_recipient
from ledger.models import Consent, Intent, Suppression

INTENTS_SHOWN = 100
REFS_FOUND = 20


@dataclass
class Recipient:
    """What the ledger holds of one recipient."""

    recipient_ref: str
    consents: list[Consent]
    suppressions: list[tuple[str, Suppression]]
    """(channel of the destination, suppression)."""
    intents: list[ListedIntent]
    """The newest INTENTS_SHOWN, newest first."""


def recipient_refs_for(session: Session, lookup_hmac: str) -> list[str]:
    """The recipients (at most REFS_FOUND) with an intent to the destination of this HMAC."""
    return list(
        session.execute(
            select(Intent.recipient_ref)
            .where(to_recipient(lookup_hmac))
            .distinct()
            .limit(REFS_FOUND)
        ).scalars()
    )


def recipient(session: Session, recipient_ref: str) -> Recipient:
    """The recipient's consents, suppressions and newest intents.

    The consents revoked ones too, oldest first, as GET /v1/consents reads them
    (`ledger.evidence.consents_of`); the suppressions of the destinations of their newest
    intents; those intents with their derived state.
    """
    newest = (
        select(Intent)
        .where(Intent.recipient_ref == recipient_ref)
        .order_by(Intent.created_at.desc(), Intent.id.desc())
        .limit(INTENTS_SHOWN)
    )
    now = datetime.now(UTC)
    intents = [listed_intent(row, now) for row in session.execute(listed(newest))]
    hmacs: set[str] = set()
    for sms, email in session.execute(
        newest.with_only_columns(Intent.sms_destination_hmac, Intent.email_destination_hmac)
    ):
        hmacs |= {h for h in (sms, email) if h}
    suppressions = list(
        session.execute(
            select(Suppression)
            .where(Suppression.destination_hmac.in_(hmacs or {""}))
            .order_by(Suppression.at, Suppression.id)
        ).scalars()
    )
    return Recipient(
        recipient_ref,
        consents_of(session, recipient_ref),
        [(s.channel, s) for s in suppressions],
        intents,
    )


def suppression_belongs_to(session: Session, suppression_id: int, recipient_ref: str) -> bool:
    """Whether the suppression is of one of the recipient's destinations.

    A lift from a recipient's page concerns only those.
    """
    row = session.get(Suppression, suppression_id)
    if row is None:
        return False
    return (
        session.execute(
            select(func.count())
            .select_from(Intent)
            .where(Intent.recipient_ref == recipient_ref, to_recipient(row.destination_hmac))
        ).scalar_one()
        > 0
    )
