"""Settling ambiguity in the ledger.

A person's settlement, what a workflow waits for, and the review items that open and
close around an unknown attempt.

A settlement is evidence, not an overwrite: an append-only observation (source
`operator`) through the one transition function, an operator action and an audit row
naming the principal, the rule, the policy version and the reason, all in one
transaction. The rules come from `domain.settlement`, judged by the policy version active
when the settlement is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client import Counter, Histogram
from sqlalchemy import String, func, literal, select, true, update
from sqlalchemy.orm import Session

from domain import channels, keys, settlement, states
from domain import policy as domain_policy
from domain.states import AttemptState
from ledger import metrics
from ledger import repository as repo
from ledger.errors import NotFound
from ledger.models import Attempt, AuditEvent, Intent, Observation, OperatorAction, ReviewItem
from ledger.operator_actions import record_operator_action
from ledger.review_items import UNKNOWN_OUTCOME, ReviewRow, close_items, record_review_items

OPERATOR_SOURCE = "operator"
"""The observation source of a settlement."""
LOOKUP_SOURCE = "lookup"
"""The observation source of a provider lookup an operator asked for."""
SETTLE = "settle"
SETTLEMENT_EXPIRED = "settlement-expired"
"""The operator action the workflow records when a window closes with nothing decided."""

AWAITING_SETTLEMENT = settlement.Awaiting.SETTLEMENT.value
AWAITING_RESEND = settlement.Awaiting.RESEND.value

SETTLEMENTS = Counter(
    "herald_settlements",
    "Operator settlements of unknown attempts, by rule and outcome (and channel).",
    ("channel", "rule", "outcome"),
    registry=metrics.REGISTRY,
)
UNKNOWN_TO_SETTLED = Histogram(
    "herald_unknown_to_settled_seconds",
    "Seconds from an attempt becoming unknown to an operator's settlement of it.",
    ("channel",),
    buckets=metrics.SECONDS_BUCKETS,
    registry=metrics.REGISTRY,
)


def provider_has_lookup(channel: str) -> bool:
    """Whether the channel's provider can be asked what it holds for an attempt.

    The channel registry says so (Twilio's fetch and list for SMS; SMTP answers nothing
    after the hand-off, so rules needing a lookup are not offered for email).
    """
    return channel in channels.NAMES and channels.get(channel).provider_lookup


@dataclass(frozen=True)
class Settled:
    """What the ledger made of one settlement."""

    refused: str = ""
    state: str = ""
    verdict: str = ""
    rule: str = ""
    resend_allowed: bool = False
    policy_version: str = ""


_PARSED: dict[str, settlement.SettlementPolicy] = {}
"""Settlement rules by policy version: a version is immutable, so it is parsed once per
process (the console reads the rules on every page that offers them)."""


def active_settlement_policy(session: Session) -> tuple[str, settlement.SettlementPolicy]:
    """The active policy version and its settlement rules."""
    version = repo.active_policy_version(session)
    if version not in _PARSED:
        parsed = domain_policy.load_policy(repo.policy_document(session, version))
        _PARSED[version] = parsed.settlement
    return version, _PARSED[version]


def latest_lookup_at(session: Session, attempt_id: int) -> datetime | None:
    """When the attempt was last looked up at the provider (None: never)."""
    return session.execute(
        select(func.max(Observation.observed_at)).where(
            Observation.attempt_id == attempt_id, Observation.source == LOOKUP_SOURCE
        )
    ).scalar_one_or_none()


def record_settlement(
    session: Session,
    *,
    intent_id: str,
    token: str,
    claim: settlement.SettlementClaim,
    operator: str,
    operator_role: str | None,
    at: datetime,
    window_until: datetime | None,
    detail: dict[str, Any] | None = None,
) -> Settled:
    """Judge and record one settlement in the caller's transaction.

    A refusal is recorded too (an operator action `settle` refused, with why) and returned;
    nothing about the attempt changes then.
    """
    attempt = session.execute(
        select(Attempt)
        .where(Attempt.token == token)
        .with_for_update()
        # Observations write attempts with core statements: read the row as it is now.
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()
    if attempt is None or attempt.intent_id != intent_id:
        raise NotFound(f"no attempt {token} on intent {intent_id}")
    version, rules = active_settlement_policy(session)
    current = AttemptState(attempt.state)
    by_operator = attempt.settled_rule is not None
    claim = settlement.SettlementClaim(
        claim.rule, claim.reason, claim.reference, latest_lookup_at(session, attempt.id)
    )
    why = settlement.refusal(
        rules,
        claim,
        current=current,
        current_by_operator=by_operator,
        provider_has_lookup=provider_has_lookup(attempt.channel),
        now=at,
        window_until=window_until,
    )
    base = {**(detail or {}), "channel": attempt.channel, "attempt": token, "rule": claim.rule}

    def recorded(outcome: str, note: dict[str, Any]) -> None:
        record_operator_action(
            session,
            intent_id=intent_id,
            action=SETTLE,
            operator=operator,
            operator_role=operator_role,
            reason=claim.reason,
            outcome=outcome,
            at=at,
            detail={**base, **note},
        )

    if why is not None:
        recorded("refused", {"why": why, "policy_version": version})
        return Settled(refused=why, state=current.value, policy_version=version)
    rule = rules.rule(claim.rule)
    assert rule is not None
    transition = states.apply(
        current, rule.outcome.state, by_operator=True, current_by_operator=by_operator
    )
    evidence = {
        "rule": rule.name,
        "outcome": rule.outcome.value,
        "evidence": rule.evidence.value,
        "resend_allowed": rule.resend_allowed,
        "policy_version": version,
        "reason": claim.reason,
        "reference": claim.reference,
        "operator": operator,
    }
    session.add(
        Observation(
            attempt_id=attempt.id,
            remote_id=attempt.remote_id,
            source=OPERATOR_SOURCE,
            raw_status=rule.outcome.value,
            normalized_status=rule.outcome.state.value,
            observed_at=at,
            dedupe_key=f"settle:{token}:{rule.name}:{at.isoformat()}",
            verdict=transition.verdict.value,
            applied=transition.changed,
            conflict=transition.conflict,
            detail=evidence,
        )
    )
    became_unknown = attempt.last_status_at
    if transition.changed:
        attempt.state = transition.state.value
        attempt.last_status_at = at
        attempt.terminal_at = at
        attempt.settled_rule = rule.name
        attempt.settled_resend_allowed = rule.resend_allowed
    recorded(
        "accepted" if transition.changed else "refused",
        {
            "outcome": rule.outcome.value,
            "state": attempt.state,
            "resend_allowed": str(rule.resend_allowed).lower(),
            "policy_version": version,
            "evidence": rule.evidence.value,
            "reference": claim.reference,
            "verdict": transition.verdict.value,
        },
    )
    session.add(
        AuditEvent(
            at=at,
            actor=operator[:80],
            actor_role=operator_role or "",
            action="attempt.settled" if transition.changed else "attempt.settle_refused",
            subject=f"attempt:{attempt.id}",
            detail={**evidence, "intent_id": intent_id, "verdict": transition.verdict.value},
        )
    )
    if not transition.changed:
        return Settled(
            refused=f"the attempt is {attempt.state}; the settlement was kept as evidence only",
            state=attempt.state,
            verdict=transition.verdict.value,
            policy_version=version,
        )
    close_items(
        session,
        attempt_id=attempt.id,
        at=at,
        by=operator,
        note=f"settled as {rule.outcome.value} under {rule.name} (policy {version})",
    )
    channel, rule_label, outcome_label = (
        metrics.label(attempt.channel),
        metrics.label(rule.name),
        rule.outcome.value,
    )
    waited = (at - became_unknown).total_seconds() if became_unknown else None

    def count() -> None:
        SETTLEMENTS.labels(channel, rule_label, outcome_label).inc()
        if waited is not None and current == AttemptState.UNKNOWN:
            UNKNOWN_TO_SETTLED.labels(channel).observe(max(waited, 0.0))

    metrics.note(session, count)
    session.flush()
    return Settled(
        state=attempt.state,
        verdict=transition.verdict.value,
        rule=rule.name,
        resend_allowed=rule.resend_allowed,
        policy_version=version,
    )


def record_waiting(
    session: Session,
    *,
    intent_id: str,
    awaiting: str | None,
    until: datetime | None,
    tokens: list[str],
    expired_unsettled: list[str],
    at: datetime,
) -> list[settlement.SettlementRule]:
    """Say in the ledger what the intent's workflow waits for and until when.

    Files the review item of each unknown attempt at once (not an hour later) and records
    the attempts whose window closed unsettled. Returns the active policy's rules offered
    for them.
    """
    session.execute(
        update(Intent)
        .where(Intent.id == intent_id)
        .values(awaiting=awaiting, awaiting_until=until if awaiting else None)
    )
    attempts = (
        list(
            session.execute(
                select(Attempt)
                .where(Attempt.token.in_(tokens))
                .execution_options(populate_existing=True)
            ).scalars()
        )
        if tokens
        else []
    )
    intent = session.get(Intent, intent_id)
    if attempts and intent is not None:
        record_review_items(
            session,
            [
                ReviewRow(
                    kind=UNKNOWN_OUTCOME,
                    subject=f"attempt:{a.id}",
                    since=a.last_status_at or at,
                    age=at - (a.last_status_at or at),
                    intent_id=intent_id,
                    business_key=intent.business_key,
                    detail={
                        "attempt_token": a.token,
                        "channel": a.channel,
                        "number": a.number,
                        "state": a.state,
                        "settle_until": until.isoformat() if until else None,
                        "filed_by": "horizon verdict",
                    },
                )
                for a in attempts
                if a.state == AttemptState.UNKNOWN.value
            ],
            at,
        )
    for token in expired_unsettled:
        record_operator_action(
            session,
            intent_id=intent_id,
            action=SETTLEMENT_EXPIRED,
            operator="herald",
            reason="the settlement window closed with no decision; the attempt stays unknown",
            outcome="expired",
            at=at,
            detail={"attempt": token, "channel": keys.channel_of_token(token)},
        )
    if not awaiting:
        return []
    _, rules = active_settlement_policy(session)
    channels = {a.channel for a in attempts} or {"sms"}
    return [
        r
        for r in rules.rules
        if all(r.offered(provider_has_lookup=provider_has_lookup(c)) for c in channels)
    ]


def actions_of(session: Session, intent_id: str) -> list[OperatorAction]:
    """The intent's settle actions, oldest first."""
    return list(
        session.execute(
            select(OperatorAction)
            .where(OperatorAction.intent_id == intent_id, OperatorAction.action == SETTLE)
            .order_by(OperatorAction.id)
        ).scalars()
    )


def waiting_intents(session: Session, *, limit: int = 100) -> list[dict[str, Any]]:
    """Intents whose workflow waits for an operator, the soonest window first."""
    rows = session.execute(
        select(Intent.id, Intent.business_key, Intent.awaiting, Intent.awaiting_until)
        .where(Intent.awaiting.is_not(None))
        .order_by(Intent.awaiting_until)
        .limit(limit)
    )
    return [
        {
            "intent_id": r.id,
            "business_key": r.business_key,
            "awaiting": r.awaiting,
            "until": r.awaiting_until.isoformat() if r.awaiting_until else None,
        }
        for r in rows
    ]


def recent_settlements(session: Session, *, since: datetime) -> list[dict[str, Any]]:
    """Settlements recorded since `since`, newest first (accepted and refused)."""
    rows = session.execute(
        select(OperatorAction, Intent.business_key)
        .join(Intent, Intent.id == OperatorAction.intent_id)
        .where(OperatorAction.action == SETTLE, OperatorAction.at >= since)
        .order_by(OperatorAction.at.desc())
    )
    return [
        {
            "at": a.at.isoformat(),
            "business_key": key,
            "operator": a.operator,
            "outcome": a.outcome,
            "rule": (a.detail or {}).get("rule"),
            "state": (a.detail or {}).get("state") or (a.detail or {}).get("why"),
        }
        for a, key in rows
    ]


@dataclass(frozen=True)
class SetMember:
    """One unknown attempt of the `unknown_outcome` set, as a bulk settlement sees it."""

    intent_id: str
    business_key: str
    channel: str
    attempt_token: str


def unknown_members(
    session: Session,
    *,
    event_type: str | None = None,
    category: str | None = None,
    limit: int = 500,
) -> list[SetMember]:
    """The members of the unknown-outcome set a bulk settlement would settle.

    Open `unknown_outcome` items whose attempt is still unknown and whose intent still
    waits for a settlement, oldest first, filtered by event type and category.
    """
    # From the intents that wait for a settlement (a partial index), to their unknown
    # attempts, to each one's open item by (kind, subject) (the unique index): a few index
    # reads however many review items are open. The item is a LATERAL subquery with a
    # LIMIT, which Postgres cannot flatten into a join, so this is the only order it can
    # take: as a plain join its planner, guessing one open item, scanned every open
    # unknown_outcome item against every waiting intent (1.7 s on 100,000 intents with
    # 3,000 open items and 300 waiting, bench.console).
    # Whether it is open is asked outside: inside, the partial index of open items would
    # match too, and the planner took it and filtered thousands of rows by subject.
    item = (
        select(ReviewItem.found_at, ReviewItem.id, ReviewItem.resolved_at)
        .where(
            ReviewItem.kind == UNKNOWN_OUTCOME,
            ReviewItem.subject == literal("attempt:") + func.cast(Attempt.id, String),
        )
        .limit(1)  # one at most (the unique index); and Postgres does not flatten it
        .lateral("open_item")
    )
    query = (
        select(Intent.id, Intent.business_key, Attempt.channel, Attempt.token)
        .select_from(Intent)
        .join(Attempt, Attempt.intent_id == Intent.id)
        .join(item, true())
        .where(
            Intent.awaiting == AWAITING_SETTLEMENT,
            Attempt.state == AttemptState.UNKNOWN.value,
            item.c.resolved_at.is_(None),
        )
        .order_by(item.c.found_at, item.c.id)
        .limit(limit)
    )
    if event_type:
        query = query.where(Intent.event_type == event_type)
    if category:
        query = query.where(Intent.category == category)
    return [SetMember(*row) for row in session.execute(query)]
