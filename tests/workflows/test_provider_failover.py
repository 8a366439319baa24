"""Failover between SMS providers in the workflow (time-skipping server, activities faked
by name): each answer class moves as docs/transports.md's table says, a failover try is
the next attempt with its own token and provider, and nothing is sent twice."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.contracts import AuthorizeInput, AuthorizeResult, SubmitOutcome
from domain import keys
from tests.workflows.conftest import World, deny, facts, keep_history, permanent

pytestmark = pytest.mark.workflow

PROVIDERS = ["twilio", "telnyx"]


def routed(*, failover: bool = True, providers: list[str] | None = None):  # type: ignore[no-untyped-def]
    """The policy routes SMS to two providers (email to one)."""

    def decide(input: AuthorizeInput, now: datetime) -> AuthorizeResult:
        names = (providers or PROVIDERS) if input.channel == "sms" else ["smtp"]
        provider = input.provider or names[0]
        return AuthorizeResult(
            "allow", "allow", "allowed", "test-1", 1,
            providers=list(names), failover=failover, provider=provider,
        )  # fmt: skip

    return decide


def refused(code: str = "connect", about: str = "provider") -> ApplicationError:
    return ApplicationError(
        f"could not connect ({code})", code, about, type="ProviderRefused", non_retryable=True
    )


def number_of(token: str) -> int:
    return keys.parse_attempt_token(token).number


def sms_calls(world: World, name: str) -> list[Any]:
    return [c[1] for c in world.calls if c[0] == name and getattr(c[1], "channel", "sms") == "sms"]


async def test_a_primary_that_refuses_connections_hands_over_and_the_message_goes_once(
    harness, queue
):
    def submit(channel: str, token: str) -> SubmitOutcome:
        if channel == "sms" and number_of(token) == 1:
            raise refused()
        return SubmitOutcome("submitted", "T-1", answer="accepted")

    world = World(facts(), decide=routed(), submit=submit, poll=lambda t, n: "delivered")
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "failover_primary_refused")
    sms = {r.channel: r for r in result.channels}["sms"]
    assert sms.state == "delivered" and sms.attempts == 2
    assert "twilio refused: connect" in sms.reason and "sent through telnyx" in sms.reason
    authorizations = [a for a in sms_calls(world, "authorize") if a.channel == "sms"]
    assert [(a.attempt_number, a.provider) for a in authorizations] == [(1, None), (2, "telnyx")]
    assert "twilio refused" in authorizations[1].failover_reason
    submits = sms_calls(world, "submit_sms")
    # Both hand a provider-side refusal back: to the next provider, or to a deferral.
    assert [(number_of(s.attempt_token), s.failover) for s in submits] == [(1, True), (2, True)]
    assert "send_email" not in world.names()
    # Each provider's own queue (its rate budget), polls included.
    assert world.sms_queues[:2] == [
        ("submit_sms", f"{queue}-sms-twilio"),
        ("submit_sms", f"{queue}-sms-telnyx"),
    ]
    assert {q for name, q in world.sms_queues if name == "poll_sms"} <= {f"{queue}-sms-telnyx"}


async def test_a_lost_answer_found_by_the_lookup_is_one_message_through_one_provider(
    harness, queue
):
    def submit(channel: str, token: str) -> SubmitOutcome:
        # The primary took it, the answer was lost, the lookup found it.
        return SubmitOutcome(
            "submitted", "SM1", reconciled=True, lookup="found", answer="ambiguous"
        )

    world = World(facts(), decide=routed(), submit=submit, poll=lambda t, n: "delivered")
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "failover_lost_answer_found")
    sms = {r.channel: r for r in result.channels}["sms"]
    assert (sms.state, sms.attempts) == ("delivered", 1)
    assert len(sms_calls(world, "submit_sms")) == 1


async def test_a_lost_answer_the_lookup_says_is_not_there_lets_the_next_provider_try(
    harness, queue
):
    def submit(channel: str, token: str) -> SubmitOutcome:
        if number_of(token) == 1:
            return SubmitOutcome(
                "unknown", None, reconciled=True, lookup="not_found", answer="ambiguous",
                reason="reconciled: not found at the provider",
            )  # fmt: skip
        return SubmitOutcome("submitted", "T-2", answer="accepted")

    world = World(facts(), decide=routed(), submit=submit, poll=lambda t, n: "delivered")
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
    sms = {r.channel: r for r in result.channels}["sms"]
    assert (sms.state, sms.attempts) == ("delivered", 2)
    assert "does not hold it" in sms.reason


async def test_a_lost_answer_a_sent_only_lookup_does_not_list_never_fails_over(harness, queue):
    # Twilio's DateSent list skips a message it still holds queued: not listed is not absent.
    def submit(channel: str, token: str) -> SubmitOutcome:
        return SubmitOutcome(
            "unknown", None, reconciled=True, lookup="not_seen", answer="ambiguous",
            reason="reconciled: not listed at the provider",
        )  # fmt: skip

    world = World(facts(channels=["sms"]), decide=routed(), submit=submit)
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
    sms = {r.channel: r for r in result.channels}["sms"]
    assert (sms.state, sms.attempts) == ("unknown", 1)
    assert len(sms_calls(world, "submit_sms")) == 1


async def test_an_ambiguous_send_through_a_provider_without_lookup_ends_unknown(harness, queue):
    def submit(channel: str, token: str) -> SubmitOutcome:
        if channel == "email":
            return SubmitOutcome("sent", "<m@herald>")
        return SubmitOutcome(
            "unknown", None, lookup="unavailable", answer="ambiguous",
            reason="the provider has no lookup for a lost create",
        )  # fmt: skip

    world = World(
        facts(channels=["sms"]),
        decide=routed(providers=["telnyx", "twilio"]),
        submit=submit,
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "failover_no_lookup_unknown")
    sms = {r.channel: r for r in result.channels}["sms"]
    assert (sms.state, sms.attempts) == ("unknown", 1)
    assert len(sms_calls(world, "submit_sms")) == 1  # never moved to twilio


async def test_a_refusal_about_the_destination_never_fails_over(harness, queue):
    def submit(channel: str, token: str) -> SubmitOutcome:
        if channel == "sms":
            raise permanent("21211")
        return SubmitOutcome("sent", "<m@herald>")

    world = World(facts(), decide=routed(), submit=submit)
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
    by_channel = {r.channel: r for r in result.channels}
    assert (by_channel["sms"].state, by_channel["sms"].attempts) == ("failed", 1)
    assert len(sms_calls(world, "submit_sms")) == 1
    assert by_channel["email"].state == "sent"  # the policy's own fallback, not failover


async def test_failover_forbidden_by_the_policy_keeps_the_first_provider(harness, queue):
    def submit(channel: str, token: str) -> SubmitOutcome:
        if channel == "sms" and number_of(token) == 1:
            # An account refusal is handed back with or without the failover flag.
            raise refused("20003")
        return SubmitOutcome("submitted", "SM2", answer="accepted")

    world = World(
        facts(), decide=routed(failover=False), submit=submit, poll=lambda t, n: "delivered"
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "failover_forbidden_by_policy")
    sms = {r.channel: r for r in result.channels}["sms"]
    assert (sms.state, sms.attempts) == ("delivered", 2)
    submits = sms_calls(world, "submit_sms")
    assert [s.failover for s in submits] == [False, False]
    # Both tries through the first provider: never moved to telnyx.
    assert {q for name, q in world.sms_queues if name == "submit_sms"} == {f"{queue}-sms-twilio"}
    assert "send_email" not in world.names()


async def test_every_provider_down_defers_then_ends_expired_at_the_expiry_with_nothing_sent(
    harness, queue
):
    def submit(channel: str, token: str) -> SubmitOutcome:
        if channel == "sms":
            raise refused()
        return SubmitOutcome("sent", "<m@herald>")

    world = World(facts(channels=["sms"]), decide=routed(), submit=submit)
    start = await harness.env.get_current_time()
    world.facts.expires_at = start + timedelta(minutes=3, seconds=30)
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        await keep_history(handle, "failover_all_refused_expired")
    sms = {r.channel: r for r in result.channels}["sms"]
    assert (sms.state, result.outcome) == ("expired", "expired")  # never `failed`
    assert "every provider refused until the business expiry" in sms.reason
    assert "nothing was sent" in sms.reason
    submits = sms_calls(world, "submit_sms")
    # twilio, telnyx; a minute later both again; ... until the expiry: never the same token twice.
    tokens = [s.attempt_token for s in submits]
    assert len(tokens) == len(set(tokens)) >= 4
    waits = [c[2] for c in world.calls if c[0] == "submit_sms"]
    assert waits[2] - waits[1] >= timedelta(minutes=1)


async def test_an_opt_out_received_meanwhile_stops_the_failover_try(harness, queue):
    def decide(input: AuthorizeInput, now: datetime) -> AuthorizeResult:
        if input.attempt_number == 2:
            return deny()  # a STOP arrived through either provider: it holds for all
        return routed()(input, now)

    def submit(channel: str, token: str) -> SubmitOutcome:
        raise refused()

    world = World(facts(channels=["sms"]), decide=decide, submit=submit)
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
    sms = {r.channel: r for r in result.channels}["sms"]
    assert sms.state == "denied" and "twilio refused" in sms.reason
    assert len(sms_calls(world, "submit_sms")) == 1


async def test_every_circuit_open_waits_for_the_first_probe_time_not_a_minute(harness, queue):
    start: list[datetime] = []

    def submit(channel: str, token: str) -> SubmitOutcome:
        if number_of(token) <= 2:
            probe_at = (start[0] + timedelta(seconds=20)).isoformat()
            raise ApplicationError(
                "circuit open", "circuit_open", "provider", probe_at,
                type="ProviderRefused", non_retryable=True,
            )  # fmt: skip
        return SubmitOutcome("submitted", "SM3", answer="accepted")

    world = World(facts(channels=["sms"]), decide=routed(), submit=submit)
    start.append(await harness.env.get_current_time())
    world.facts.expires_at = start[0] + timedelta(minutes=10)
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
    sms = {r.channel: r for r in result.channels}["sms"]
    assert sms.attempts == 3  # the third try, after the probe time, was accepted
    times = [c[2] for c in world.calls if c[0] == "submit_sms"]
    assert timedelta(seconds=15) <= times[2] - times[1] < timedelta(seconds=60)


async def test_one_provider_is_a_failover_list_of_one_with_the_channels_queue_and_plain_labels(
    harness, queue
):
    # The one attempt path: a policy routing SMS to one provider, failover allowed or not,
    # defers after its refusal as a list's last provider does, but keeps what a single
    # provider always had: the channel's queue, labels without "via", no hand-back, and
    # the next try asked of the policy afresh (not a failover try).
    from temporalio.api.enums.v1 import EventType

    from tests.workflows.test_web_ui import _decode, summaries

    def submit(channel: str, token: str) -> SubmitOutcome:
        if channel == "sms" and number_of(token) == 1:
            raise refused("20003")
        return SubmitOutcome("submitted", "T-2", answer="accepted")

    world = World(
        facts(),
        decide=routed(providers=["twilio"]),
        submit=submit,
        poll=lambda t, n: "delivered",
    )
    async with harness.worker(world, queue):
        handle = await harness.start(world, queue)
        result = await handle.result()
        history = await handle.fetch_history()
    sms = {r.channel: r for r in result.channels}["sms"]
    assert (sms.state, sms.attempts) == ("delivered", 2)
    assert "refused" not in sms.reason  # no "sent through" story: nothing moved on
    authorizations = sms_calls(world, "authorize")
    assert [(a.attempt_number, a.provider, a.failover_reason) for a in authorizations] == [
        (1, None, ""),
        (2, None, ""),
    ]
    assert [s.failover for s in sms_calls(world, "submit_sms")] == [False, False]
    assert {q for _, q in world.sms_queues} == {f"{queue}-sms"}
    activities, timers = summaries(history)
    refusal = "twilio refused: 20003 could not connect (20003)"
    assert activities["submit_sms"] == ["submit sms #1", f"submit sms #2, after {refusal}"]
    assert any(t.startswith(f"{refusal}; sms again at ") for t in timers), timers
    markers = [
        _decode(e.user_metadata.summary, str)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]
    assert f"authorize sms #2, after {refusal}" in markers
