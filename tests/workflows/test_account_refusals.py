"""A refusal about the provider account (bad credentials, a suspension) never ends an intent
(time-skipping server, activities faked by name): with one provider the channel defers
until the provider may take work again and tries a new attempt, and only the business
expiry ends it, as `expired` (docs/transports.md, "Account refusals")."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from temporalio.exceptions import ApplicationError

from activities.contracts import CancelRequest, SubmitOutcome
from domain import keys
from tests.conftest import until
from tests.workflows.conftest import World, facts, keep_history
from workflows.notification import NotificationWorkflow

pytestmark = pytest.mark.workflow


def account_refused(code: str = "20003", retry_at: datetime | None = None) -> ApplicationError:
    """What the submit activity hands back for an account refusal (activities.refusals)."""
    return ApplicationError(
        "create: authentication failed (provider credentials)",
        code,
        "provider",
        retry_at.isoformat() if retry_at else "",
        type="ProviderRefused",
        non_retryable=True,
    )


def number_of(token: str) -> int:
    return keys.parse_attempt_token(token).number


async def test_an_account_refusal_with_one_provider_defers_until_the_probe_and_is_delivered(
    harness, queue
):
    start: list[datetime] = []

    def submit(channel: str, token: str) -> SubmitOutcome:
        if channel == "sms" and number_of(token) <= 2:
            # The circuit's next probe, 40 s after the start, as the activity says it.
            raise account_refused(retry_at=start[0] + timedelta(seconds=40))
        return SubmitOutcome("submitted", f"SM{number_of(token)}")

    world = World(facts(), submit=submit, poll=lambda t, n: "delivered")
    start.append(await harness.env.get_current_time())
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "account_refusal_defers")
    sms = {r.channel: r for r in result.channels}["sms"]
    assert (result.outcome, sms.state, sms.attempts) == ("delivered", "delivered", 3)
    assert "send_email" not in world.names()  # an account refusal is no failure to fall back on
    submits = [c for c in world.calls if c[0] == "submit_sms"]
    assert [number_of(c[1].attempt_token) for c in submits] == [1, 2, 3]
    # Each new attempt is authorized again by the policy (an opt-out meanwhile still holds).
    authorized = [c[1].attempt_number for c in world.calls if c[0] == "authorize"]
    assert authorized == [1, 2, 3]
    # The first waited for the probe time it was given; the second, refused again, at
    # least twice as long (a provider that keeps refusing is asked less and less often).
    assert submits[1][2] - start[0] >= timedelta(seconds=40)
    # The waits as the workflow set them (its timers), not as a busy machine timed them.
    first, second = await refused_waits(handle)
    assert first <= timedelta(seconds=40) and second >= 2 * first


async def refused_waits(handle) -> list[timedelta]:  # type: ignore[no-untyped-def]
    """The durations of the run's provider-refusal timers, in order (their summaries say
    "... again at ...", as the Web UI shows them)."""
    waits = []
    async for event in handle.fetch_history_events():
        if event.HasField("timer_started_event_attributes"):
            summary = event.user_metadata.summary.data.decode()
            if "again at" in summary:
                timeout = event.timer_started_event_attributes.start_to_fire_timeout
                waits.append(timeout.ToTimedelta())
    return waits


async def test_an_account_refusal_until_the_business_expiry_ends_expired_never_failed(
    harness, queue
):
    def submit(channel: str, token: str) -> SubmitOutcome:
        raise account_refused("10009")

    world = World(facts(channels=["sms", "email"]), submit=submit)
    start = await harness.env.get_current_time()
    world.facts.expires_at = start + timedelta(hours=1)
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
    sms = {r.channel: r for r in result.channels}["sms"]
    assert (result.outcome, sms.state) == ("expired", "expired")
    assert "10009" in sms.reason and "nothing was sent" in sms.reason
    # No retry time said: a minute (ALL_REFUSED_WAIT), then each wait twice the one before,
    # up to MAX_REFUSED_WAIT; each try a new attempt, until the expiry. The business moment
    # passed, so no fallback channel either.
    submits = [c for c in world.calls if c[0] == "submit_sms"]
    tokens = [c[1].attempt_token for c in submits]
    assert len(tokens) == len(set(tokens)) == 7
    waits = [round(wait.total_seconds() / 60) for wait in await refused_waits(handle)]
    assert waits[:6] == [1, 2, 4, 8, 15, 15]
    assert "send_email" not in world.names()


async def test_an_email_account_refusal_defers_too(harness, queue):
    def submit(channel: str, token: str) -> SubmitOutcome:
        if number_of(token) == 1:
            raise account_refused("401")
        return SubmitOutcome("sent", "<m@herald>")

    world = World(facts(channels=["email"]), submit=submit)
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
    email = {r.channel: r for r in result.channels}["email"]
    assert (result.outcome, email.state, email.attempts) == ("sent", "sent", 2)


async def test_a_cancel_while_deferred_for_the_account_ends_it_cancelled(harness, queue):
    def submit(channel: str, token: str) -> SubmitOutcome:
        raise account_refused()

    world = World(facts(channels=["sms"]), submit=submit)
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)

        async def deferred() -> bool:
            return any(c[0] == "submit_sms" for c in world.calls)

        await until(deferred)
        await handle.execute_update(
            NotificationWorkflow.cancel_update, CancelRequest("ops", "wrong audience")
        )
        result = await handle.result()
    sms = {r.channel: r for r in result.channels}["sms"]
    assert sms.state == "cancelled" and result.outcome == "cancelled"
    assert len([c for c in world.calls if c[0] == "submit_sms"]) == 1
