"""Consent and suppression evidence: record, revoke, lift and list, for the CLI and the API.

A revoke or a lift never deletes: it stamps the rows it ends (`revoked_at`, `lifted_at`
and who did it), so the ledger keeps the history a later audit reads, and the policy's
next evaluation sees the revoke as evidence (`consent.revoked`, citing it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from domain import channels
from domain.principals import Principal
from ledger.errors import NotFound
from ledger.models import Consent, Suppression
from ledger.principals import record_audit

CHANNELS = channels.NAMES_AND_ALL
"""`*` means every channel, for consents and suppressions alike."""


def _channels_covering(channel: str) -> tuple[str, ...]:
    """The consent rows a grant or revoke on `channel` concerns.

    A `*` row covers every channel, and `*` itself concerns rows of every channel.
    """
    if channel == channels.ALL:
        return CHANNELS
    return (channel, "*")


def record_consent(
    session: Session,
    *,
    recipient_ref: str,
    channel: str,
    purpose: str,
    source: str,
    at: datetime,
    evidence: dict[str, Any] | None = None,
) -> Consent:
    """A new grant, live from `at`. Earlier grants stay as they are."""
    row = Consent(
        recipient_ref=recipient_ref,
        channel=channel,
        purpose=purpose,
        source=source,
        granted_at=at,
        evidence=evidence,
    )
    session.add(row)
    session.flush()
    return row


def revoke_consent(
    session: Session,
    *,
    recipient_ref: str,
    channel: str,
    purpose: str,
    source: str,
    at: datetime,
) -> list[Consent]:
    """End every live grant for the recipient and purpose on `channel`; return the ended ones.

    A grant on `*` is ended by a revoke on any one channel: a person who says "stop
    texting me" must not be texted under an all-channels grant (a new grant for the other
    channels is the app's to record). A revoke on `*` ends the grants of every channel.
    Nothing live is nothing to end: the list is empty and no row is written.
    """
    ended = session.execute(
        update(Consent)
        .where(
            Consent.recipient_ref == recipient_ref,
            Consent.purpose == purpose,
            Consent.channel.in_(_channels_covering(channel)),
            Consent.revoked_at.is_(None),
        )
        .values(revoked_at=at, revoked_source=source)
        .returning(Consent)
        .execution_options(synchronize_session=False)
    ).scalars()
    return sorted(ended, key=lambda c: c.id)


def consents_of(
    session: Session,
    recipient_ref: str,
    *,
    channel: str | None = None,
    purpose: str | None = None,
) -> list[Consent]:
    """Every grant on record for the recipient (revoked ones included), oldest first."""
    query = select(Consent).where(Consent.recipient_ref == recipient_ref)
    if channel is not None:
        query = query.where(Consent.channel.in_(_channels_covering(channel)))
    if purpose is not None:
        query = query.where(Consent.purpose == purpose)
    return list(session.execute(query.order_by(Consent.granted_at, Consent.id)).scalars())


def suppress(
    session: Session,
    *,
    destination_hmac: str,
    channel: str,
    reason: str,
    source: str,
    at: datetime,
    category: str | None = None,
    evidence: dict[str, Any] | None = None,
) -> tuple[Suppression, bool]:
    """Suppress a destination on a channel, once.

    Suppress the destination on `channel` (for one `category`, or every one with None),
    unless an active suppression on exactly that channel and category exists (a
    redelivered STOP, a second click, a second complaint): (row, created).
    """
    active = session.execute(
        select(Suppression)
        .where(
            Suppression.destination_hmac == destination_hmac,
            Suppression.channel == channel,
            Suppression.category.is_(None)
            if category is None
            else Suppression.category == category,
            Suppression.lifted_at.is_(None),
        )
        .order_by(Suppression.id)
        .limit(1)
    ).scalar_one_or_none()
    if active is not None:
        return active, False
    row = Suppression(
        destination_hmac=destination_hmac,
        channel=channel,
        reason=reason[:60],
        source=source[:60],
        at=at,
        category=category,
        evidence=evidence,
    )
    session.add(row)
    session.flush()
    return row, True


def lift_suppression(
    session: Session, suppression_id: int, *, source: str, at: datetime
) -> tuple[Suppression, bool]:
    """Lift one suppression by id.

    Lift one suppression by id (kept as history): (row, changed). Lifting one already
    lifted changes nothing.
    """
    changed = session.execute(
        update(Suppression)
        .where(Suppression.id == suppression_id, Suppression.lifted_at.is_(None))
        .values(lifted_at=at, lifted_source=source[:60])
        .returning(Suppression.id)
    ).scalar_one_or_none()
    row = session.get(Suppression, suppression_id, populate_existing=True)
    if row is None:
        said = f"no suppression {suppression_id}"
        raise NotFound(said, answer=said)
    return row, changed is not None


def suppressions_of(
    session: Session, destination_hmac: str, *, channel: str | None = None
) -> list[Suppression]:
    """Every suppression on record for the destination (lifted ones included), oldest first."""
    query = select(Suppression).where(Suppression.destination_hmac == destination_hmac)
    if channel is not None:
        query = query.where(Suppression.channel.in_(_channels_covering(channel)))
    return list(session.execute(query.order_by(Suppression.at, Suppression.id)).scalars())


def suppression_fields(row: Suppression) -> dict[str, Any]:
    """A suppression as the API and the CLI show it: never the destination (or its HMAC)."""
    return {
        "id": row.id,
        "channel": row.channel,
        "category": row.category,
        "reason": row.reason,
        "source": row.source,
        "at": row.at,
        "lifted_at": row.lifted_at,
        "lifted_source": row.lifted_source,
        "active": row.lifted_at is None,
    }


# --- the same, done by a principal: the paths the API, the CLI and the console share ------


def record_consent_by(
    session: Session,
    by: Principal,
    *,
    recipient_ref: str,
    channel: str,
    purpose: str,
    source: str,
    at: datetime,
) -> Consent:
    """:func:`record_consent`, with an audit row naming the principal and its role.

    The grant's own evidence names them too: an app records the consents it collected.
    """
    row = record_consent(
        session,
        recipient_ref=recipient_ref,
        channel=channel,
        purpose=purpose,
        source=source,
        at=at,
        evidence={"recorded_by": by.name, "recorded_by_role": by.role.value},
    )
    record_audit(
        session,
        by=by,
        action="consent.recorded",
        subject=f"consent:{row.id}",
        at=at,
        detail={"channel": channel, "purpose": purpose, "source": source},
    )
    return row


def revoke_consent_by(
    session: Session,
    by: Principal,
    *,
    recipient_ref: str,
    channel: str,
    purpose: str,
    source: str,
    at: datetime,
) -> list[Consent]:
    """:func:`revoke_consent`, with an audit row naming the principal and what it ended."""
    ended = revoke_consent(
        session, recipient_ref=recipient_ref, channel=channel, purpose=purpose, source=source, at=at
    )
    record_audit(
        session,
        by=by,
        action="consent.revoked",
        subject=f"recipient:{recipient_ref}",
        at=at,
        detail={
            "channel": channel,
            "purpose": purpose,
            "source": source,
            "ended": ",".join(str(c.id) for c in ended),
        },
    )
    return ended


def suppress_by(
    session: Session,
    by: Principal,
    *,
    destination_hmac: str,
    channel: str,
    reason: str,
    source: str,
    at: datetime,
) -> tuple[Suppression, bool]:
    """:func:`suppress`, with an audit row naming the principal."""
    row, created = suppress(
        session,
        destination_hmac=destination_hmac,
        channel=channel,
        reason=reason,
        source=source,
        at=at,
    )
    record_audit(
        session,
        by=by,
        action="suppression.added",
        subject=f"suppression:{row.id}",
        at=at,
        detail={"channel": channel, "reason": reason, "created": str(created).lower()},
    )
    return row, created


def lift_suppression_by(
    session: Session, by: Principal, suppression_id: int, *, source: str, at: datetime
) -> tuple[Suppression, bool]:
    """:func:`lift_suppression`, with an audit row naming the principal."""
    row, changed = lift_suppression(session, suppression_id, source=source, at=at)
    record_audit(
        session,
        by=by,
        action="suppression.lifted",
        subject=f"suppression:{row.id}",
        at=at,
        detail={"source": source, "changed": str(changed).lower()},
    )
    return row, changed
