"""Review items: what a person should look at, each (kind, subject) filed once.

The sweep (`ledger.reconcile.find`, `reconcile_workflows`) files them, and so do the
moments that need a person at once: the horizon verdict of an unknown attempt
(`ledger.settlements.record_waiting`), a provider's terminal that replaced a settlement
(`file_replaced_settlement`, from `ledger.observations`), an activity that cannot read an
intent's contact data (`ledger.keys`). An item about an unresolved attempt closes when a
settlement (`close_items`) or a later observation (`close_settled_items`, the sweep's half)
settles the attempt, or with an operator's "no action".

An operator also opens one on demand, for one attempt of one intent: one who sees that an
attempt needs a person sooner (a recipient says nothing came while the send is still
`submitted`, an unknown outcome to hand to the next shift) opens it from the intent's
page. The kind is the one the sweep would file for the attempt as it is now, so the item
joins its reconciliation set and has that set's lifecycle.

=============================  ================================================================
the attempt is                 the item opened
=============================  ================================================================
unknown                        unknown_outcome
prepared                       prepared_without_remote_id
submitted, or an SMS `sent`    submitted_past_check
anything else                  none: the outcome is final (an email `sent` included: SMTP
                               reports nothing after the hand-off); the request is refused
=============================  ================================================================

One (kind, subject) is one review item (`uq_review_item_kind_subject`): an open one refuses
the request and names it; a closed one is opened again, its earlier resolution kept in the
item's `detail.history` (and in the audit rows of its resolution). Every request, accepted
or refused, is an operator action on the intent naming the principal; an accepted one
also writes an audit row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from domain import channels
from domain.clocks import iso_utc
from domain.principals import Access, Principal
from domain.states import AttemptState
from ledger import repository as repo
from ledger.errors import NotAllowed
from ledger.models import Attempt, Intent, Observation, ReviewItem
from ledger.operator_actions import record_operator_action
from ledger.principals import record_audit
from ledger.transactions import rows_changed

# The kinds; what each means, and who files it: ledger.reconcile's docstring and
# docs/ledger.md, "Reconciliation".
INTENT_WITHOUT_ATTEMPT = "intent_without_attempt"
PREPARED_WITHOUT_REMOTE_ID = "prepared_without_remote_id"
SUBMITTED_PAST_CHECK = "submitted_past_check"
CONFLICTING_OBSERVATION = "conflicting_observation"
CANCELLED_THEN_DELIVERED = "cancelled_then_delivered"
UNKNOWN_OUTCOME = "unknown_outcome"
ORPHAN_OBSERVATION = "orphan_observation"
WORKFLOW_CLOSED_INTENT_OPEN = "workflow_closed_intent_open"
INTENT_WITHOUT_WORKFLOW = "intent_without_workflow"
WORKFLOW_WITHOUT_INTENT = "workflow_without_intent"
DATA_KEY_UNREADABLE = "data_key_unreadable"
"""Filed by an activity whose data key ring cannot read the intent (ledger.keys)."""

KINDS = (
    INTENT_WITHOUT_ATTEMPT,
    PREPARED_WITHOUT_REMOTE_ID,
    SUBMITTED_PAST_CHECK,
    CONFLICTING_OBSERVATION,
    CANCELLED_THEN_DELIVERED,
    UNKNOWN_OUTCOME,
    ORPHAN_OBSERVATION,
    WORKFLOW_CLOSED_INTENT_OPEN,
    INTENT_WITHOUT_WORKFLOW,
    WORKFLOW_WITHOUT_INTENT,
    DATA_KEY_UNREADABLE,
)

CLOSING_KINDS = (
    UNKNOWN_OUTCOME,
    PREPARED_WITHOUT_REMOTE_ID,
    SUBMITTED_PAST_CHECK,
)
"""Review items about an unresolved attempt: a settlement or a later observation closes them."""


@dataclass(frozen=True)
class ReviewRow:
    """One thing the reconciler found."""

    kind: str
    """One of `KINDS`."""
    subject: str
    """What it is about: `intent:<id>`, `attempt:<id>` or `observation:<id>`."""
    since: datetime
    """When the trouble began (the moment the thing became overdue or was observed)."""
    age: timedelta
    """`now - since` at the time of `find`."""
    intent_id: str | None = None
    business_key: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    """Ids, states and times only: never PII."""

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON: times as ISO 8601, the age in seconds and in words."""
        return {
            "kind": self.kind,
            "subject": self.subject,
            "since": iso_utc(self.since),
            "age_seconds": round(self.age.total_seconds(), 3),
            "age": format_age(self.age),
            "intent_id": self.intent_id,
            "business_key": self.business_key,
            "detail": self.detail,
        }


def format_age(age: timedelta) -> str:
    """An age as a person reads it (`2h 5m`)."""
    seconds = max(int(age.total_seconds()), 0)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"


def record_review_items(session: Session, rows: list[ReviewRow], now: datetime) -> int:
    """Insert a review item per row unless one exists for its (kind, subject); count new ones."""
    if not rows:
        return 0
    # Each item carries its intent's event type and category, so the console shows a
    # set's exposure from the items alone (no join over the intents on every page).
    intent_ids = list({row.intent_id for row in rows if row.intent_id})
    exposure = {
        i: (event_type, category)
        for i, event_type, category in session.execute(
            select(Intent.id, Intent.event_type, Intent.category).where(Intent.id.in_(intent_ids))
        )
    }
    values = [
        {
            "kind": row.kind,
            "subject": row.subject,
            "detail": {
                **row.detail,
                "intent_id": row.intent_id,
                "business_key": row.business_key,
                "since": iso_utc(row.since),
                "event_type": exposure.get(row.intent_id or "", (None, None))[0],
                "category": exposure.get(row.intent_id or "", (None, None))[1],
            },
            "found_at": now,
            "intent_id": row.intent_id,
            "event_type": exposure.get(row.intent_id or "", (None, None))[0],
            "category": exposure.get(row.intent_id or "", (None, None))[1],
        }
        for row in rows
    ]
    inserted = session.execute(
        pg_insert(ReviewItem)
        .values(values)
        .on_conflict_do_nothing(constraint="uq_review_item_kind_subject")
        .returning(ReviewItem.id)
    ).scalars()
    return len(list(inserted))


def file_replaced_settlement(session: Session, *, observation_id: int, at: datetime) -> None:
    """File the review item of a provider terminal that replaced a settlement, at once.

    The sweep would find it too (the observation is flagged as a conflict).
    """
    row = session.execute(
        select(Observation, Attempt, Intent)
        .join(Attempt, Attempt.id == Observation.attempt_id)
        .join(Intent, Intent.id == Attempt.intent_id)
        .where(Observation.id == observation_id)
    ).one_or_none()
    if row is None:
        return
    obs, attempt, intent = row
    record_review_items(
        session,
        [
            ReviewRow(
                kind=CONFLICTING_OBSERVATION,
                subject=f"observation:{obs.id}",
                since=obs.observed_at,
                age=at - obs.observed_at,
                intent_id=intent.id,
                business_key=intent.business_key,
                detail={
                    "attempt_token": attempt.token,
                    "channel": attempt.channel,
                    "observation_id": obs.id,
                    "source": obs.source,
                    "observed_status": obs.normalized_status,
                    "replaced": "an operator's settlement",
                },
            )
        ],
        at,
    )


def close_settled_items(session: Session, *, at: datetime) -> list[tuple[int, str]]:
    """The sweep's half of the lifecycle: close the items a later observation settled.

    Each open item about an unresolved attempt whose attempt is no longer in trouble is
    closed, its note naming the observation. Returns (item id, note) pairs.
    """
    trouble = {
        UNKNOWN_OUTCOME: (AttemptState.UNKNOWN.value,),
        PREPARED_WITHOUT_REMOTE_ID: (AttemptState.PREPARED.value,),
        SUBMITTED_PAST_CHECK: (AttemptState.SUBMITTED.value, AttemptState.SENT.value),
    }
    attempt_id = func.cast(func.split_part(ReviewItem.subject, ":", 2), Attempt.id.type)
    rows = session.execute(
        select(ReviewItem.id, ReviewItem.kind, Attempt.id.label("attempt_id"), Attempt.state)
        .join(Attempt, Attempt.id == attempt_id)
        .where(
            ReviewItem.resolved_at.is_(None),
            ReviewItem.kind.in_(CLOSING_KINDS),
            ReviewItem.subject.like("attempt:%"),
        )
    ).all()
    closed: list[tuple[int, str]] = []
    for row in rows:
        if row.state in trouble[row.kind]:
            continue
        settling = session.execute(
            select(Observation.id, Observation.source, Observation.raw_status)
            .where(Observation.attempt_id == row.attempt_id, Observation.applied.is_(True))
            .order_by(Observation.id.desc())
            .limit(1)
        ).one_or_none()
        note = f"closed by the sweep: the attempt is now {row.state}" + (
            f" (observation #{settling.id}, {settling.source} {settling.raw_status})"
            if settling
            else ""
        )
        session.execute(
            update(ReviewItem)
            .where(ReviewItem.id == row.id, ReviewItem.resolved_at.is_(None))
            .values(resolved_at=at, resolved_by="reconciler", resolution_note=note)
        )
        closed.append((row.id, note))
    return closed


def close_items(session: Session, *, attempt_id: int, at: datetime, by: str, note: str) -> int:
    """Close the open review items about this attempt's unresolved outcome."""
    result = session.execute(
        update(ReviewItem)
        .where(
            ReviewItem.subject == f"attempt:{attempt_id}",
            ReviewItem.kind.in_(CLOSING_KINDS),
            ReviewItem.resolved_at.is_(None),
        )
        .values(resolved_at=at, resolved_by=by[:120], resolution_note=note)
    )
    return int(getattr(result, "rowcount", 0) or 0)


def resolve(session: Session, item_id: int, *, by: Principal, note: str, at: datetime) -> bool:
    """A person's "no action": close the open item with their note, and audit it.

    False when there is no such item or it is already closed (nothing is written).
    """
    changed = rows_changed(
        session.execute(
            update(ReviewItem)
            .where(ReviewItem.id == item_id, ReviewItem.resolved_at.is_(None))
            .values(resolved_at=at, resolved_by=by.name, resolution_note=note)
        )
    )
    if changed:
        record_audit(
            session,
            by=by,
            action="review_item.resolved",
            subject=f"review_item:{item_id}",
            at=at,
            detail={"note": note},
        )
    return bool(changed)


# --- opened on demand ---------------------------------------------------------------


OPEN_REVIEW = "open-review"
"""The operator action that records a request to open a review item."""
FILED_BY = "operator"
"""`detail.filed_by` of an item an operator opened (the sweep's say `reconciler`)."""


def kind_for(channel: str, state: str) -> str | None:
    """The review kind the sweep files for an attempt in `state`; None: its outcome is final."""
    if state == AttemptState.UNKNOWN.value:
        return UNKNOWN_OUTCOME
    if state == AttemptState.PREPARED.value:
        return PREPARED_WITHOUT_REMOTE_ID
    if state == AttemptState.SUBMITTED.value or (
        state == AttemptState.SENT.value and channel in channels.awaiting_delivery_report()
    ):
        return SUBMITTED_PAST_CHECK
    return None


@dataclass(frozen=True)
class Option:
    """What opening a review item would do for one channel's latest attempt."""

    channel: str
    number: int
    state: str
    kind: str | None
    """The kind it would open (None: the outcome is final, nothing to open)."""
    open_item: int | None = None
    """The id of the open item of that kind for the attempt, if there is one."""

    @property
    def openable(self) -> bool:
        """Whether the page offers to open an item for it."""
        return self.kind is not None and self.open_item is None


def _latest(session: Session, intent_id: str, channel: str, *, lock: bool) -> Attempt | None:
    query = (
        select(Attempt)
        .where(Attempt.intent_id == intent_id, Attempt.channel == channel)
        .order_by(Attempt.number.desc(), Attempt.id.desc())
        .limit(1)
        # Observations write attempts with core statements: read the row as it is now.
        .execution_options(populate_existing=True)
    )
    return session.execute(query.with_for_update() if lock else query).scalar_one_or_none()


def _item(session: Session, kind: str, attempt_id: int, *, lock: bool) -> ReviewItem | None:
    query = select(ReviewItem).where(
        ReviewItem.kind == kind, ReviewItem.subject == f"attempt:{attempt_id}"
    )
    return session.execute(query.with_for_update() if lock else query).scalar_one_or_none()


def options(session: Session, intent_id: str) -> list[Option]:
    """Per channel with an attempt, its latest attempt and what opening an item would do."""
    found = []
    for channel in channels.NAMES:
        attempt = _latest(session, intent_id, channel, lock=False)
        if attempt is None:
            continue
        kind = kind_for(channel, attempt.state)
        item = _item(session, kind, attempt.id, lock=False) if kind else None
        found.append(
            Option(
                channel,
                attempt.number,
                attempt.state,
                kind,
                item.id if item is not None and item.resolved_at is None else None,
            )
        )
    return found


@dataclass(frozen=True)
class Opened:
    """What came of one request to open a review item."""

    refused: str = ""
    """Why nothing was opened, in a sentence (empty: opened)."""
    item_id: int | None = None
    kind: str = ""
    attempt_token: str = ""
    reopened: bool = False
    """An item of that kind for the attempt had been closed: it is open again."""


def open_review_item(
    session: Session,
    *,
    intent_id: str,
    channel: str,
    reason: str,
    by: Principal,
    at: datetime,
) -> Opened:
    """Open a review item for the channel's latest attempt of the intent.

    In the caller's transaction, recorded under `by` (an operator or admin; NotAllowed
    otherwise). Raises `NotFound` for no such intent. A refusal is recorded (an operator
    action `open-review`, refused, with why) and returned.
    """
    if not by.may(Access.OPERATE):
        raise NotAllowed(f"opening a review item needs the operator role; {by.name} is {by.role}")
    intent = repo.get_intent(session, intent_id)
    attempt = _latest(session, intent.id, channel, lock=True)
    kind = kind_for(channel, attempt.state) if attempt is not None else None
    item = _item(session, kind, attempt.id, lock=True) if attempt is not None and kind else None
    what = f"the {channel} attempt #{attempt.number}" if attempt is not None else ""
    why = ""
    if attempt is None:
        why = f"the intent has no {channel} attempt: there is nothing to review"
    elif kind is None:
        why = (
            f"{what} is {attempt.state}: its outcome is final, so no review item of the "
            "reconciliation sets applies to it"
        )
    elif item is not None and item.resolved_at is None:
        why = f"review item #{item.id} ({kind}) is already open for {what}"
    base: dict[str, Any] = {"channel": channel}
    if attempt is not None:
        base |= {"attempt": attempt.token, "state": attempt.state}

    def recorded(outcome: str, detail: dict[str, Any]) -> None:
        record_operator_action(
            session,
            intent_id=intent.id,
            action=OPEN_REVIEW,
            operator=by.name,
            operator_role=by.role.value,
            reason=reason,
            outcome=outcome,
            at=at,
            detail={**base, **detail},
        )

    if why:
        recorded("refused", {**({"kind": kind} if kind else {}), "why": why})
        return Opened(refused=why, kind=kind or "", attempt_token=attempt.token if attempt else "")
    assert attempt is not None and kind is not None
    opened = {
        "attempt_token": attempt.token,
        "channel": channel,
        "number": attempt.number,
        "state": attempt.state,
        "filed_by": FILED_BY,
        "opened_by": by.name,
        "reason": reason,
    }
    reopened = item is not None
    if item is not None:
        # Closed before: open it again, keeping what closed it.
        earlier = {
            "found_at": iso_utc(item.found_at),
            "resolved_at": iso_utc(item.resolved_at),
            "resolved_by": item.resolved_by,
            "resolution_note": item.resolution_note,
        }
        detail = dict(item.detail or {})
        item.detail = {
            **detail,
            **opened,
            "since": iso_utc(at),
            "history": [*detail.get("history", []), earlier],
        }
        item.found_at, item.resolved_at = at, None
        item.resolved_by = item.resolution_note = None
        session.flush()
        item_id = item.id
    else:
        record_review_items(
            session,
            [
                ReviewRow(
                    kind=kind,
                    subject=f"attempt:{attempt.id}",
                    since=at,
                    age=at - at,
                    intent_id=intent.id,
                    business_key=intent.business_key,
                    detail=opened,
                )
            ],
            at,
        )
        # The attempt's row lock (above) makes a second request for it wait for this one
        # and then find the item open.
        new = _item(session, kind, attempt.id, lock=False)
        assert new is not None
        item_id = new.id
    recorded("accepted", {"kind": kind, "item": item_id, "reopened": str(reopened).lower()})
    record_audit(
        session,
        by=by,
        action="review_item.reopened" if reopened else "review_item.opened",
        subject=f"review_item:{item_id}",
        at=at,
        detail={
            "kind": kind,
            "attempt": f"attempt:{attempt.id}",
            "intent_id": intent.id,
            "reason": reason,
        },
    )
    return Opened(item_id=item_id, kind=kind, attempt_token=attempt.token, reopened=reopened)
