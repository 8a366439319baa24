"""An email accepted by a provider that reports events (SendGrid's 202, `submitted`) is
followed until a final event or the events horizon; the plan moves on only on a bounce or
a drop. Walked on the time-skipping server; histories kept for replay."""

from __future__ import annotations

from typing import Any

import pytest

from activities.contracts import ReceiptSignal, SubmitOutcome
from domain import keys
from tests.workflows.conftest import World, facts, keep_history, permanent
from tests.workflows.test_fallback_plans import EMAIL_FIRST
from tests.workflows.test_notification_workflow import phase_is
from workflows.notification import NotificationWorkflow

pytestmark = pytest.mark.workflow


def sendgrid(sms: Any = None):  # type: ignore[no-untyped-def]
    """Email answers `submitted` (a 202 with an X-Message-Id); SMS as given."""

    def submit(channel: str, token: str) -> SubmitOutcome:
        if channel == "email":
            return SubmitOutcome("submitted", "sg-message-1")
        if sms is not None:
            return sms(token)
        return SubmitOutcome("submitted", "SM1")

    return submit


def email_token(world: World) -> str:
    return [c[1].attempt_token for c in world.calls if c[0] == "send_email"][-1]


async def test_a_delivered_event_ends_an_email_first_plan_delivered(harness, queue):
    world = World(facts(channels=EMAIL_FIRST), submit=sendgrid())
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await phase_is(handle, "observing:email")
        await handle.signal(
            NotificationWorkflow.receipt, ReceiptSignal(email_token(world), "delivered")
        )
        result = await handle.result()
        await keep_history(handle, "email_events_delivered")
    assert result.outcome == "delivered"
    assert [(r.channel, r.state) for r in result.channels] == [("email", "delivered")]
    assert "submit_sms" not in world.names() and "record_verdict" not in world.names()


async def test_a_bounce_moves_an_email_first_plan_to_the_sms(harness, queue):
    world = World(
        facts(channels=EMAIL_FIRST, resend_window_seconds=0),
        submit=sendgrid(),
        poll=lambda token, n: "delivered",
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await phase_is(handle, "observing:email")
        await handle.signal(
            NotificationWorkflow.receipt,
            ReceiptSignal(email_token(world), "undelivered", "5.1.1"),
        )
        result = await handle.result()
        await keep_history(handle, "email_events_bounced_sms")
    assert result.outcome == "delivered"
    assert {r.channel: r.state for r in result.channels} == {
        "email": "undelivered",
        "sms": "delivered",
    }


async def test_no_event_by_the_horizon_records_sent_and_the_plan_stops(harness, queue):
    world = World(facts(channels=EMAIL_FIRST, email_events_horizon_seconds=900), submit=sendgrid())
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "email_events_horizon_sent")
    assert result.outcome == "sent"
    assert [(r.channel, r.state) for r in result.channels] == [("email", "sent")]
    (verdict,) = [c for c in world.calls if c[0] == "record_verdict"]
    assert (verdict[1].state, verdict[1].source) == ("sent", "horizon")
    sent_at = [c[2] for c in world.calls if c[0] == "send_email"][0]
    assert (verdict[2] - sent_at).total_seconds() >= 900
    assert "submit_sms" not in world.names()


async def test_the_email_fallback_stops_on_a_delivered_event(harness, queue):
    world = World(
        facts(channels=["sms", "email"], resend_window_seconds=0),
        submit=sendgrid(sms=lambda token: (_ for _ in ()).throw(permanent())),
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await phase_is(handle, "observing:email")
        await handle.signal(
            NotificationWorkflow.receipt, ReceiptSignal(email_token(world), "delivered")
        )
        result = await handle.result()
        await keep_history(handle, "email_events_fallback_delivered")
    assert result.outcome == "delivered"
    assert {r.channel: r.state for r in result.channels} == {
        "sms": "failed",
        "email": "delivered",
    }


async def test_an_smtp_email_takes_no_events_wait(harness, queue):
    world = World(
        facts(channels=EMAIL_FIRST),
        submit=lambda channel, token: SubmitOutcome("sent", "<m@herald>"),
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        history = await handle.fetch_history()
    assert result.outcome == "sent"
    # `sent` is an SMTP relay's last word: no timer waits for an event that never comes.
    assert not [e for e in history.events if e.HasField("timer_started_event_attributes")]


async def test_an_email_whose_send_answer_was_lost_ends_unknown_and_the_sms_does_not_follow(
    harness, queue
):
    world = World(
        facts(channels=EMAIL_FIRST, resend_window_seconds=0),
        submit=lambda channel, token: SubmitOutcome(
            "unknown", reason="timeout; sendgrid has no lookup, so it is not sent again"
        ),
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "email_events_unknown_stays")
    assert result.outcome == "unknown"
    assert [(r.channel, r.state) for r in result.channels] == [("email", "unknown")]
    assert "submit_sms" not in world.names()
    assert world.names().count("send_email") == 1


async def test_a_delivered_event_the_workflow_never_heard_of_still_decides_at_the_horizon(
    harness, queue
):
    world = World(facts(channels=EMAIL_FIRST), submit=sendgrid())
    # The ingress recorded `delivered` but could not signal (Temporal unreachable then).
    world.ledger_states = {keys.attempt_token(world.facts.business_key, "email", 1): "delivered"}
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
    assert result.outcome == "delivered"
    assert [(r.channel, r.state) for r in result.channels] == [("email", "delivered")]
