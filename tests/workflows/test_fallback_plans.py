"""Plans other than SMS-first: email first in mode `fallback`, and mode `all`.

What "reached" means per channel is domain.fallback's; these tests walk it through the
workflow on the time-skipping server."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.exceptions import ApplicationError

from activities.contracts import SubmitOutcome
from tests.workflows.conftest import World, facts, keep_history

pytestmark = pytest.mark.workflow

EMAIL_FIRST = ["email", "sms"]


def mailbox_unavailable() -> ApplicationError:
    # What activities.email raises when the relay refuses the recipient with a 5xx.
    return ApplicationError(
        "mailbox unavailable", "550", type="PermanentProviderError", non_retryable=True
    )


async def test_an_accepted_email_first_reaches_the_person_and_no_sms_is_attempted(harness, queue):
    world = World(
        facts(channels=EMAIL_FIRST),
        submit=lambda channel, token: SubmitOutcome("sent", "<m@herald>"),
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "email_first_sent")
    assert result.outcome == "sent"
    assert [(r.channel, r.state) for r in result.channels] == [("email", "sent")]
    assert [c[1].channel for c in world.calls if c[0] == "authorize"] == ["email"]
    assert "submit_sms" not in world.names() and "poll_sms" not in world.names()


async def test_an_email_rejected_by_the_relay_is_followed_by_the_sms(harness, queue):
    def submit(channel: str, token: str) -> SubmitOutcome:
        if channel == "email":
            raise mailbox_unavailable()
        return SubmitOutcome("submitted", "SM1")

    world = World(
        facts(channels=EMAIL_FIRST, resend_window_seconds=0),
        submit=submit,
        poll=lambda token, n: "delivered",
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "email_first_bounced_sms")
    assert result.outcome == "delivered"
    assert {r.channel: r.state for r in result.channels} == {"email": "failed", "sms": "delivered"}
    assert result.channels[0].error_code == "550"
    assert [c[1].channel for c in world.calls if c[0] == "authorize"] == ["email", "sms"]
    assert world.names().count("submit_sms") == 1
    # "At once": the SMS does not wait for a fallback timer after a permanent email failure.
    sends = {c[0]: c[2] for c in world.calls if c[0] in ("send_email", "submit_sms")}
    assert sends["submit_sms"] - sends["send_email"] < timedelta(seconds=30)


async def test_an_email_rejected_by_the_relay_ends_the_plan_when_the_policy_says_so(harness, queue):
    def submit(channel: str, token: str) -> SubmitOutcome:
        raise mailbox_unavailable()

    world = World(
        facts(channels=EMAIL_FIRST, email_on_permanent_failure=False, resend_window_seconds=0),
        submit=submit,
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
    assert result.outcome == "failed"
    assert [(r.channel, r.state) for r in result.channels] == [("email", "failed")]
    assert "submit_sms" not in world.names()
    assert [c[1].channel for c in world.calls if c[0] == "authorize"] == ["email"]


async def test_mode_all_sends_every_channel_at_once_whatever_each_one_says(harness, queue):
    world = World(
        facts(channels=["sms", "email"], mode="all"),
        submit=lambda channel, token: SubmitOutcome(
            "submitted" if channel == "sms" else "sent", "x"
        ),
        poll=lambda token, n: "delivered" if n >= 2 else "sent",
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "mode_all")
    assert result.outcome == "delivered"
    assert {r.channel: r.state for r in result.channels} == {"sms": "delivered", "email": "sent"}
    assert sorted(c[1].channel for c in world.calls if c[0] == "authorize") == ["email", "sms"]
    assert world.names().count("send_email") == 1 and world.names().count("submit_sms") == 1
    # Neither channel waits for the other: the email goes before the SMS is even polled.
    sends = {c[0]: c[2] for c in world.calls if c[0] in ("send_email", "submit_sms")}
    first_poll = next(c[2] for c in world.calls if c[0] == "poll_sms")
    assert sends["send_email"] <= first_poll
    assert abs(sends["send_email"] - sends["submit_sms"]) < timedelta(seconds=30)
    # No fallback decision is taken in mode `all`: no verdict.
    assert "record_verdict" not in world.names()
