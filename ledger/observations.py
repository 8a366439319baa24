"""Observations: what a provider, a poll, a lookup or an operator says about an attempt.

Every receipt, send answer, poll and settlement becomes one append-only, deduplicated
observation, applied to its attempt by compare-and-set through the one transition
function (`domain.states.apply`), never decided in SQL. An observation that names no
attempt we know is kept as orphan evidence and adopted when the attempt's remote id is
learned.

The hot paths here write through the Core tables: an ORM-enabled INSERT or UPDATE also runs
the ORM's bulk machinery and session synchronisation, which these statements never need.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from domain import states
from domain.states import AttemptState, Verdict
from ledger import metrics, review_items
from ledger.models import Attempt, Intent, Observation
from ledger.transactions import rows_changed

_ATTEMPTS = cast(Table, Attempt.__table__)
_OBSERVATIONS = cast(Table, Observation.__table__)
_INTENTS = cast(Table, Intent.__table__)
_ATTEMPT = _ATTEMPTS.c
_OBSERVATION = _OBSERVATIONS.c
_INTENT = _INTENTS.c

# Statements built once (ledger.repository says why).
_INSERT_OBSERVATION = (
    pg_insert(_OBSERVATIONS)
    .on_conflict_do_nothing(index_elements=["dedupe_key"])
    .returning(_OBSERVATION.id)
)
_SWAP_ATTEMPT_STATE = update(_ATTEMPTS).where(
    _ATTEMPT.id == bindparam("attempt"), _ATTEMPT.state == bindparam("seen")
)
"""The compare-and-set of an attempt's state; the columns set are the other parameters."""


@dataclass(frozen=True)
class ObservationResult:
    """What recording one observation did to its attempt."""

    verdict: str
    """A domain Verdict value, or `duplicate` (same dedupe key seen) or `orphan`."""
    state: str | None
    token: str | None
    intent_id: str | None
    workflow_id: str | None
    observation_id: int | None = None
    remote_id: str | None = None

    @property
    def changed(self) -> bool:
        """Whether the observation moved the attempt's state."""
        return self.verdict in {v.value for v in states.CHANGING}


@dataclass(frozen=True)
class ObservationFacts:
    """One observation of an attempt, as the transition function takes it."""

    source: str
    raw_status: str
    normalized: AttemptState | None
    observed_at: datetime
    dedupe_key: str
    provider_code: str | None = None
    provider_at: datetime | None = None
    remote_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    evidence_after_delivered: bool = False
    """An email event: a failure over `delivered` is stale evidence, not a conflict
    (domain.states.apply)."""


@dataclass(frozen=True)
class Through:
    """The ingress an observation came through.

    The channel and the provider aliases it speaks for: it may move only an attempt of
    that channel sent through one of them.
    """

    name: str
    """How an operator knows the ingress (``SendGrid events``)."""
    channel: str
    providers: frozenset[str]

    def refusal(self, channel: str, provider: str | None) -> str | None:
        """Why an attempt of `channel` sent through `provider` is not this ingress's to move.

        None when it is (an attempt recorded before providers were data names none).
        """
        if channel != self.channel:
            return f"names a {channel} attempt; {self.name} speak only for {self.channel}"
        if provider is not None and provider not in self.providers:
            return f"names an attempt sent through {provider}; {self.name} do not speak for it"
        return None


def record_observation(
    session: Session,
    facts: ObservationFacts,
    *,
    token: str | None = None,
    through: Through | None = None,
) -> ObservationResult:
    """Append one observation (deduplicated) and apply it to its attempt by compare-and-set.

    The attempt is found by `token`, else by `facts.remote_id`; if neither finds one the
    observation is kept as orphan evidence for reconciliation, never dropped. An ingress
    says what it came `through`: one naming an attempt of another channel or provider is
    kept the same way, unattached, with the reason in its detail, and moves nothing.

    Core statements on plain rows throughout (this runs for every receipt, poll and send
    answer). The observation is inserted with the verdict the attempt's state as read a
    moment ago gives; only when the compare-and-set finds that state moved (a concurrent
    writer) is the verdict decided again and the row updated.
    """
    refused: list[str] = []

    def ours(row: Any) -> Any:
        why = through.refusal(row.channel, row.provider) if row and through else None
        if why is not None:
            refused.append(why)
            return None
        return row

    found = None
    if token is not None:
        found = ours(session.execute(_OBSERVED_BY_TOKEN, {"token": token}).one_or_none())
    if found is None and facts.remote_id:
        found = ours(
            session.execute(_OBSERVED_BY_REMOTE_ID, {"remote_id": facts.remote_id}).one_or_none()
        )
    if found is None and refused:
        facts = replace(facts, detail={**facts.detail, "not_applied": refused[0]})
    attempt = _SeenAttempt.of(found) if found is not None else None
    expected = (
        states.apply(
            AttemptState(attempt.state),
            facts.normalized,
            current_by_operator=attempt.settled_rule is not None,
            evidence_after_delivered=facts.evidence_after_delivered,
        )
        if attempt is not None and facts.normalized is not None
        else None
    )
    inserted = session.execute(
        _INSERT_OBSERVATION,
        dict(
            attempt_id=attempt.id if attempt else None,
            remote_id=facts.remote_id,
            source=facts.source,
            raw_status=facts.raw_status,
            normalized_status=facts.normalized.value if facts.normalized else None,
            provider_code=facts.provider_code,
            provider_at=facts.provider_at,
            observed_at=facts.observed_at,
            dedupe_key=facts.dedupe_key,
            detail=facts.detail or None,
            **_verdict_values(expected, attempt is not None),
        ),
    ).scalar_one_or_none()
    if attempt is None:
        return ObservationResult(
            "orphan" if inserted else "duplicate", None, None, None, None, inserted
        )
    assert found is not None
    times = _IntentTimes(found.region, found.created_at, found.send_at)
    base = dict(token=attempt.token, intent_id=attempt.intent_id, workflow_id=found.workflow_id)
    if inserted is None:
        metrics.note_duplicate(session, "observation_redelivery", attempt.channel)
        return ObservationResult(
            "duplicate", attempt.state, observation_id=None, remote_id=attempt.remote_id, **base
        )
    learned_remote_id = bool(facts.remote_id and attempt.remote_id is None)
    if learned_remote_id:
        # First time we learn the provider's id (maybe from a receipt that beat the send
        # response). This UPDATE may have waited for a concurrent writer of the row: what
        # it returns is the row as it is now, so the decision below needs no other read.
        fresh = session.execute(
            update(_ATTEMPTS)
            .where(_ATTEMPT.id == attempt.id, _ATTEMPT.remote_id.is_(None))
            .values(remote_id=facts.remote_id)
            .returning(*_ATTEMPT_STATE_COLUMNS)
        ).one_or_none()
        if fresh is None:
            attempt.refresh(session)  # someone else stored a remote id first
        else:
            attempt.take(fresh)
    transition = (
        _apply_observation(
            session,
            attempt,
            inserted,
            facts.normalized,
            facts.observed_at,
            facts.provider_code,
            intent_times=times,
            expected=expected,
            evidence_after_delivered=facts.evidence_after_delivered,
        )
        if facts.normalized is not None
        else None  # inserted as `ignored`
    )
    if learned_remote_id:
        _adopt_orphans(session, attempt, facts.remote_id or "", times)
    if transition is not None and transition.verdict == Verdict.REPLACES_SETTLEMENT:
        # The provider contradicted an operator's settlement: a person looks at it now,
        # not at the next sweep.
        review_items.file_replaced_settlement(
            session, observation_id=inserted, at=facts.observed_at
        )
    return ObservationResult(
        transition.verdict.value if transition else "stale",
        attempt.state,
        observation_id=inserted,
        remote_id=facts.remote_id or attempt.remote_id,
        **base,
    )


_ATTEMPT_STATE_COLUMNS = (
    _ATTEMPT.state,
    _ATTEMPT.remote_id,
    _ATTEMPT.submitted_at,
    _ATTEMPT.last_status_at,
    _ATTEMPT.settled_rule,
)
"""What a compare-and-set on an attempt decides from (and may have to read again)."""

_OBSERVED_ATTEMPT = select(
    _ATTEMPT.id,
    _ATTEMPT.token,
    _ATTEMPT.intent_id,
    _ATTEMPT.channel,
    _ATTEMPT.template_key,
    _ATTEMPT.template_version,
    _ATTEMPT.provider,
    *_ATTEMPT_STATE_COLUMNS,
    _INTENT.workflow_id,
    _INTENT.region,
    _INTENT.created_at,
    _INTENT.send_at,
).join(_INTENTS, _INTENT.id == _ATTEMPT.intent_id)
_OBSERVED_BY_TOKEN = _OBSERVED_ATTEMPT.where(_ATTEMPT.token == bindparam("token"))
_OBSERVED_BY_REMOTE_ID = _OBSERVED_ATTEMPT.where(_ATTEMPT.remote_id == bindparam("remote_id"))


@dataclass
class _SeenAttempt:
    """An attempt as this transaction last read or wrote it (a plain row, not an entity)."""

    id: int
    token: str
    intent_id: str
    channel: str
    template_key: str
    template_version: int
    state: str
    remote_id: str | None
    submitted_at: datetime | None
    last_status_at: datetime | None
    settled_rule: str | None = None
    """Set when the state came from an operator's settlement (domain.states.apply)."""

    @classmethod
    def of(cls, row: Any) -> _SeenAttempt:
        return cls(
            row.id,
            row.token,
            row.intent_id,
            row.channel,
            row.template_key,
            row.template_version,
            row.state,
            row.remote_id,
            row.submitted_at,
            row.last_status_at,
            row.settled_rule,
        )

    def take(self, row: Any) -> None:
        self.state, self.remote_id = row.state, row.remote_id
        self.submitted_at, self.last_status_at = row.submitted_at, row.last_status_at
        self.settled_rule = row.settled_rule

    def refresh(self, session: Session) -> None:
        self.take(
            session.execute(select(*_ATTEMPT_STATE_COLUMNS).where(_ATTEMPT.id == self.id)).one()
        )


def _verdict_values(transition: states.Transition | None, attached: bool) -> dict[str, Any]:
    """The observation's verdict columns for `transition` (None: nothing to apply)."""
    if transition is None:
        return {"verdict": "ignored"} if attached else {}
    return {
        "verdict": transition.verdict.value,
        "applied": transition.changed,
        "conflict": transition.conflict,
    }


@dataclass(frozen=True)
class _IntentTimes:
    """What the metrics of an attempt's transition need from its intent."""

    region: str
    created_at: datetime
    send_at: datetime | None

    @property
    def due_at(self) -> datetime:
        """When the intent was meant to go: its send-at if later than its recording."""
        if self.send_at is not None and self.send_at > self.created_at:
            return self.send_at
        return self.created_at


def _apply_observation(
    session: Session,
    attempt: _SeenAttempt,
    observation_id: int,
    normalized: AttemptState | None,
    observed_at: datetime,
    provider_code: str | None,
    *,
    intent_times: _IntentTimes,
    expected: states.Transition | None = None,
    evidence_after_delivered: bool = False,
) -> states.Transition | None:
    """Apply one stored observation to its attempt by compare-and-set and mark the verdict.

    `attempt` holds the state as this transaction last read or wrote it: the first
    decision is made from it (the compare-and-set still guards it); a swap that finds the
    state moved reads the row again and decides again. `expected` is the verdict the
    observation row was inserted with (None: the row has none yet); the row is updated
    only when the final verdict differs. A transition that applied, or a stale one, is
    noted for the metrics (ledger.metrics), which count it when the transaction commits.
    """
    if normalized is None:
        if expected is None:
            session.execute(
                update(_OBSERVATIONS)
                .where(_OBSERVATION.id == observation_id)
                .values(verdict="ignored")
            )
        return None
    while True:
        current = AttemptState(attempt.state)
        transition = states.apply(
            current,
            normalized,
            current_by_operator=attempt.settled_rule is not None,
            evidence_after_delivered=evidence_after_delivered,
        )
        if not transition.changed:
            break
        values: dict[str, Any] = {"state": transition.state.value, "last_status_at": observed_at}
        if transition.verdict == Verdict.REPLACES_SETTLEMENT:
            # The provider's own terminal replaces the operator's settlement (the one
            # exception to "the first terminal stands"); the observation is flagged.
            values["settled_rule"] = None
            values["settled_resend_allowed"] = None
        if transition.state in states.TERMINAL:
            values["terminal_at"] = observed_at
        if provider_code:
            values["error_code"] = provider_code
        if transition.state == AttemptState.SUBMITTED or (
            attempt.submitted_at is None and transition.state != AttemptState.UNKNOWN
        ):
            values["submitted_at"] = attempt.submitted_at or observed_at
        # As read for this compare-and-set, for the metrics of the transition.
        submitted_before, last_status_before = attempt.submitted_at, attempt.last_status_at
        swapped = rows_changed(
            session.execute(
                _SWAP_ATTEMPT_STATE, {"attempt": attempt.id, "seen": current.value, **values}
            )
        )
        if swapped == 1:
            attempt.state = transition.state.value
            if "settled_rule" in values:
                attempt.settled_rule = None
            attempt.last_status_at = observed_at
            attempt.submitted_at = values.get("submitted_at", attempt.submitted_at)
            metrics.note_transition(
                session,
                metrics.attempt_labels(
                    attempt.channel,
                    intent_times.region,
                    attempt.template_key,
                    attempt.template_version,
                ),
                before=current,
                after=transition.state,
                observed_at=observed_at,
                due_at=intent_times.due_at,
                submitted_before=submitted_before,
                last_status_before=last_status_before,
                submitted_now=values.get("submitted_at"),
            )
            break
        # Someone else moved the state between our read and our write: decide again.
        attempt.refresh(session)
    if transition.verdict == Verdict.STALE:
        metrics.note_duplicate(session, "stale_observation", attempt.channel)
    final = _verdict_values(transition, True)
    if expected is None or _verdict_values(expected, True) != final:
        session.execute(
            update(_OBSERVATIONS).where(_OBSERVATION.id == observation_id).values(**final)
        )
    return transition


_ORPHANS_OF = (
    select(
        _OBSERVATION.id,
        _OBSERVATION.normalized_status,
        _OBSERVATION.observed_at,
        _OBSERVATION.provider_code,
    )
    .where(_OBSERVATION.remote_id == bindparam("remote_id"), _OBSERVATION.attempt_id.is_(None))
    .order_by(_OBSERVATION.id)
    .with_for_update(skip_locked=True)
)
_ADOPT_ORPHAN = update(_OBSERVATIONS).where(_OBSERVATION.id == bindparam("observation"))


def _adopt_orphans(
    session: Session, attempt: _SeenAttempt, remote_id: str, intent_times: _IntentTimes
) -> None:
    """Receipts stored as orphans before we knew this remote id now belong to the attempt."""
    orphans = session.execute(_ORPHANS_OF, {"remote_id": remote_id}).all()
    for orphan in orphans:
        session.execute(_ADOPT_ORPHAN, {"observation": orphan.id, "attempt_id": attempt.id})
        normalized = AttemptState(orphan.normalized_status) if orphan.normalized_status else None
        _apply_observation(
            session,
            attempt,
            orphan.id,
            normalized,
            orphan.observed_at,
            orphan.provider_code,
            intent_times=intent_times,
        )


def observations_of(session: Session, attempt_id: int) -> list[Observation]:
    """An attempt's observations, in the order they were recorded."""
    return list(
        session.execute(
            select(Observation).where(Observation.attempt_id == attempt_id).order_by(Observation.id)
        ).scalars()
    )
