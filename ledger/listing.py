"""Listing intents with their derived state: shared by `herald list` and GET /v1/intents.

The state is derived (domain.intents), never stored, so a state filter is applied after
derivation, page by page, over a bounded number of the newest intents.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, cast, or_, select
from sqlalchemy.dialects.postgresql import JSONB, distinct_on
from sqlalchemy.orm import Session

from domain.intents import derive_intent_state
from domain.policy import Outcome
from domain.settlement import AWAITING_ANY, Awaiting
from domain.states import AttemptState
from ledger.models import Attempt, Intent, PolicyDecision

SCAN_LIMIT = 5000
"""At most this many intents are read per call when a state filter is given."""


def derive_states(session: Session, intents: list[Intent], now: datetime) -> dict[str, str]:
    """The derived state of many intents, in two queries instead of three per intent."""
    ids = [i.id for i in intents]
    if not ids:
        return {}
    attempt_states: dict[str, list[AttemptState]] = defaultdict(list)
    for intent_id, state in session.execute(
        select(Attempt.intent_id, Attempt.state).where(Attempt.intent_id.in_(ids))
    ):
        attempt_states[intent_id].append(AttemptState(state))
    last: dict[str, str] = dict(
        session.execute(
            select(PolicyDecision.intent_id, PolicyDecision.outcome)
            .where(PolicyDecision.intent_id.in_(ids))
            .order_by(PolicyDecision.intent_id, PolicyDecision.id.desc())
            .ext(distinct_on(PolicyDecision.intent_id))
        ).all()
    )
    return {
        intent.id: state_of(
            attempt_states.get(intent.id, []),
            last.get(intent.id),
            cancelled_at=intent.cancelled_at,
            expires_at=intent.expires_at,
            send_at=intent.send_at,
            now=now,
        )
        for intent in intents
    }


def state_of(
    attempts: Sequence[AttemptState],
    last_decision: str | None,
    *,
    cancelled_at: datetime | None,
    expires_at: datetime | None,
    send_at: datetime | None,
    now: datetime,
) -> str:
    """The derived state of one intent from its facts as the ledger records them."""
    return derive_intent_state(
        attempt_states=attempts,
        last_decision=Outcome(last_decision) if last_decision else None,
        cancelled=cancelled_at is not None,
        expired=expires_at is not None and expires_at <= now and not attempts,
        scheduled=send_at is not None and send_at > now,
    ).value


def to_recipient(lookup_hmac: str) -> ColumnElement[bool]:
    """Intents to one destination, by its lookup HMAC.

    The console's recipient search and `POST /v1/recipients/intents` both filter with this.
    """
    return or_(
        Intent.sms_destination_hmac == lookup_hmac, Intent.email_destination_hmac == lookup_hmac
    )


def waiting_for(awaiting: str) -> ColumnElement[bool]:
    """Intents whose workflow waits for an operator.

    For `awaiting` (a member of `domain.settlement.Awaiting`), or for anything (`any`);
    any other value raises ValueError. The console's list and GET /v1/intents both filter
    with this; the ledger knows it without asking Temporal (the workflow records it,
    `ledger.settlements.record_waiting`).
    """
    if awaiting == AWAITING_ANY:
        return Intent.awaiting.is_not(None)
    return Intent.awaiting == Awaiting(awaiting).value


@dataclass(frozen=True)
class ListedPage:
    """One page of a filtered intent list."""

    items: list[tuple[Intent, str]]
    """Newest first: each intent with its derived state."""
    scanned: int
    truncated: bool
    """The scan limit was reached before `limit` matches were found."""


def list_intents(
    session: Session,
    *,
    state: str | None = None,
    channel: str | None = None,
    region: str | None = None,
    event_type: str | None = None,
    since: datetime | None = None,
    created_by: str | None = None,
    recipient_hmac: str | None = None,
    awaiting: str | None = None,
    limit: int = 50,
    scan_limit: int = SCAN_LIMIT,
) -> ListedPage:
    """Newest first. SQL filters first; the derived state is filtered after, in batches.

    `created_by` keeps one principal's intents (an app's own); `recipient_hmac` those to
    one destination (the lookup HMAC of its phone number or address); `awaiting` those
    whose workflow waits for an operator (`waiting_for`).
    """
    query = select(Intent).order_by(Intent.created_at.desc(), Intent.id.desc())
    if created_by is not None:
        query = query.where(Intent.created_by == created_by)
    if recipient_hmac is not None:
        query = query.where(to_recipient(recipient_hmac))
    if channel:
        query = query.where(cast(Intent.channel_plan, JSONB).contains({"channels": [channel]}))
    if region:
        query = query.where(Intent.region == region)
    if event_type:
        query = query.where(Intent.event_type == event_type)
    if since:
        query = query.where(Intent.created_at >= since)
    if awaiting:
        query = query.where(waiting_for(awaiting))
    now = datetime.now(UTC)
    batch = limit if state is None else max(limit, 200)
    items: list[tuple[Intent, str]] = []
    scanned = 0
    while len(items) < limit and scanned < scan_limit:
        rows = list(
            session.execute(query.offset(scanned).limit(min(batch, scan_limit - scanned)))
            .scalars()
            .all()
        )
        if not rows:
            break
        scanned += len(rows)
        states = derive_states(session, rows, now)
        for intent in rows:
            if state is not None and states[intent.id] != state:
                continue
            items.append((intent, states[intent.id]))
            if len(items) == limit:
                break
        if len(rows) < batch:
            break
    return ListedPage(items, scanned, len(items) < limit and scanned >= scan_limit)
