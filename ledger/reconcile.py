"""Reconciliation: what in the ledger needs a human (or a sweeper) to look at it.

`find` reads the ledger and lists, oldest first and with ages, every row of these kinds:

=============================  =================================================================
kind                           what it means (thresholds are keyword arguments of `find`)
=============================  =================================================================
intent_without_attempt         recorded more than `grace` ago (and due: send-at and any deferral's
                               next-eligible time passed by `grace`), not cancelled, not expired,
                               and no attempt. An intent whose latest decision is `deny` is
                               resolved (denied), not trouble; one whose latest is `defer` is
                               trouble only once its next-eligible time is `grace` behind us.
prepared_without_remote_id     an attempt still `prepared` more than `grace` after it was
                               prepared, with neither a remote id nor a Message-ID.
submitted_past_check           an attempt `submitted` (or an SMS `sent`, waiting for its
                               receipt) that nothing has been heard about for
                               `submitted_check_after`. An email `sent` is final (SMTP gives no
                               receipts) and is not listed.
conflicting_observation        an observation flagged `conflict` (two different terminal states).
cancelled_then_delivered       an attempt of a cancelled intent with a `delivered` observation
                               observed after the cancel (the race the ledger keeps).
unknown_outcome                an attempt in `unknown` for longer than `unknown_older_than`.
orphan_observation             an observation with no attempt (e.g. a receipt for a message id
                               nobody knew when it arrived), older than `grace`.
=============================  =================================================================

`ledger.review_items.record_review_items` turns rows into review items, each (kind,
subject) once; the kinds are named there.

Three more kinds need Temporal as well as the ledger, so they have their own pass,
`reconcile_workflows`, run by the reconcile schedule after `find` and by `herald
reconcile --workflows`. They are the differences a restore leaves (docs/operations.md,
"Backup and restore"): a ledger restored older than Temporal has running workflows whose
intent it lacks; a Temporal restored older than the ledger lacks the workflows of open
intents.

=============================  =================================================================
workflow_closed_intent_open    the intent is still open in the ledger (pending, scheduled,
                               deferred or sending, not cancelled) more than `grace` after it
                               was recorded, and its workflow is closed: terminated (which the
                               workflow cannot see, so it recorded nothing), timed out, or
                               ended without settling the ledger. Filed once, and marked in
                               the ledger with a `workflow-closed` action (operator
                               `reconciler`) that the timeline shows.
intent_without_workflow        the same open intent, its outbox row marked started (so the
                               relay will not start it), and Temporal has no workflow of its
                               id at all. Filed once, marked with a `workflow-missing` action.
workflow_without_intent        a NotificationWorkflow running in Temporal (started more than
                               `grace` ago) whose workflow id is no intent's, archived ones
                               included. Subject `workflow:<id>`; no intent to mark.
=============================  =================================================================

And one kind is filed by the activity that met it, not by a sweep:

=============================  =================================================================
data_key_unreadable            a ledger activity could not read the intent's contact data with
                               its worker's key ring (a key id the ring lacks, or a ciphertext
                               that does not open); the intent stopped (ledger.keys).
=============================  =================================================================
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, exists, func, or_, select
from sqlalchemy.orm import Session, aliased, sessionmaker

from domain import channels
from domain.clocks import iso_utc
from domain.policy import Outcome
from domain.states import AttemptState
from ledger.listing import derive_states
from ledger.models import (
    ArchivedIntent,
    Attempt,
    Intent,
    Observation,
    OperatorAction,
    Outbox,
    PolicyDecision,
)
from ledger.operator_actions import record_operator_action
from ledger.review_items import (
    CANCELLED_THEN_DELIVERED,
    CONFLICTING_OBSERVATION,
    INTENT_WITHOUT_ATTEMPT,
    INTENT_WITHOUT_WORKFLOW,
    ORPHAN_OBSERVATION,
    PREPARED_WITHOUT_REMOTE_ID,
    SUBMITTED_PAST_CHECK,
    UNKNOWN_OUTCOME,
    WORKFLOW_CLOSED_INTENT_OPEN,
    WORKFLOW_WITHOUT_INTENT,
    ReviewRow,
    record_review_items,
)

OPEN_STATES = ("pending", "scheduled", "deferred", "sending")
"""Derived intent states (domain.intents) that still expect the workflow to act."""
DESCRIBE_CONCURRENCY = 10
WORKFLOW_CLOSED = "workflow-closed"
"""The operator action that marks an open intent whose workflow was found closed."""
WORKFLOW_MISSING = "workflow-missing"
"""The operator action that marks an open intent whose workflow Temporal does not have."""
MARK_OF_KIND = {
    WORKFLOW_CLOSED_INTENT_OPEN: WORKFLOW_CLOSED,
    INTENT_WITHOUT_WORKFLOW: WORKFLOW_MISSING,
}

WorkflowStatus = tuple[str, datetime | None]
"""A workflow's status name (`RUNNING`, `TERMINATED`, ...) and its close time."""
DescribeWorkflow = Callable[[str], Awaitable[WorkflowStatus | None]]
"""Looks a workflow id up in Temporal; None when Temporal has no such workflow."""
ListRunning = Callable[[int], Awaitable[list[tuple[str, datetime | None]]]]
"""Up to n running notification workflows in Temporal: (workflow id, start time)."""

DEFAULT_GRACE = timedelta(minutes=5)
DEFAULT_UNKNOWN_OLDER_THAN = timedelta(hours=1)
DEFAULT_SUBMITTED_CHECK_AFTER = timedelta(minutes=15)
DEFAULT_LIMIT = 1000


def find(
    session: Session,
    *,
    now: datetime,
    unknown_older_than: timedelta = DEFAULT_UNKNOWN_OLDER_THAN,
    submitted_check_after: timedelta = DEFAULT_SUBMITTED_CHECK_AFTER,
    grace: timedelta = DEFAULT_GRACE,
    limit: int = DEFAULT_LIMIT,
) -> list[ReviewRow]:
    """Every review row of every kind, by kind then oldest first; at most `limit` per kind."""
    if now.tzinfo is None:
        raise ValueError("now must carry a timezone")
    rows: list[ReviewRow] = []
    rows += _intents_without_attempt(session, now, grace, limit)
    rows += _prepared_without_remote_id(session, now, grace, limit)
    rows += _submitted_past_check(session, now, submitted_check_after, limit)
    rows += _conflicting_observations(session, now, limit)
    rows += _cancelled_then_delivered(session, now, limit)
    rows += _unknown_outcomes(session, now, unknown_older_than, limit)
    rows += _orphan_observations(session, now, grace, limit)
    return rows


# --- the kinds ----------------------------------------------------------------------------


def _row(kind: str, subject: str, since: datetime, now: datetime, **kw: Any) -> ReviewRow:
    return ReviewRow(kind=kind, subject=subject, since=since, age=now - since, **kw)


def _intents_without_attempt(
    session: Session, now: datetime, grace: timedelta, limit: int
) -> list[ReviewRow]:
    # The latest decision of each candidate, looked up per intent through its index.
    other = aliased(PolicyDecision)
    newest = select(func.max(other.id)).where(other.intent_id == Intent.id).scalar_subquery()
    due = now - grace
    query = (
        select(
            Intent.id,
            Intent.business_key,
            Intent.created_at,
            Intent.send_at,
            PolicyDecision.outcome,
            PolicyDecision.channel,
            PolicyDecision.next_eligible_at,
        )
        .outerjoin(PolicyDecision, PolicyDecision.id == newest)
        .where(
            ~exists().where(Attempt.intent_id == Intent.id),
            Intent.cancelled_at.is_(None),
            Intent.created_at <= due,
            or_(Intent.send_at.is_(None), Intent.send_at <= due),
            or_(Intent.expires_at.is_(None), Intent.expires_at > now),
            or_(PolicyDecision.outcome.is_(None), PolicyDecision.outcome != Outcome.DENY.value),
            or_(
                PolicyDecision.outcome.is_(None),
                PolicyDecision.outcome != Outcome.DEFER.value,
                PolicyDecision.next_eligible_at.is_(None),
                PolicyDecision.next_eligible_at <= due,
            ),
        )
        .order_by(Intent.created_at)
        .limit(limit)
    )
    out = []
    for r in session.execute(query):
        since = max(t for t in (r.created_at, r.send_at, r.next_eligible_at) if t is not None)
        out.append(
            _row(
                INTENT_WITHOUT_ATTEMPT,
                f"intent:{r.id}",
                since,
                now,
                intent_id=r.id,
                business_key=r.business_key,
                detail={
                    "last_decision": r.outcome,
                    "last_decision_channel": r.channel,
                    "next_eligible_at": iso_utc(r.next_eligible_at),
                },
            )
        )
    return sorted(out, key=lambda row: row.since)


def _attempt_columns() -> tuple[Any, ...]:
    return (
        Attempt.id,
        Attempt.token,
        Attempt.channel,
        Attempt.state,
        Attempt.remote_id,
        Intent.id.label("intent_id"),
        Intent.business_key,
    )


def _attempt_detail(r: Any, **extra: Any) -> dict[str, Any]:
    return {
        "token": r.token,
        "channel": r.channel,
        "state": r.state,
        "remote_id": r.remote_id,
        **extra,
    }


def _prepared_without_remote_id(
    session: Session, now: datetime, grace: timedelta, limit: int
) -> list[ReviewRow]:
    query = (
        select(*_attempt_columns(), Attempt.prepared_at, Attempt.send_started_at)
        .join(Intent, Intent.id == Attempt.intent_id)
        .where(
            Attempt.state == AttemptState.PREPARED.value,
            Attempt.remote_id.is_(None),
            Attempt.message_id.is_(None),
            Attempt.prepared_at <= now - grace,
        )
        .order_by(Attempt.prepared_at)
        .limit(limit)
    )
    return [
        _row(
            PREPARED_WITHOUT_REMOTE_ID,
            f"attempt:{r.id}",
            r.prepared_at,
            now,
            intent_id=r.intent_id,
            business_key=r.business_key,
            # A send that started may have reached the provider: look it up before resending.
            detail=_attempt_detail(r, send_started_at=iso_utc(r.send_started_at)),
        )
        for r in session.execute(query)
    ]


def _submitted_past_check(
    session: Session, now: datetime, check_after: timedelta, limit: int
) -> list[ReviewRow]:
    heard = (
        select(Observation.attempt_id, func.max(Observation.observed_at).label("observed_at"))
        .where(Observation.attempt_id.is_not(None))
        .group_by(Observation.attempt_id)
        .subquery()
    )
    last_heard = func.greatest(
        heard.c.observed_at, Attempt.last_status_at, Attempt.submitted_at, Attempt.prepared_at
    )
    query = (
        select(*_attempt_columns(), last_heard.label("last_heard"))
        .join(Intent, Intent.id == Attempt.intent_id)
        .outerjoin(heard, heard.c.attempt_id == Attempt.id)
        .where(
            or_(
                Attempt.state == AttemptState.SUBMITTED.value,
                and_(
                    Attempt.state == AttemptState.SENT.value,
                    Attempt.channel.in_(channels.awaiting_delivery_report()),
                ),
            ),
            last_heard <= now - check_after,
        )
        .order_by(last_heard)
        .limit(limit)
    )
    return [
        _row(
            SUBMITTED_PAST_CHECK,
            f"attempt:{r.id}",
            r.last_heard,
            now,
            intent_id=r.intent_id,
            business_key=r.business_key,
            detail=_attempt_detail(r, last_heard_at=iso_utc(r.last_heard)),
        )
        for r in session.execute(query)
    ]


def _observation_query() -> Any:
    return (
        select(
            Observation.id.label("observation_id"),
            Observation.source,
            Observation.raw_status,
            Observation.normalized_status,
            Observation.provider_code,
            Observation.observed_at,
            *_attempt_columns(),
        )
        .join(Attempt, Attempt.id == Observation.attempt_id)
        .join(Intent, Intent.id == Attempt.intent_id)
    )


def _conflicting_observations(session: Session, now: datetime, limit: int) -> list[ReviewRow]:
    query = (
        _observation_query()
        .where(Observation.conflict.is_(True))
        .order_by(Observation.observed_at)
        .limit(limit)
    )
    return [
        _row(
            CONFLICTING_OBSERVATION,
            f"observation:{r.observation_id}",
            r.observed_at,
            now,
            intent_id=r.intent_id,
            business_key=r.business_key,
            detail=_attempt_detail(
                r,
                observation_id=r.observation_id,
                source=r.source,
                observed_status=r.normalized_status,
                raw_status=r.raw_status,
                provider_code=r.provider_code,
            ),
        )
        for r in session.execute(query)
    ]


def _cancelled_then_delivered(session: Session, now: datetime, limit: int) -> list[ReviewRow]:
    first = func.min(Observation.observed_at).label("first_delivered_at")
    query = (
        select(*_attempt_columns(), Intent.cancelled_at, first)
        .join(Attempt, Attempt.id == Observation.attempt_id)
        .join(Intent, Intent.id == Attempt.intent_id)
        .where(
            Intent.cancelled_at.is_not(None),
            Observation.normalized_status == AttemptState.DELIVERED.value,
            Observation.observed_at > Intent.cancelled_at,
        )
        .group_by(*_attempt_columns(), Intent.cancelled_at)
        .order_by(first)
        .limit(limit)
    )
    return [
        _row(
            CANCELLED_THEN_DELIVERED,
            f"attempt:{r.id}",
            r.first_delivered_at,
            now,
            intent_id=r.intent_id,
            business_key=r.business_key,
            detail=_attempt_detail(r, cancelled_at=iso_utc(r.cancelled_at)),
        )
        for r in session.execute(query)
    ]


def _unknown_outcomes(
    session: Session, now: datetime, older_than: timedelta, limit: int
) -> list[ReviewRow]:
    became = func.coalesce(Attempt.last_status_at, Attempt.submitted_at, Attempt.prepared_at)
    query = (
        select(*_attempt_columns(), became.label("became_unknown_at"))
        .join(Intent, Intent.id == Attempt.intent_id)
        .where(Attempt.state == AttemptState.UNKNOWN.value, became <= now - older_than)
        .order_by(became)
        .limit(limit)
    )
    return [
        _row(
            UNKNOWN_OUTCOME,
            f"attempt:{r.id}",
            r.became_unknown_at,
            now,
            intent_id=r.intent_id,
            business_key=r.business_key,
            detail=_attempt_detail(r),
        )
        for r in session.execute(query)
    ]


def _orphan_observations(
    session: Session, now: datetime, grace: timedelta, limit: int
) -> list[ReviewRow]:
    query = (
        select(
            Observation.id,
            Observation.remote_id,
            Observation.source,
            Observation.raw_status,
            Observation.normalized_status,
            Observation.observed_at,
            Attempt.id.label("attempt_id"),
            Attempt.token,
            Intent.id.label("intent_id"),
            Intent.business_key,
        )
        .outerjoin(
            Attempt,
            and_(Observation.remote_id.is_not(None), Attempt.remote_id == Observation.remote_id),
        )
        .outerjoin(Intent, Intent.id == Attempt.intent_id)
        .where(Observation.attempt_id.is_(None), Observation.observed_at <= now - grace)
        .order_by(Observation.observed_at)
        .limit(limit)
    )
    return [
        _row(
            ORPHAN_OBSERVATION,
            f"observation:{r.id}",
            r.observed_at,
            now,
            intent_id=r.intent_id,
            business_key=r.business_key,
            detail={
                "observation_id": r.id,
                "remote_id": r.remote_id,
                "source": r.source,
                "raw_status": r.raw_status,
                "normalized_status": r.normalized_status,
                # An attempt that learned this remote id later: the receipt was never applied.
                "attempt_now_known": r.token,
            },
        )
        for r in session.execute(query)
    ]


# --- workflows closed under open intents (ledger + Temporal) ------------------------------


@dataclass(frozen=True)
class OpenIntent:
    """An open intent as `reconcile_workflows` compares it with Temporal."""

    intent_id: str
    business_key: str
    workflow_id: str
    state: str
    """Its derived state (one of OPEN_STATES)."""
    relay_pending: bool
    """Its outbox row is not marked started: the relay will start its workflow."""


def open_intents(
    session: Session, *, now: datetime, grace: timedelta, limit: int
) -> list[OpenIntent]:
    """The open intents recorded more than `grace` ago.

    Each intent recorded more than `grace` ago, not cancelled, not yet marked
    `workflow-closed` or `workflow-missing`, whose derived state is still open; oldest
    first.
    """
    marked = exists().where(
        OperatorAction.intent_id == Intent.id,
        OperatorAction.action.in_(MARK_OF_KIND.values()),
    )
    pending = exists().where(Outbox.intent_id == Intent.id, Outbox.started_at.is_(None))
    found = session.execute(
        select(Intent, pending.label("relay_pending"))
        .where(Intent.cancelled_at.is_(None), Intent.created_at <= now - grace, ~marked)
        .order_by(Intent.created_at)
        .limit(limit)
    ).all()
    candidates = [row[0] for row in found]
    states = derive_states(session, candidates, now)
    return [
        OpenIntent(i.id, i.business_key, i.workflow_id, states[i.id], bool(relay_pending))
        for i, relay_pending in found
        if states[i.id] in OPEN_STATES
    ]


async def reconcile_workflows(
    sessions: sessionmaker[Session],
    describe: DescribeWorkflow,
    *,
    now: datetime,
    grace: timedelta = DEFAULT_GRACE,
    limit: int = DEFAULT_LIMIT,
    running: ListRunning | None = None,
    record: bool = True,
) -> list[ReviewRow]:
    """File each difference between the ledger and Temporal as a review item.

    One pass: an open intent whose workflow is closed, or (its start recorded) missing
    from Temporal, and with `running`, each running notification workflow that no intent
    (nor tombstone) names. With `record`, each becomes a review item and an intent row is
    marked in the ledger (each once). Returns the rows found in this pass.
    """

    def read() -> list[OpenIntent]:
        with sessions() as session:
            return open_intents(session, now=now, grace=grace, limit=limit)

    candidates = await asyncio.to_thread(read)
    # A few lookups at a time: one pass may look at up to `limit` open intents.
    lookups = asyncio.Semaphore(DESCRIBE_CONCURRENCY)

    async def look(workflow_id: str) -> WorkflowStatus | None:
        async with lookups:
            return await describe(workflow_id)

    statuses = await asyncio.gather(*(look(c.workflow_id) for c in candidates))
    rows: list[ReviewRow] = []
    for open_intent, found in zip(candidates, statuses, strict=True):
        if found is not None and found[0] == "RUNNING":
            continue  # still working
        if found is None and open_intent.relay_pending:
            continue  # never started: the relay starts it (intent_without_attempt watches)
        rows.append(_workflow_row(open_intent, found, now))
    if running is not None:
        rows += await _workflows_without_intent(
            sessions, running, now=now, grace=grace, limit=limit
        )
    if rows and record:
        await asyncio.to_thread(_record_workflow_rows, sessions, rows, now)
    return rows


def _workflow_row(
    open_intent: OpenIntent, found: WorkflowStatus | None, now: datetime
) -> ReviewRow:
    if found is None:
        return _row(
            INTENT_WITHOUT_WORKFLOW,
            f"intent:{open_intent.intent_id}",
            now,
            now,
            intent_id=open_intent.intent_id,
            business_key=open_intent.business_key,
            detail={"workflow_status": "missing", "intent_state": open_intent.state},
        )
    status, closed_at = found
    return _row(
        WORKFLOW_CLOSED_INTENT_OPEN,
        f"intent:{open_intent.intent_id}",
        closed_at or now,
        now,
        intent_id=open_intent.intent_id,
        business_key=open_intent.business_key,
        detail={"workflow_status": status.lower(), "intent_state": open_intent.state},
    )


async def _workflows_without_intent(
    sessions: sessionmaker[Session],
    running: ListRunning,
    *,
    now: datetime,
    grace: timedelta,
    limit: int,
) -> list[ReviewRow]:
    workflows = [
        (workflow_id, started)
        for workflow_id, started in await running(limit)
        if started is None or started <= now - grace
    ]

    def known(ids: list[str]) -> set[str]:
        with sessions() as session:
            live = set(
                session.execute(
                    select(Intent.workflow_id).where(Intent.workflow_id.in_(ids))
                ).scalars()
            )
            archived = session.execute(
                select(ArchivedIntent.workflow_id).where(ArchivedIntent.workflow_id.in_(ids))
            ).scalars()
            return live | set(archived)

    found = await asyncio.to_thread(known, [w for w, _ in workflows])
    return [
        _row(
            WORKFLOW_WITHOUT_INTENT,
            f"workflow:{workflow_id}",
            started or now,
            now,
            detail={"workflow_id": workflow_id, "workflow_status": "running"},
        )
        for workflow_id, started in workflows
        if workflow_id not in found
    ]


def _record_workflow_rows(
    sessions: sessionmaker[Session], rows: list[ReviewRow], now: datetime
) -> None:
    with sessions.begin() as session:
        record_review_items(session, rows, now)
        for row in rows:
            mark = MARK_OF_KIND.get(row.kind)
            if mark is None or row.intent_id is None:
                continue
            record_operator_action(
                session,
                intent_id=row.intent_id,
                action=mark,
                operator="reconciler",
                reason=f"the workflow is {row.detail['workflow_status']} while the "
                f"intent is {row.detail['intent_state']}; review it",
                outcome="marked",
                at=now,
                detail={**row.detail, "closed_at": iso_utc(row.since)},
            )
