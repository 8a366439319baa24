"""An unknown attempt waits for a person's settlement: the window, the `settle` and
`lookup` updates and their validator, and resend after them."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError

from activities.contracts import (
    LookupRequest,
    LookupResult,
    ReceiptSignal,
    ResendRequest,
    SettleRequest,
)
from tests.workflows.conftest import World, facts, keep_history
from tests.workflows.test_notification_workflow import at, phase_is, states_are
from workflows.notification import NotificationWorkflow

pytestmark = pytest.mark.workflow

WINDOW = 3600.0


def unknown_world(**overrides: Any) -> World:
    """An SMS the carrier accepts and never reports on, until the second attempt."""
    values: dict[str, Any] = dict(channels=["sms"], settlement_window_seconds=WINDOW)
    values.update(overrides)
    return World(
        facts(**values),
        poll=lambda token, n: "sent" if token.endswith(":1") else "delivered",
    )


async def past_the_horizon(harness: Any, handle: Any) -> None:
    """Cross the 30-minute polling horizon; the run then waits for an operator."""
    await harness.env.sleep(1800 + 60)
    await phase_is(handle, "awaiting-operator")


async def refusal(handle: Any, update: Any, request: Any) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await handle.execute_update(update, request)
    return str(caught.value.cause)


async def test_an_unknown_attempt_waits_is_settled_after_a_lookup_and_then_resent(harness, queue):
    world = unknown_world()
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await past_the_horizon(harness, handle)
        waiting = [c for c in world.calls if c[0] == "record_waiting"]
        # The horizon verdict opened the window at once, naming its attempt (review item).
        assert waiting[0][1].awaiting == "settlement"
        token = waiting[0][1].attempt_tokens[0]
        verdict_at = next(c[2] for c in world.calls if c[0] == "record_verdict")
        assert waiting[0][1].until - verdict_at <= timedelta(seconds=WINDOW + 5)
        projection = await handle.query(NotificationWorkflow.projection)
        assert projection.awaiting == "settlement" and projection.awaiting_until is not None

        why = await refusal(
            handle, NotificationWorkflow.approve_resend_update, ResendRequest("sms", "ops", "go")
        )
        assert "settle it first" in why
        why = await refusal(
            handle,
            NotificationWorkflow.settle_update,
            SettleRequest("sms", "carrier-confirmed-not-delivered", "lost", operator="ops"),
        )
        assert "needs a provider lookup first" in why
        assert "record_settlement" not in world.names()  # the validator refused it

        looked = await handle.execute_update(
            NotificationWorkflow.lookup_update, LookupRequest("sms", "ops")
        )
        assert looked.raw_status == "not_found"
        settled = await handle.execute_update(
            NotificationWorkflow.settle_update,
            SettleRequest(
                "sms", "carrier-confirmed-not-delivered", "carrier holds nothing", operator="ops"
            ),
        )
        assert settled.accepted and settled.state == "undelivered" and settled.resend_allowed
        await states_are(handle, {token: "undelivered"})
        accepted = await handle.execute_update(
            NotificationWorkflow.approve_resend_update, ResendRequest("sms", "ops", "send again")
        )
        assert accepted.accepted and accepted.attempt_number == 2
        result = await handle.result()
        await keep_history(handle, "settled_then_resent")
    assert result.outcome == "delivered"
    assert [c[1].attempt_number for c in world.calls if c[0] == "authorize"] == [1, 2]
    recorded = next(c[1] for c in world.calls if c[0] == "record_settlement")
    assert (recorded.attempt_token, recorded.rule) == (token, "carrier-confirmed-not-delivered")
    # Each action is recorded at the time the workflow took it, so it reads before what it
    # caused: the lookup before its answer, the approval before the new attempt's decision.
    actions = {c[1].action: c[1] for c in world.calls if c[0] == "record_operator_action"}
    looked_up_at = at(world, "lookup_sms")
    assert datetime.fromisoformat(actions["lookup"].requested_at) <= looked_up_at
    assert datetime.fromisoformat(actions["approve-resend"].requested_at) <= at(
        world, "authorize", 1
    )
    assert recorded.window_until == waiting[0][1].until
    # The run said in the ledger when it stopped waiting.
    assert [c[1].awaiting for c in world.calls if c[0] == "record_waiting"][-1] is None


async def test_a_rule_that_forbids_a_resend_leaves_it_refused(harness, queue):
    world = unknown_world()
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await past_the_horizon(harness, handle)
        why = await refusal(
            handle,
            NotificationWorkflow.settle_update,
            SettleRequest("sms", "destination-unreachable", "ported", operator="ops"),
        )
        assert "needs a reference" in why
        why = await refusal(
            handle,
            NotificationWorkflow.settle_update,
            SettleRequest("sms", "made-up", "because", "T-1", operator="ops"),
        )
        assert "no settlement rule 'made-up'" in why
        settled = await handle.execute_update(
            NotificationWorkflow.settle_update,
            SettleRequest("sms", "destination-unreachable", "ported", "T-77", operator="ops"),
        )
        assert settled.state == "failed" and not settled.resend_allowed
        why = await refusal(
            handle, NotificationWorkflow.approve_resend_update, ResendRequest("sms", "ops", "go")
        )
        assert why.endswith(
            "settled under rule destination-unreachable, which does not allow a resend"
        )
        result = await handle.result()
    assert result.outcome == "failed"
    assert [c[1].attempt_number for c in world.calls if c[0] == "authorize"] == [1]


async def test_a_provider_terminal_after_a_settlement_replaces_it(harness, queue):
    world = unknown_world()
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await past_the_horizon(harness, handle)
        token = next(c[1].attempt_token for c in world.calls if c[0] == "submit_sms")
        await handle.execute_update(
            NotificationWorkflow.settle_update,
            SettleRequest("sms", "carrier-ticket-not-delivered", "ticket", "T-1", operator="ops"),
        )
        await handle.signal(NotificationWorkflow.receipt, ReceiptSignal(token, "delivered"))
        await states_are(handle, {token: "delivered"})
        projection = await handle.query(NotificationWorkflow.projection)
        assert projection.settlements == {}
        why = await refusal(
            handle, NotificationWorkflow.approve_resend_update, ResendRequest("sms", "ops", "go")
        )
        assert "the attempt is delivered" in why
        result = await handle.result()
    assert result.outcome == "delivered"


async def test_the_window_closes_unsettled_and_a_late_settlement_is_refused(harness, queue):
    world = unknown_world()
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await past_the_horizon(harness, handle)
        await harness.env.sleep(WINDOW + 60)
        result = await handle.result()
        await keep_history(handle, "settlement_expired")
        with pytest.raises(Exception):  # noqa: B017 - the run is closed: no update lands
            await handle.execute_update(
                NotificationWorkflow.settle_update,
                SettleRequest("sms", "carrier-ticket-not-delivered", "late", "T", operator="ops"),
            )
    assert result.outcome == "unknown"
    expired = [c[1] for c in world.calls if c[0] == "record_waiting" and c[1].expired_unsettled]
    assert len(expired) == 1 and expired[0].expired_unsettled[0].endswith(":sms:1")
    assert "record_settlement" not in world.names()


async def test_a_lookup_that_finds_a_final_status_settles_the_attempt_by_itself(harness, queue):
    world = unknown_world()
    world.lookup = lambda token: LookupResult(True, "delivered", "delivered")
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await past_the_horizon(harness, handle)
        looked = await handle.execute_update(
            NotificationWorkflow.lookup_update, LookupRequest("sms", "ops")
        )
        assert looked.state == "delivered"
        result = await handle.result()
    assert result.outcome == "delivered"
    assert "record_settlement" not in world.names()


async def test_a_long_settlement_wait_continues_as_new_and_keeps_its_window(harness, queue):
    world = unknown_world(continue_as_new_after_events=5)
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        first_run = (await handle.describe()).run_id
        latest = harness.env.client.get_workflow_handle(handle.id)
        await past_the_horizon(harness, latest)
        for _ in range(200):
            if (await latest.describe()).run_id != first_run:
                break
            await harness.env.sleep(1)
        assert (await latest.describe()).run_id != first_run
        await phase_is(latest, "awaiting-operator", timeout=20)
        settled = await latest.execute_update(
            NotificationWorkflow.settle_update,
            SettleRequest("sms", "carrier-ticket-not-delivered", "ticket", "T-2", operator="ops"),
        )
        assert settled.accepted
        accepted = await latest.execute_update(
            NotificationWorkflow.approve_resend_update, ResendRequest("sms", "ops", "again")
        )
        assert accepted.attempt_number == 2
        result = await handle.result()
    assert result.outcome == "delivered"
    windows = {c[1].until for c in world.calls if c[0] == "record_waiting" and c[1].awaiting}
    assert len([w for w in windows if w is not None]) >= 1


async def test_a_lookup_the_provider_never_answers_fails_after_its_window(harness, queue):
    # Once retried without end: the operator's `settle --lookup` waited with it.
    from temporalio.client import WorkflowUpdateStage
    from temporalio.exceptions import ActivityError, TimeoutError

    from workflows.notification import LOOKUP_WINDOW

    def provider_down(token: str) -> LookupResult:
        raise RuntimeError("the provider answered 503")

    world = unknown_world()
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await past_the_horizon(harness, handle)
        world.lookup = provider_down
        asked = await handle.start_update(
            NotificationWorkflow.lookup_update,
            LookupRequest("sms", "ops"),
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
        )
        await harness.env.sleep(LOOKUP_WINDOW.total_seconds() + 30)
        with pytest.raises(WorkflowUpdateFailedError) as failed:
            await asked.result()
        # The window closes during a backoff (the server then gives the last failure) or
        # during a try (a timeout): either way the operator has an answer.
        assert isinstance(failed.value.cause, ActivityError)
        last = failed.value.cause.cause
        assert isinstance(last, TimeoutError) or "answered 503" in str(last)
        tries = [c for c in world.calls if c[0] == "lookup_sms"]
        assert 1 < len(tries) < 20
        # The run still waits for its settlement, and a later lookup is answered.
        world.lookup = lambda token: LookupResult(False, "not_found")
        looked = await handle.execute_update(
            NotificationWorkflow.lookup_update, LookupRequest("sms", "ops")
        )
        assert looked.raw_status == "not_found"
        await phase_is(handle, "awaiting-operator")


async def test_a_move_request_while_the_build_is_still_the_target_changes_nothing(harness, queue):
    # Unversioned here (the time-skipping server): the run's target never changes, so
    # `move_to_current_build` wakes the waiting loop and is dropped; the same run goes on
    # waiting and takes the settlement (the move itself: tests/e2e/test_rollout.py).
    world = unknown_world()
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        await past_the_horizon(harness, handle)
        before = await handle.query(NotificationWorkflow.projection)
        await handle.signal(NotificationWorkflow.move_to_current_build)
        after = await handle.query(NotificationWorkflow.projection)
        assert (after.awaiting, after.awaiting_until) == (before.awaiting, before.awaiting_until)
        settled = await handle.execute_update(
            NotificationWorkflow.settle_update,
            SettleRequest("sms", "destination-unreachable", "ported", "T-77", operator="ops"),
        )
        assert settled.accepted
        result = await handle.result()
        described = await handle.describe()
    assert result.outcome == "failed"
    assert described.run_id == handle.result_run_id  # no continue-as-new
    waits = [c[1].awaiting for c in world.calls if c[0] == "record_waiting"]
    assert waits.count("settlement") == 1  # the window was not opened again
