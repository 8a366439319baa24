"""A worker whose data key ring cannot read the intent stops it: the non-retryable
DataKeyUnreadable (activities/key_errors.py) takes the workflow's path for a failed step,
once per channel, and nothing is sent or retried (a local authorize's failure reaches the
workflow unwrapped, not as an ActivityError)."""

from __future__ import annotations

from datetime import datetime

import pytest
from temporalio.exceptions import ApplicationError

from activities.contracts import AuthorizeInput, AuthorizeResult, ErrorType
from tests.workflows.conftest import World, facts, keep_history

pytestmark = pytest.mark.workflow


def unreadable(input: AuthorizeInput, now: datetime) -> AuthorizeResult:
    raise ApplicationError(
        "this worker's data key ring cannot read the intent's contact data: "
        "no data key 'k9' in the ring",
        type=ErrorType.DATA_KEY_UNREADABLE,
        non_retryable=True,
    )


async def test_an_unreadable_intent_fails_each_channel_once_and_ends(harness, queue):  # type: ignore[no-untyped-def]
    world = World(facts(channels=["sms", "email"]), decide=unreadable)
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "authorize_failure")
    # One authorize per channel: the error's own flag stops the retry policy.
    assert [c[1].channel for c in world.calls if c[0] == "authorize"] == ["sms", "email"]
    assert "submit_sms" not in world.names() and "send_email" not in world.names()
    assert [(c.channel, c.state, c.rule) for c in result.channels] == [
        ("sms", "failed", "prepare.failed"),
        ("email", "failed", "prepare.failed"),
    ]
    assert "no data key 'k9'" in result.channels[0].reason
    # The run completed (the result above); the intent's derived state stays `pending`
    # (no decision, no attempt), and the activity's data_key_unreadable review item says why.
    assert result.outcome == "pending"
