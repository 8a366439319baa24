"""What an engineer reads in the Temporal Web UI: a summary on every activity and timer,
current details that follow the phase, the outcome and the channels used as search
attributes, and the operator actions under names that read well on the command line."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.converter import DataConverter
from temporalio.exceptions import CancelledError

from activities.contracts import CancelRequest, ResendRequest, SubmitOutcome
from tests.workflows.conftest import World, deny, facts, keep_history
from tests.workflows.test_notification_workflow import hold_submit, phase_is
from workflows.notification import CHANNELS_USED, OUTCOME, NotificationWorkflow

pytestmark = pytest.mark.workflow

_decode = DataConverter.default.payload_converter.from_payload


def summaries(history: Any) -> tuple[dict[str, list[str]], list[str]]:
    """Activity summaries by activity type, and timer summaries, in history order."""
    activities: dict[str, list[str]] = {}
    timers: list[str] = []
    for event in history.events:
        meta = event.user_metadata
        summary = _decode(meta.summary, str) if meta.HasField("summary") else ""
        if event.HasField("activity_task_scheduled_event_attributes"):
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            activities.setdefault(name, []).append(summary)
        elif event.HasField("timer_started_event_attributes"):
            timers.append(summary)
    return activities, timers


async def details(handle: WorkflowHandle[Any, Any]) -> str:
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


async def test_every_activity_and_timer_says_what_it_is_for(harness, queue):
    # SMS accepted and never settled: polls, then the fallback window sends the email.
    world = World(
        facts(),
        poll=lambda token, n: "sent",
        submit=lambda ch, tok: SubmitOutcome("submitted" if ch == "sms" else "sent", "x"),
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await handle.result()
        history = await handle.fetch_history()
    activities, timers = summaries(history)
    assert activities["submit_sms"] == ["submit sms #1"]
    assert activities["send_email"] == ["send email #1, fallback after sms unknown"]
    assert activities["record_verdict"] == ["record sms #1 unknown (fallback)"]
    polls = activities["poll_sms"]
    assert polls and all(
        p.startswith(f"poll sms #1, poll {i + 1} before ") for i, p in enumerate(polls)
    )
    assert timers and all(timers), timers
    assert timers[0].startswith("receipt for sms #1 or poll 1 at ")
    assert timers[-1].startswith("receipt for sms #1 until the fallback window 10 min, then email")
    # Every scheduled activity and every timer carries one.
    assert all(all(s) for s in activities.values()), activities
    assert history.events[0].user_metadata.HasField("summary")  # the start's static summary


async def test_current_details_follow_the_phase_in_words(harness, queue):
    world = World(facts(channels=["sms"]), poll=lambda token, n: "delivered" if n >= 2 else "sent")
    async with harness.worker(world, queue):
        world.facts.send_at = (await harness.env.get_current_time()) + timedelta(days=1)
        handle = await harness.start(world, queue)
        await phase_is(handle, "scheduled")
        scheduled = await details(handle)
        await harness.env.sleep(timedelta(days=1, seconds=1))
        await phase_is(handle, "observing")
        observing = await details(handle)
        await handle.result()
        finished = await details(handle)
    assert scheduled.startswith("scheduled: waiting for send-at ")
    assert observing.startswith("waiting for a receipt for sms #1 until ")
    assert "next poll at " in observing
    assert finished.startswith("delivered: sms: delivered")


async def _outcome_of(handle: WorkflowHandle[Any, Any]) -> tuple[str | None, list[str] | None]:
    attributes = (await handle.describe()).typed_search_attributes
    return attributes.get(OUTCOME), attributes.get(CHANNELS_USED)


@pytest.mark.parametrize(
    ("world", "outcome", "used"),
    [
        (
            lambda: World(facts(channels=["sms"]), poll=lambda t, n: "delivered"),
            "delivered",
            ["sms"],
        ),
        (lambda: World(facts(), decide=lambda i, now: deny()), "denied", []),
        (
            lambda: World(facts(channels=["sms"], resend_window_seconds=0)),
            "unknown",
            ["sms"],
        ),
    ],
    ids=["delivered", "denied", "unknown"],
)
async def test_the_outcome_and_the_channels_used_are_search_attributes(
    harness, queue, world, outcome, used
):
    world = world()
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        assert (result.outcome, await _outcome_of(handle)) == (outcome, (outcome, used))


async def test_a_cancelled_intent_has_the_cancelled_outcome(harness, queue):
    world = World(facts())
    async with harness.worker(world, queue):
        world.facts.send_at = (await harness.env.get_current_time()) + timedelta(days=1)
        handle = await harness.start(world, queue)
        await phase_is(handle, "scheduled")
        # The update's name as `temporal workflow update execute --name cancel` sends it.
        await handle.execute_update("cancel", CancelRequest("ops", "seat filled"))
        result = await handle.result()
        assert (result.outcome, await _outcome_of(handle)) == ("cancelled", ("cancelled", []))


async def test_a_cancel_requested_in_temporal_takes_the_operator_path_and_ends_cancelled(
    harness, queue
):
    # `temporal workflow cancel` / the Web UI while the SMS is with the carrier: the ledger
    # records the cancel and the attempt already handed over; the submit is not cut short,
    # nothing is followed or sent after it, and the run ends Canceled.
    world = World(facts(channels=["sms", "email"]))
    entered, release = hold_submit(world, lambda: SubmitOutcome("submitted", "SM-inflight"))
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await asyncio.wait_for(entered.wait(), 10)
        await handle.cancel(reason="seat filled")
        await phase_is_cancelled(handle)
        release.set()
        with pytest.raises(WorkflowFailureError) as ended:
            await handle.result()
        await keep_history(handle, "temporal_cancel_in_flight")
        outcome = await _outcome_of(handle)
    assert isinstance(ended.value.cause, CancelledError)
    token = next(c[1].attempt_token for c in world.calls if c[0] == "submit_sms")
    [action] = [c[1] for c in world.calls if c[0] == "record_operator_action"]
    assert (action.action, action.outcome, action.requested_in_temporal) == (
        "cancel",
        "accepted",
        True,
    )
    assert action.reason == "seat filled" and action.detail["in_flight"] == token
    assert "not recalled" in action.detail["note"]
    assert "poll_sms" not in world.names() and "send_email" not in world.names()
    assert outcome == ("unknown", ["sms"])  # handed to the carrier, no longer followed


async def phase_is_cancelled(handle: WorkflowHandle[Any, Any]) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while not (await handle.query(NotificationWorkflow.projection)).cancelled:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the cancel request never reached the workflow")
        await asyncio.sleep(0.02)


async def test_a_cancel_requested_in_temporal_before_send_at_ends_cancelled(harness, queue):
    world = World(facts())
    async with harness.worker(world, queue):
        world.facts.send_at = (await harness.env.get_current_time()) + timedelta(days=1)
        handle = await harness.start(world, queue)
        await phase_is(handle, "scheduled")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        assert await _outcome_of(handle) == ("cancelled", [])
    assert "authorize" not in world.names()
    [action] = [c[1] for c in world.calls if c[0] == "record_operator_action"]
    assert action.operator == "temporal" and action.requested_in_temporal
    assert action.reason == "cancellation requested in Temporal"


async def test_the_updates_answer_to_their_names(harness, queue):
    world = World(facts(channels=["sms"]), poll=lambda t, n: "undelivered")
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        # Time skips only while the test sleeps on the server (or waits for the result).
        await harness.env.sleep(60)
        await phase_is(handle, "awaiting-operator")
        # The names as `temporal workflow update execute --name ...` sends them.
        accepted = await handle.execute_update(
            "approve_resend", ResendRequest("sms", "ops", "number fixed"), result_type=None
        )
        await harness.env.sleep(60)
        await phase_is(handle, "awaiting-operator")
        closed = await handle.execute_update("cancel", CancelRequest("ops", "enough"))
        await handle.result()
    assert accepted["accepted"] and closed["accepted"]
    assert [c[1].attempt_number for c in world.calls if c[0] == "authorize"] == [1, 2]


def test_every_recorded_history_carries_every_summary():
    # What a worker replays (tests/workflows/test_replay.py) is what the Web UI showed.
    from pathlib import Path

    from temporalio.client import WorkflowHistory

    paths = sorted((Path(__file__).parent / "histories").glob("*.json"))
    assert paths
    for path in paths:
        name = path.stem
        history = WorkflowHistory.from_json(name, path.read_text())
        activities, timers = summaries(history)
        assert all(all(s) for s in activities.values()), (name, activities)
        assert all(timers), (name, timers)
    assert timers == []  # the cancelled one: no timer was started after the cancel
