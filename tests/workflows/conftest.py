"""A scripted world for NotificationWorkflow: activities faked by name, so the time-skipping
server crosses minutes and days of timers in milliseconds."""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.contracts import (
    AuthorizeInput,
    AuthorizeResult,
    IntentFacts,
    LoadIntentInput,
    LookupInput,
    LookupResult,
    NotificationInput,
    OperatorActionInput,
    PollInput,
    PollOutcome,
    SettlementInput,
    SettlementRecorded,
    SettlementRuleFacts,
    SubmitInput,
    SubmitOutcome,
    VerdictInput,
    WaitingFacts,
    WaitingInput,
)
from domain import channels, keys
from domain.providers import provider_task_queue
from domain.settlement import SettlementOutcome
from runtime.sandbox import sandbox_runner
from starter.client import start_summary
from workflows.notification import CHANNEL, EVENT_TYPE, REGION, STATE, NotificationWorkflow

pytestmark = pytest.mark.workflow


def allow(token: str | None = None) -> AuthorizeResult:
    return AuthorizeResult("allow", "allow", "allowed", "test-1", 1, attempt_token=token)


def deny(rule: str = "suppression.opted_out", reason: str = "opted out") -> AuthorizeResult:
    return AuthorizeResult("deny", rule, reason, "test-1", 1)


def defer(until: datetime, rule: str = "quiet_hours") -> AuthorizeResult:
    return AuthorizeResult("defer", rule, "quiet hours", "test-1", 1, next_eligible_at=until)


SETTLEMENT_RULES = [
    SettlementRuleFacts(
        "carrier-confirmed-not-delivered", "not_delivered", "provider_lookup", True
    ),
    SettlementRuleFacts("carrier-ticket-not-delivered", "not_delivered", "reference", True),
    SettlementRuleFacts("destination-unreachable", "undeliverable", "reference", False),
    SettlementRuleFacts("recipient-confirmed-received", "delivered", "recipient_word", False),
]


def settle_as_the_ledger_would(input: SettlementInput) -> SettlementRecorded:
    """The ledger's answer to a settlement the workflow's validator let through."""
    rule = next(r for r in SETTLEMENT_RULES if r.name == input.rule)
    return SettlementRecorded(
        state=SettlementOutcome(rule.outcome).state.value,
        verdict="settles_unknown",
        rule=rule.name,
        resend_allowed=rule.resend_allowed,
        policy_version="test-1",
        operator=input.operator if input.proof else "unauthenticated-temporal-caller",
    )


@dataclass
class World:
    """What the fake activities answer and what they saw."""

    facts: IntentFacts
    decide: Callable[[AuthorizeInput, datetime], AuthorizeResult] = lambda i, now: allow()
    submit: Callable[[str, str], SubmitOutcome] = lambda channel, token: SubmitOutcome(
        "submitted", "SM1"
    )
    poll: Callable[[str, int], str] = lambda token, n: "submitted"
    clock: Callable[[], Awaitable[datetime]] | None = None
    calls: list[tuple[str, Any, datetime]] = field(default_factory=list)
    polls: int = 0
    ledger_states: dict[str, str] = field(default_factory=dict)
    """What the ledger says of an attempt when a verdict asks (receipts never signalled)."""
    sms_queues: list[tuple[str, str]] = field(default_factory=list)
    """(activity, task queue) of every SMS submit and poll."""
    settle: Callable[[SettlementInput], SettlementRecorded] = settle_as_the_ledger_would
    lookup: Callable[[str], LookupResult] = lambda token: LookupResult(False, "not_found")

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]

    def activities(self) -> list[Callable[..., Any]]:
        world = self

        async def now() -> datetime:
            # The server's clock (Harness.worker sets it): it moves with time skipping,
            # unlike datetime.now() or a local activity's scheduled time (the worker's).
            assert world.clock is not None, "run the world through Harness.worker"
            return await world.clock()

        @activity.defn(name="load_intent")
        async def load_intent(input: LoadIntentInput) -> IntentFacts:
            world.calls.append(("load_intent", input, await now()))
            return world.facts

        @activity.defn(name="authorize")
        async def authorize(input: AuthorizeInput) -> AuthorizeResult:
            when = await now()
            world.calls.append(("authorize", input, when))
            result = world.decide(input, when)
            if result.outcome == "allow" and result.attempt_token is None:
                result = replace(
                    result,
                    attempt_token=keys.attempt_token(
                        world.facts.business_key, input.channel, input.attempt_number
                    ),
                )
            return result

        @activity.defn(name="submit_sms")
        async def submit_sms(input: SubmitInput) -> SubmitOutcome:
            world.calls.append(("submit_sms", input, await now()))
            world.sms_queues.append(("submit_sms", activity.info().task_queue))
            return world.submit("sms", input.attempt_token)

        @activity.defn(name="send_email")
        async def send_email(input: SubmitInput) -> SubmitOutcome:
            world.calls.append(("send_email", input, await now()))
            return world.submit("email", input.attempt_token)

        @activity.defn(name="poll_sms")
        async def poll_sms(input: PollInput) -> PollOutcome:
            world.polls += 1
            world.calls.append(("poll_sms", input, await now()))
            world.sms_queues.append(("poll_sms", activity.info().task_queue))
            return PollOutcome(world.poll(input.attempt_token, world.polls))

        @activity.defn(name="record_verdict")
        async def record_verdict(input: VerdictInput) -> str:
            world.calls.append(("record_verdict", input, await now()))
            if input.answer_state:
                return world.ledger_states.get(input.attempt_token, input.state)
            return "applied"

        @activity.defn(name="record_operator_action")
        async def record_operator_action(input: OperatorActionInput) -> None:
            world.calls.append(("record_operator_action", input, await now()))

        @activity.defn(name="record_settlement")
        async def record_settlement(input: SettlementInput) -> SettlementRecorded:
            world.calls.append(("record_settlement", input, await now()))
            return world.settle(input)

        @activity.defn(name="record_waiting")
        async def record_waiting(input: WaitingInput) -> WaitingFacts:
            world.calls.append(("record_waiting", input, await now()))
            return WaitingFacts(list(SETTLEMENT_RULES) if input.awaiting else [])

        @activity.defn(name="lookup_sms")
        async def lookup_sms(input: LookupInput) -> LookupResult:
            world.calls.append(("lookup_sms", input, await now()))
            return replace(world.lookup(input.attempt_token), observed_at=await now())

        return [
            load_intent,
            authorize,
            submit_sms,
            send_email,
            poll_sms,
            record_verdict,
            record_operator_action,
            record_settlement,
            record_waiting,
            lookup_sms,
        ]


def facts(key: str | None = None, **overrides: Any) -> IntentFacts:
    values: dict[str, Any] = dict(
        intent_id=str(uuid.uuid4()),
        business_key=key or f"class-opening:c-9081:m-{uuid.uuid4().hex[:6]}",
        event_type="class-opening",
        category="transactional",
        region="US",
        channels=["sms", "email"],
        mode="fallback",
        email_after_seconds=600,
        email_on_permanent_failure=True,
        poll_initial_seconds=10,
        poll_max_seconds=300,
        poll_horizon_seconds=1800,
        resend_window_seconds=3600,
        submit_window_seconds=600,
    )
    values.update(overrides)
    return IntentFacts(**values)


class Harness:
    def __init__(self, env: Any) -> None:
        self.env = env

    def worker(self, world: World, queue: str, *, sticky: bool = True) -> Any:
        client = self.env.client
        world.clock = self.env.get_current_time
        main = Worker(
            client,
            task_queue=queue,
            workflows=[NotificationWorkflow],
            activities=[
                a
                for a in world.activities()
                if a.__name__ not in ("submit_sms", "poll_sms", "lookup_sms")
            ],
            workflow_runner=sandbox_runner(client.data_converter),
            # Without a cache no sticky queue is bound to this worker process.
            max_cached_workflows=100 if sticky else 0,
        )
        sms_activities = [
            a for a in world.activities() if a.__name__ in ("submit_sms", "poll_sms", "lookup_sms")
        ]
        sms = Worker(client, task_queue=channels.SMS.task_queue(queue), activities=sms_activities)
        # Each SMS provider's own queue (failover routes: one rate budget per provider).
        per_provider = [
            Worker(
                client,
                task_queue=provider_task_queue(channels.SMS, queue, alias),
                activities=sms_activities,
            )
            for alias in SMS_PROVIDERS
        ]
        return _Both(main, sms, *per_provider)

    async def start(self, world: World, queue: str) -> WorkflowHandle[Any, Any]:
        f = world.facts
        # As the starter does: search attributes set at start, not upserted later.
        attributes = TypedSearchAttributes(
            [
                SearchAttributePair(STATE, "scheduled" if f.send_at else "sending"),
                SearchAttributePair(CHANNEL, f.channels[0]),
                SearchAttributePair(REGION, f.region),
                SearchAttributePair(EVENT_TYPE, f.event_type),
            ]
        )
        return await self.env.client.start_workflow(
            NotificationWorkflow.run,
            NotificationInput(f.intent_id),
            id=keys.workflow_id(f.business_key),
            task_queue=queue,
            search_attributes=attributes,
            static_summary=start_summary(
                event_type=f.event_type,
                business_key=f.business_key,
                channels=f.channels,
                mode=f.mode,
                category=f.category,
                region=f.region,
            ),
        )


SMS_PROVIDERS = ("twilio", "telnyx")
"""The provider aliases the failover tests route SMS to."""


class _Both:
    """Several workers started and stopped together (the main queue's first)."""

    def __init__(self, *workers: Worker) -> None:
        self.workers = workers

    async def __aenter__(self) -> _Both:
        for worker in self.workers:
            await worker.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for worker in reversed(self.workers):
            await worker.__aexit__(*exc)


@pytest.fixture
def harness(time_env: Any) -> Harness:
    return Harness(time_env)


@pytest.fixture
def queue() -> str:
    return f"tq-{uuid.uuid4().hex[:8]}"


HISTORIES = Path(__file__).parent / "histories"


async def keep_history(handle: WorkflowHandle[Any, Any], name: str) -> None:
    """With HERALD_RECORD_HISTORIES=1, write the history for the replay tests to commit,
    unless one by that name exists: a recorded history is never re-recorded, since it
    stands for runs that are open somewhere (docs/operations.md, "Changing the workflow
    while intents are open"). A new case or a patch's new branch gets a new name."""
    path = HISTORIES / f"{name}.json"
    if os.environ.get("HERALD_RECORD_HISTORIES") == "1" and not path.exists():
        HISTORIES.mkdir(exist_ok=True)
        history = await handle.fetch_history()
        path.write_text(history.to_json())


def permanent(code: str = "21211") -> ApplicationError:
    return ApplicationError(
        "invalid number", code, type="PermanentProviderError", non_retryable=True
    )


_ = timedelta
