"""NotificationWorkflow on the time-skipping server: every branch of one intent's life."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import (
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateStage,
)
from temporalio.exceptions import ApplicationError, CancelledError

from activities.contracts import (
    AuthorizeInput,
    CancelRequest,
    NotificationInput,
    OperatorActionInput,
    ReceiptSignal,
    ResendRequest,
    SubmitInput,
    SubmitOutcome,
    WaitingFacts,
    WaitingInput,
)
from domain import keys
from tests.workflows.conftest import World, allow, defer, deny, facts, keep_history, permanent
from workflows.notification import MIN_DEFER, SEND_HEARTBEAT_TIMEOUT, NotificationWorkflow

pytestmark = pytest.mark.workflow


def hold_submit(
    world: World, answer: Callable[[], SubmitOutcome]
) -> tuple[asyncio.Event, asyncio.Event]:
    """Replace the world's `submit_sms` by one that records its call, sets `entered`, and
    waits for `release` before it returns (or raises) what `answer()` gives: the provider
    call is in flight for as long as the test needs."""
    entered, release = asyncio.Event(), asyncio.Event()
    fakes = world.activities()

    @activity.defn(name="submit_sms")
    async def submit_sms(input: SubmitInput) -> SubmitOutcome:
        world.calls.append(("submit_sms", input, activity.info().current_attempt_scheduled_time))
        entered.set()
        await release.wait()
        return answer()

    world.activities = lambda: [a for a in fakes if a.__name__ != "submit_sms"] + [submit_sms]
    return entered, release


async def until(predicate: Any, *, timeout: float = 10.0) -> None:
    """Wait for a condition with a deadline (not a sleep that hopes)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached before the deadline")
        await asyncio.sleep(0.02)


async def phase_is(handle: WorkflowHandle[Any, Any], prefix: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        projection = await handle.query(NotificationWorkflow.projection)
        if projection.phase.startswith(prefix):
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"phase stayed {projection.phase!r}, expected {prefix!r}")
        await asyncio.sleep(0.02)


async def states_are(handle: WorkflowHandle[Any, Any], expected: dict[str, str]) -> None:
    """Wait (with a deadline) until the workflow has applied these attempt states."""
    deadline = asyncio.get_running_loop().time() + 10.0
    while True:
        projection = await handle.query(NotificationWorkflow.projection)
        if expected.items() <= projection.attempt_states.items():
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"attempt states {projection.attempt_states}, not {expected}")
        await asyncio.sleep(0.02)


def at(world: World, name: str, index: int = 0) -> datetime:
    return [c[2] for c in world.calls if c[0] == name][index]


async def test_a_receipt_before_the_first_poll_completes_delivered_without_polling(harness, queue):
    # The submit is held until both receipts are in: with time skipping, a submit that had
    # already returned would let the first poll's timer fire before a signal could land.
    world = World(facts(channels=["sms"]))
    entered, release = hold_submit(world, lambda: SubmitOutcome("submitted", "SM1"))
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await asyncio.wait_for(entered.wait(), 10)  # no query: it would add tasks
        token = world.calls[-1][1].attempt_token
        await handle.signal(NotificationWorkflow.receipt, ReceiptSignal(token, "delivered"))
        await handle.signal(NotificationWorkflow.receipt, ReceiptSignal(token, "delivered"))
        release.set()
        result = await handle.result()
        await keep_history(handle, "delivered_by_receipt")
        history = await handle.fetch_history()
    assert result.outcome == "delivered"
    assert "poll_sms" not in world.names() and "send_email" not in world.names()
    # The budget for the happy path: at most 30 history events (two signals here).
    assert len(history.events) <= 30 + 4, len(history.events)
    # load_intent and authorize are local activities (markers, no scheduled events) ...
    markers = [
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.HasField("marker_recorded_event_attributes")
    ]
    assert markers == ["core_local_activity"] * 2
    # ... and search attributes are upserted once, at the end: the outcome and channels used.
    upserts = [
        dict(e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields)
        for e in history.events
        if e.HasField("upsert_workflow_search_attributes_event_attributes")
    ]
    # ... and the end upserts the outcome and the channels used (OUTCOME_ATTRIBUTES).
    assert len(upserts) == 1, upserts
    assert {"HeraldState", "HeraldOutcome", "HeraldChannelsUsed"} <= set(upserts[0])


async def test_only_the_sms_submit_has_a_heartbeat_timeout(harness, queue):
    # A worker that dies mid-submit is noticed after the heartbeat timeout (10 s), not
    # after the 30 s start-to-close; the activity itself heartbeats (activities/). The
    # email send has no claim to reconcile against, so it is never retried early.
    world = World(facts(), poll=lambda token, n: "undelivered")
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await handle.result()
        history = await handle.fetch_history()
    scheduled = {
        e.activity_task_scheduled_event_attributes.activity_type.name: (
            e.activity_task_scheduled_event_attributes.heartbeat_timeout.ToSeconds()
        )
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    assert scheduled["submit_sms"] == SEND_HEARTBEAT_TIMEOUT.total_seconds() == 10
    assert scheduled["send_email"] == scheduled["poll_sms"] == 0
    # `authorize` runs as a local activity, recorded as a marker beside
    # load_intent's, so it has no scheduled event and no heartbeat timeout at all.
    assert "authorize" not in scheduled
    local = [
        e
        for e in history.events
        if e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    assert len(local) == 1 + world.names().count("authorize")


async def test_delivered_by_poll_when_no_receipt_comes(harness, queue):
    world = World(facts(channels=["sms"]), poll=lambda token, n: "delivered" if n >= 2 else "sent")
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "delivered_by_poll")
    assert result.outcome == "delivered"
    assert world.polls == 2


async def test_the_polling_horizon_gives_unknown_not_failed(harness, queue):
    world = World(facts(channels=["sms"], resend_window_seconds=0))
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "horizon_unknown")
    assert result.outcome == "unknown"
    verdicts = [c[1] for c in world.calls if c[0] == "record_verdict"]
    assert [(v.state, v.source) for v in verdicts] == [("unknown", "horizon")]
    start = at(world, "submit_sms")
    assert all(c[2] - start <= timedelta(seconds=1800) for c in world.calls if c[0] == "poll_sms")
    assert 5 <= world.polls <= 40


async def test_an_sms_unknown_at_the_horizon_is_not_followed_when_the_policy_has_no_window(
    harness, queue
):
    # A promotional policy: no fallback window. The carrier took the SMS and never said
    # more; it may have reached the person, so no email follows it.
    world = World(
        facts(
            category="promotional",
            email_after_seconds=10**9,
            fallback_when_unresolved=False,
            resend_window_seconds=0,
        ),
        poll=lambda token, n: "sent",
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "horizon_unknown_no_window")
    assert result.outcome == "unknown"
    assert [(r.channel, r.state) for r in result.channels] == [("sms", "unknown")]
    assert [c[1].channel for c in world.calls if c[0] == "authorize"] == ["sms"]
    assert "send_email" not in world.names()
    verdicts = [c[1] for c in world.calls if c[0] == "record_verdict"]
    assert [(v.state, v.source) for v in verdicts] == [("unknown", "horizon")]


async def test_an_sms_unknown_at_the_horizon_is_followed_by_email_when_the_policy_has_a_window(
    harness, queue
):
    # The same SMS under a window longer than the horizon: the email follows at the horizon.
    world = World(
        facts(email_after_seconds=7200, poll_horizon_seconds=1800),
        poll=lambda token, n: "sent",
        submit=lambda ch, tok: SubmitOutcome("submitted" if ch == "sms" else "sent", "x"),
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
    assert {r.channel: r.state for r in result.channels} == {"sms": "unknown", "email": "sent"}
    waited = at(world, "send_email") - at(world, "submit_sms")
    assert timedelta(seconds=1800) <= waited < timedelta(seconds=1860)


async def test_a_permanent_sms_failure_sends_email_at_once(harness, queue):
    def submit(channel: str, token: str) -> SubmitOutcome:
        if channel == "sms":
            raise permanent("21614")
        return SubmitOutcome("sent", "<m@herald>")

    world = World(facts(), submit=submit)
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "permanent_failure_email")
    by_channel = {r.channel: r for r in result.channels}
    assert by_channel["sms"].state == "failed"
    assert by_channel["email"].state == "sent"
    assert at(world, "send_email") - at(world, "submit_sms") < timedelta(seconds=30)
    assert [c[1].channel for c in world.calls if c[0] == "authorize"] == ["sms", "email"]


async def test_an_sms_not_delivered_within_the_window_falls_back_to_email(harness, queue):
    world = World(
        facts(),
        poll=lambda token, n: "sent",
        submit=lambda ch, tok: SubmitOutcome("submitted" if ch == "sms" else "sent", "x"),
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "fallback_window_email")
    waited = at(world, "send_email") - at(world, "submit_sms")
    assert timedelta(seconds=600) <= waited < timedelta(seconds=660)
    assert result.outcome == "sent"
    # SMS is no longer followed after the fallback: the ledger gets `unknown` (reason given).
    assert {r.channel: r.state for r in result.channels} == {"sms": "unknown", "email": "sent"}
    verdicts = [c[1] for c in world.calls if c[0] == "record_verdict"]
    assert [(v.state, v.source) for v in verdicts] == [("unknown", "fallback")]


async def test_an_opted_out_recipient_gets_neither_channel(harness, queue):
    world = World(facts(), decide=lambda i, now: deny())
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "opted_out")
    assert result.outcome == "denied"
    assert "submit_sms" not in world.names() and "send_email" not in world.names()
    assert [r.state for r in result.channels] == ["denied", "denied"]


async def test_quiet_hours_defer_then_send_at_the_first_eligible_minute(harness, queue):
    eligible: dict[str, datetime] = {}

    def decide(i: AuthorizeInput, now: datetime) -> Any:
        eligible.setdefault("at", now + timedelta(hours=9, minutes=30))
        return defer(eligible["at"]) if now < eligible["at"] else allow()

    world = World(facts(channels=["sms"]), decide=decide, poll=lambda t, n: "delivered")
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "quiet_hours_deferred")
    second = at(world, "authorize", 1)
    assert eligible["at"] <= second < eligible["at"] + timedelta(minutes=1)
    assert result.outcome == "delivered"


async def test_a_defer_to_a_moment_already_passed_waits_before_asking_again(harness, queue):
    # A worker clock behind the server's: the policy defers to a moment the workflow clock
    # has passed. The local authorize is not asked again in the same workflow task.
    def decide(i: AuthorizeInput, now: datetime) -> Any:
        if world.names().count("authorize") == 1:
            return defer(now - timedelta(minutes=5))
        return allow()

    world = World(facts(channels=["sms"]), decide=decide, poll=lambda t, n: "delivered")
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        assert (await handle.result()).outcome == "delivered"
    assert at(world, "authorize", 1) - at(world, "authorize", 0) >= MIN_DEFER


async def test_an_expiry_passing_while_deferred_expires_the_intent(harness, queue):
    world = World(facts(channels=["sms"]), decide=lambda i, now: defer(now + timedelta(hours=8)))
    world.facts.expires_at = None
    async with harness.worker(world, queue):
        # The expiry is set relative to the server's clock at start.
        world.facts.expires_at = (await harness.env.get_current_time()) + timedelta(hours=1)
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "expired_while_deferred")
    assert result.outcome == "expired"
    assert "submit_sms" not in world.names()
    assert world.names().count("authorize") == 1


async def test_a_cancel_before_send_at_closes_the_intent_with_no_attempt(harness, queue):
    world = World(facts())
    async with harness.worker(world, queue):
        world.facts.send_at = (await harness.env.get_current_time()) + timedelta(days=1)
        handle = await harness.start(world, queue)
        await phase_is(handle, "scheduled")
        cancelled = await handle.execute_update(
            NotificationWorkflow.cancel_update, CancelRequest("ops@example", "seat filled")
        )
        result = await handle.result()
        await keep_history(handle, "cancel_before_send_at")
    assert cancelled.accepted and cancelled.in_flight == []
    assert result.outcome == "cancelled"
    assert "authorize" not in world.names()
    actions = [c[1] for c in world.calls if c[0] == "record_operator_action"]
    assert [(a.action, a.outcome, a.operator) for a in actions] == [
        ("cancel", "accepted", "ops@example")
    ]


async def test_a_cancel_racing_an_in_flight_submit_is_recorded_not_recalled(harness, queue):
    world = World(facts(channels=["sms", "email"]))
    # The provider call is in flight while the operator cancels.
    entered, release = hold_submit(world, lambda: SubmitOutcome("submitted", "SM-inflight"))
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await asyncio.wait_for(entered.wait(), 10)
        cancelled = await handle.execute_update(
            NotificationWorkflow.cancel_update, CancelRequest("ops", "seat filled")
        )
        release.set()
        result = await handle.result()
        await keep_history(handle, "cancel_in_flight")
    token = next(c[1].attempt_token for c in world.calls if c[0] == "submit_sms")
    assert cancelled.in_flight == [token]
    assert "not recalled" in cancelled.message
    assert "poll_sms" not in world.names() and "send_email" not in world.names()
    assert result.outcome != "delivered"
    action = next(c[1] for c in world.calls if c[0] == "record_operator_action")
    assert action.detail["in_flight"] == token


async def test_a_cancel_after_the_delivered_receipt_names_it_delivered_not_in_flight(
    harness, queue
):
    # Accept-then-timeout: the carrier accepted and delivered, but the submit's answer was
    # lost, so the workflow still waits on the submit activity when receipt and cancel come.
    world = World(facts(channels=["sms", "email"], submit_window_seconds=30))

    def no_answer() -> SubmitOutcome:
        raise ApplicationError("no answer from the carrier", type="AmbiguousSubmission")

    entered, release = hold_submit(world, no_answer)
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await asyncio.wait_for(entered.wait(), 10)
        token = next(c[1].attempt_token for c in world.calls if c[0] == "submit_sms")
        await handle.signal(NotificationWorkflow.receipt, ReceiptSignal(token, "delivered"))
        await states_are(handle, {token: "delivered"})
        assert (await handle.query(NotificationWorkflow.projection)).phase == "submitting:sms"
        cancelled = await handle.execute_update(
            NotificationWorkflow.cancel_update, CancelRequest("ops", "seat filled")
        )
        release.set()  # the late timeout: every submit try now fails until the window closes
        result = await handle.result()
        await keep_history(handle, "cancel_after_delivered_receipt")
    assert cancelled.in_flight == [] and cancelled.delivered == [token]
    assert "not recalled" not in cancelled.message and "delivered" in cancelled.message
    action = next(c[1] for c in world.calls if c[0] == "record_operator_action")
    assert action.detail["in_flight"] == "" and action.detail["delivered"] == token
    assert action.detail["note"] == cancelled.message
    # The late timeout moves nothing backward, and nothing more is sent or followed.
    assert world.names().count("submit_sms") > 1
    assert result.outcome == "delivered"
    assert [(r.channel, r.state) for r in result.channels] == [("sms", "delivered")]
    assert "poll_sms" not in world.names() and "send_email" not in world.names()
    assert "record_verdict" not in world.names()


async def test_approve_resend_is_refused_in_flight_then_accepted_after_a_retryable_failure(
    harness, queue
):
    world = World(
        facts(channels=["sms"]),
        poll=lambda token, n: "undelivered" if token.endswith(":1") else "delivered",
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await phase_is(handle, "observing")
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(
                NotificationWorkflow.approve_resend_update, ResendRequest("sms", "ops", "try again")
            )
        await harness.env.sleep(60)
        await phase_is(handle, "awaiting-operator")
        accepted = await handle.execute_update(
            NotificationWorkflow.approve_resend_update, ResendRequest("sms", "ops", "number fixed")
        )
        result = await handle.result()
        await keep_history(handle, "resend_after_failure")
    assert accepted.accepted and accepted.attempt_number == 2
    numbers = [c[1].attempt_number for c in world.calls if c[0] == "authorize"]
    assert numbers == [1, 2]
    assert result.outcome == "delivered"
    submitted = [c[1].attempt_token for c in world.calls if c[0] == "submit_sms"]
    assert len(submitted) == 2 and submitted[0] != submitted[1]


async def test_a_refused_resend_signal_is_recorded_and_changes_nothing(harness, queue):
    world = World(facts(channels=["sms"]), poll=lambda token, n: "delivered" if n >= 3 else "sent")
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await phase_is(handle, "observing")
        await handle.signal(
            NotificationWorkflow.approve_resend_signal, ResendRequest("sms", "ops", "impatient")
        )
        result = await handle.result()
        await keep_history(handle, "refused_resend_signal")
    refused = [c[1] for c in world.calls if c[0] == "record_operator_action"]
    assert [(a.action, a.outcome) for a in refused] == [("approve-resend", "refused")]
    assert [c[1].attempt_number for c in world.calls if c[0] == "authorize"] == [1]
    assert result.outcome == "delivered"


async def test_an_intent_completes_when_the_worker_restarts_in_the_middle(harness, queue):
    world = World(facts(channels=["sms"]))
    # No workflow cache on the first worker: the time-skipping server never expires a
    # sticky queue, while a real server moves the task to the normal queue after 5 s.
    async with harness.worker(world, queue, sticky=False):
        handle = await harness.start(world, queue)
        await until(lambda: "submit_sms" in world.names())
    # The first worker is gone; a new one (new process state, same queue) takes over.
    async with harness.worker(world, queue):
        token = next(c[1].attempt_token for c in world.calls if c[0] == "submit_sms")
        await handle.signal(NotificationWorkflow.receipt, ReceiptSignal(token, "delivered"))
        result = await handle.result()
    assert result.outcome == "delivered"
    assert world.names().count("submit_sms") == 1


async def test_a_cancel_arriving_with_the_start_is_recorded_before_anything_is_sent(harness, queue):
    world = World(facts())
    async with harness.worker(world, queue):
        f = world.facts
        handle = await harness.env.client.start_workflow(
            NotificationWorkflow.run,
            NotificationInput(f.intent_id),
            id=keys.workflow_id(f.business_key),
            task_queue=queue,
            start_signal="cancel",
            start_signal_args=[CancelRequest("ops", "changed my mind")],
        )
        result = await handle.result()
    assert result.outcome == "cancelled"
    assert "authorize" not in world.names()
    assert [c[1].action for c in world.calls if c[0] == "record_operator_action"] == ["cancel"]


async def test_a_permanent_failure_code_refuses_a_resend(harness, queue):
    def submit(channel: str, token: str) -> SubmitOutcome:
        raise permanent("21211")

    world = World(facts(channels=["sms"]), submit=submit)
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "permanent_failure_no_resend")
    assert result.outcome == "failed"
    assert result.channels[0].error_code == "21211"
    # No operator window was opened: the workflow finished without waiting for a resend.
    assert [c[1].attempt_number for c in world.calls if c[0] == "authorize"] == [1]


async def test_a_cancel_while_observing_records_unknown_not_recalled(harness, queue):
    world = World(facts(channels=["sms"]), poll=lambda token, n: "sent")
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await until(lambda: "submit_sms" in world.names())
        await handle.signal(NotificationWorkflow.cancel_signal, CancelRequest("ops", "filled"))
        result = await handle.result()
        await keep_history(handle, "cancel_while_observing")
    verdicts = [(c[1].state, c[1].source) for c in world.calls if c[0] == "record_verdict"]
    assert verdicts == [("unknown", "cancel")]
    assert result.outcome == "unknown"


async def test_a_long_operator_wait_continues_as_new_and_keeps_its_state(harness, queue):
    world = World(
        facts(channels=["sms"], continue_as_new_after_events=5),
        poll=lambda token, n: "undelivered" if token.endswith(":1") else "delivered",
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        first_run = (await handle.describe()).run_id
        await harness.env.sleep(60)
        latest = harness.env.client.get_workflow_handle(handle.id)
        await phase_is(latest, "awaiting-operator")
        assert (await latest.describe()).run_id != first_run
        accepted = await latest.execute_update(
            NotificationWorkflow.approve_resend_update, ResendRequest("sms", "ops", "fixed")
        )
        result = await handle.result()
        await keep_history(latest, "continued_as_new")
    assert accepted.accepted and accepted.attempt_number == 2
    assert result.outcome == "delivered"
    assert [c[1].attempt_number for c in world.calls if c[0] == "authorize"] == [1, 2]


class Held:
    """Events a test steps a held activity with: it `entered` (with `seen` the inputs it
    holds); it returns on `release`."""

    def __init__(self) -> None:
        self.entered, self.release = asyncio.Event(), asyncio.Event()
        self.seen: list[Any] = []

    async def hold(self, input: Any) -> None:
        self.seen.append(input)
        self.entered.set()
        await self.release.wait()


def hold_at_the_last_moment(world: World) -> tuple[Held, Held]:
    """Hold the run where an operator's request can land while it continues as new: its
    first `record_waiting` for a resend, and every `record_operator_action`, so the
    request's handler is still running when the long run waits for its handlers to
    finish. An accepted cancel marks the intent cancelled, as the ledger does
    (facts.cancelled)."""
    waiting, recording = Held(), Held()
    fakes = world.activities
    held = ("record_waiting", "record_operator_action")

    def activities() -> list[Any]:
        listed = fakes()
        record_waiting, record_action = (next(a for a in listed if a.__name__ == n) for n in held)

        @activity.defn(name="record_waiting")
        async def held_waiting(input: WaitingInput) -> WaitingFacts:
            if input.awaiting == "resend" and not waiting.entered.is_set():
                await waiting.hold(input)
            return await record_waiting(input)

        @activity.defn(name="record_operator_action")
        async def held_action(input: OperatorActionInput) -> None:
            await recording.hold(input)
            if input.action == "cancel" and input.outcome == "accepted":
                world.facts = replace(world.facts, cancelled=True)
            await record_action(input)

        return [a for a in listed if a.__name__ not in held] + [held_waiting, held_action]

    world.activities = activities
    return waiting, recording


async def ask_while_continuing_as_new(
    harness: Any,
    queue: str,
    world: World,
    message: Any,
    request: Any,
    *,
    cancel_in_temporal: bool = False,
) -> tuple[Any, Any]:
    """Start a run whose history is long at once, land `message` (an update, or a signal)
    while the run waits for its handlers before it continues as new (then, if asked, a
    cancellation requested in Temporal too), and give the update's answer (None for a
    signal) and the intent's result (or how the run failed)."""
    waiting, recording = hold_at_the_last_moment(world)
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        # Skip the server's clock a second at a time up to the first poll's verdict; no
        # further, so the held activity is far from its start-to-close timeout.
        for _ in range(600):
            if waiting.entered.is_set():
                break
            await harness.env.sleep(1)
        assert waiting.entered.is_set()
        asked = None
        if hasattr(message, "__temporal_signal_definition"):  # a signal: no answer
            await handle.signal(message, request)
        else:
            asked = await handle.start_update(
                message, request, wait_for_stage=WorkflowUpdateStage.ACCEPTED
            )
        await asyncio.wait_for(recording.entered.wait(), 10)
        waiting.release.set()
        # The phase is set in the step that then waits for the handlers to finish: the
        # run stands at its safe point, the update's handler still recording.
        await phase_is(handle, "awaiting-operator")
        if cancel_in_temporal:
            await handle.cancel()
            await until(lambda: any(a.action == "cancel" for a in recording.seen))
        recording.release.set()
        # Bounded: a request lost with its run may leave the operator, or the intent,
        # without an end.
        answer = await asyncio.wait_for(asked.result(), 30) if asked else None
        try:
            return answer, await asyncio.wait_for(handle.result(), 30)
        except WorkflowFailureError as failed:
            return answer, failed


async def test_a_resend_accepted_while_continuing_as_new_is_run_before_the_run_continues(
    harness, queue
):
    world = World(
        facts(channels=["sms"], continue_as_new_after_events=5),
        poll=lambda token, n: "undelivered" if token.endswith(":1") else "delivered",
    )
    accepted, result = await ask_while_continuing_as_new(
        harness,
        queue,
        world,
        NotificationWorkflow.approve_resend_update,
        ResendRequest("sms", "ops", "fixed"),
    )
    # The operator was told yes and the ledger recorded it: the new attempt runs, once.
    assert accepted.accepted and accepted.attempt_number == 2
    assert [c[1].attempt_number for c in world.calls if c[0] == "authorize"] == [1, 2]
    assert result.outcome == "delivered"


@pytest.mark.parametrize(
    "message", [NotificationWorkflow.cancel_update, NotificationWorkflow.cancel_signal]
)
async def test_a_cancel_accepted_while_continuing_as_new_closes_the_window_it_was_taken_in(
    harness, queue, message
):
    world = World(
        facts(channels=["sms"], continue_as_new_after_events=5),
        poll=lambda token, n: "undelivered",
    )
    cancelled, result = await ask_while_continuing_as_new(
        harness, queue, world, message, CancelRequest("ops", "filled")
    )
    assert cancelled is None or cancelled.accepted
    assert result.outcome == "cancelled"
    # The run that took the cancel tells the ledger it no longer waits for a resend (a new
    # run would start with nothing to close, and the intent would wait in the ledger).
    waits = [c[1].awaiting for c in world.calls if c[0] == "record_waiting"]
    assert waits == ["resend", None]
    assert [c[0] for c in world.calls].count("load_intent") == 1  # no continue-as-new


async def test_a_cancel_requested_in_temporal_while_continuing_as_new_ends_the_run_cancelled(
    harness, queue
):
    # The cancellation reaches `run`, not a handler: the wait for handlers does not see it.
    world = World(facts(channels=["sms"], continue_as_new_after_events=5))
    world.poll = lambda token, n: "undelivered"
    accepted, failed = await ask_while_continuing_as_new(
        harness,
        queue,
        world,
        NotificationWorkflow.approve_resend_update,
        ResendRequest("sms", "ops", "fixed"),
        cancel_in_temporal=True,
    )
    assert accepted.accepted  # the operator has the answer the ledger recorded
    assert isinstance(failed, WorkflowFailureError)
    assert isinstance(failed.cause, CancelledError)  # the run ends as Temporal was asked
    # The cancel closed the intent before the accepted resend could run: nothing new sent.
    assert [c[1].attempt_number for c in world.calls if c[0] == "authorize"] == [1]
    assert [c[1].awaiting for c in world.calls if c[0] == "record_waiting"] == ["resend", None]


async def test_a_plan_naming_an_unknown_channel_fails_the_run_before_anything_is_authorized(
    harness, queue
):
    """The former `if channel == "sms" ... else <email>` in the workflow: a third channel
    took the email path. It now fails the run on purpose, before any activity acts."""
    world = World(facts(channels=["fax", "sms"]))
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "UnknownChannel"
    assert "unknown channel 'fax'" in cause.message
    assert world.names() == ["load_intent"]


async def test_a_resend_on_an_unknown_channel_is_refused_with_the_reason(harness, queue):
    world = World(facts(channels=["sms"]), poll=lambda token, n: "delivered" if n >= 3 else "sent")
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await phase_is(handle, "observing")
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                NotificationWorkflow.approve_resend_update, ResendRequest("fax", "ops", "why not")
            )
        result = await handle.result()
    assert "unknown channel 'fax'" in str(refused.value.cause)
    assert result.outcome == "delivered"
