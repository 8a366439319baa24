"""The submit activity's side of failover: with another provider able to take over, a
definitive provider-side refusal comes back at once (ProviderRefused), and a refusal about
the account or an open circuit always does (the workflow fails over or defers); a refusal
about the destination never does; and an open circuit refuses without a request leaving."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import delete
from temporalio.exceptions import ApplicationError

from activities.contracts import SubmitInput
from activities.ledger import LedgerActivities
from activities.sms import SmsActivities
from domain.circuit import BreakerSettings, CircuitState
from ledger import circuits
from ledger import repository as repo
from ledger.models import ProviderCircuit
from simulators.twilio import Fault, SimulatorServer
from tests.activities import intents
from tests.activities.conftest import SID, TOKEN, prepared
from transports.twilio import TwilioSms

pytestmark = pytest.mark.ledger


def dead_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


def activities(simulator, committed, cipher, http, *, twilio_url=None, breaker=None):  # type: ignore[no-untyped-def]
    """Activities whose default provider (attempts prepared by the default policy go to
    `twilio`) is the Twilio simulator, or a dead address."""
    twilio = TwilioSms(
        base_url=twilio_url or simulator.url, account_sid=SID, auth_token=TOKEN, client=http
    )
    return SmsActivities(
        twilio,
        committed,
        cipher,
        callback_base_url="http://127.0.0.1:9",
        breaker=breaker,
    )


def random_phone() -> str:
    return f"+4474007{uuid.uuid4().int % 100_000:05d}"


async def requests_for(simulator: SimulatorServer, token: str) -> int:
    async with httpx.AsyncClient() as http:
        stats = (await http.get(f"{simulator.url}/_sim/stats")).json()
    return int(stats["requests_by_token"].get(token, 0))


@pytest.mark.parametrize("failover", [True, False])
async def test_a_credentials_refusal_is_handed_back_with_or_without_another_provider(
    simulator, committed, cipher, http, failover
):
    # About the account, never the message: the workflow fails over or defers; a refusal
    # answered as PermanentProviderError would end the channel `failed` (#49).
    sms = activities(simulator, committed, cipher, http)
    phone = f"+4474007{uuid.uuid4().int % 100_000:05d}"
    simulator.sim.script(phone, Fault.parse("api_error:20003", http_status=401))
    token = await prepared(committed, cipher, phone)
    with pytest.raises(ApplicationError) as caught:
        await sms.submit_sms(SubmitInput(token, failover=failover))
    assert caught.value.type == "ProviderRefused" and caught.value.non_retryable
    # No breaker here: no time said (the workflow waits its own minute).
    assert list(caught.value.details) == ["20003", "provider", ""]
    with committed() as session:
        attempt = repo.attempt_by_token(session, token)
        decision = latest_decision(session, attempt.intent_id)
    assert (attempt.state, attempt.error_code) == ("failed", "20003")
    # The intent reads `deferred` while it waits, not `failed`: the deferral is data.
    assert (decision.outcome, decision.rule) == ("defer", "provider.refused")
    assert "20003" in decision.reason


def latest_decision(session, intent_id: str):  # type: ignore[no-untyped-def]
    from sqlalchemy import select

    from ledger.models import PolicyDecision

    return session.scalars(
        select(PolicyDecision)
        .where(PolicyDecision.intent_id == intent_id)
        .order_by(PolicyDecision.id.desc())
        .limit(1)
    ).one()


async def test_an_account_refusal_counts_toward_the_circuit_and_says_when_to_come_back(
    simulator, committed, cipher, http
):
    breaker = BreakerSettings(failure_threshold=2, cool_down=timedelta(seconds=40))
    sms = activities(simulator, committed, cipher, http, breaker=breaker)
    with committed.begin() as session:  # the shared ledger: start from a closed circuit
        session.execute(delete(ProviderCircuit).where(ProviderCircuit.provider == "twilio"))
    said = []
    try:
        for _ in range(2):
            phone = random_phone()
            simulator.sim.script(phone, Fault.parse("api_error:20003", http_status=401))
            before = datetime.now(UTC)
            with pytest.raises(ApplicationError) as caught:
                await sms.submit_sms(SubmitInput(await prepared(committed, cipher, phone)))
            assert caught.value.type == "ProviderRefused"
            said.append(datetime.fromisoformat(caught.value.details[2]) - before)
        with committed() as session:
            state = circuits.current(session, "twilio")
        # Still closed after the first: one cool-down from then; the second opened it: the
        # half-open time, again one cool-down away.
        assert state is not None and state.state == CircuitState.OPEN
        assert all(timedelta(seconds=39) < wait < timedelta(seconds=45) for wait in said)
    finally:
        with committed.begin() as session:
            session.execute(delete(ProviderCircuit).where(ProviderCircuit.provider == "twilio"))


async def test_a_destination_refusal_is_never_handed_over(simulator, committed, cipher, http):
    sms = activities(simulator, committed, cipher, http)
    token = await prepared(committed, cipher, "+447400021211")  # invalid To
    with pytest.raises(ApplicationError) as caught:
        await sms.submit_sms(SubmitInput(token, failover=True))
    assert caught.value.type == "PermanentProviderError"
    assert list(caught.value.details) == ["21211", "destination"]


@pytest.mark.parametrize(
    ("failover", "expected"), [(True, "ProviderRefused"), (False, "TransientProviderError")]
)
async def test_a_refused_connection_is_handed_over_or_retried_as_before(
    simulator, committed, cipher, http, failover, expected
):
    sms = activities(simulator, committed, cipher, http, twilio_url=dead_url())
    token = await prepared(committed, cipher, random_phone())
    with pytest.raises(ApplicationError) as caught:
        await sms.submit_sms(SubmitInput(token, failover=failover))
    assert caught.value.type == expected
    assert caught.value.details[0] == "connect"
    with committed() as session:
        state = repo.attempt_by_token(session, token).state
    assert state == ("failed" if failover else "prepared")


async def test_an_open_circuit_refuses_at_once_without_a_request_leaving(
    simulator, committed, cipher, http
):
    breaker = BreakerSettings(failure_threshold=2, cool_down=timedelta(minutes=5))
    down = activities(simulator, committed, cipher, http, twilio_url=dead_url(), breaker=breaker)
    provider = "twilio"
    with committed.begin() as session:  # the shared ledger: start from a closed circuit
        session.execute(delete(ProviderCircuit).where(ProviderCircuit.provider == provider))
    for _ in range(2):
        with pytest.raises(ApplicationError):
            await down.submit_sms(SubmitInput(await prepared(committed, cipher, random_phone())))
    with committed() as session:
        state = circuits.current(session, provider)
    assert state is not None and state.state == CircuitState.OPEN
    # The same provider alias, now pointing at a live simulator: the circuit still refuses.
    live = activities(simulator, committed, cipher, http, breaker=breaker)
    for failover in (False, True):
        # Handed back at once either way, with the half-open time: the workflow defers (a
        # new attempt then) or fails over; never retried in place until a window closes.
        token = await prepared(committed, cipher, random_phone())
        with pytest.raises(ApplicationError) as handed:
            await live.submit_sms(SubmitInput(token, failover=failover))
        assert handed.value.type == "ProviderRefused"
        assert handed.value.details[0] == "circuit_open"
        probe_at = datetime.fromisoformat(handed.value.details[2])
        assert probe_at - datetime.now(UTC) > timedelta(minutes=4)
        assert await requests_for(simulator, token) == 0
    with committed.begin() as session:  # leave no open circuit for other tests
        session.execute(delete(ProviderCircuit).where(ProviderCircuit.provider == provider))


async def test_a_failover_try_is_authorized_again_with_its_provider_and_the_reason(
    committed, cipher
):
    import policies
    from activities.contracts import AuthorizeInput
    from ledger.models import Attempt, PolicyDecision
    from ledger.templates import activate_policy, seed_policy

    document = (
        policies.load_packaged("default")
        .replace('version = "2026-12-07.1"', f'version = "test-failover-{uuid.uuid4().hex[:8]}"')
        .replace("[rules]\n", '[providers]\nsms = ["twilio", "telnyx"]\n\n[rules]\n', 1)
    )
    with committed.begin() as session:
        before = repo.active_policy(session).version
        seed_policy(session, document, name="test-failover", activate=True)
    try:
        ledger = LedgerActivities(committed, cipher)
        key = f"class-opening:c-9081:m-{uuid.uuid4().hex[:8]}"
        intent_id = intents.record(
            committed, cipher, intents.demo_request(key, "+447400712001"), consent="sms"
        )
        first = await ledger.authorize(AuthorizeInput(intent_id, "sms", 1))
        assert (first.outcome, first.providers, first.failover, first.provider) == (
            "allow", ["twilio", "telnyx"], True, "twilio"
        )  # fmt: skip
        second = await ledger.authorize(
            AuthorizeInput(
                intent_id, "sms", 2, provider="telnyx", failover_reason="twilio refused: 20003"
            )
        )
        assert second.outcome == "allow" and second.provider == "telnyx"
        assert second.attempt_token is not None and second.attempt_token.endswith(":sms:2")
        with committed() as session:
            attempt = session.query(Attempt).filter_by(token=second.attempt_token).one()
            decision = session.get(PolicyDecision, second.decision_id)
        assert attempt.provider == "telnyx"
        assert decision is not None
        assert "failover to telnyx: twilio refused: 20003" in decision.reason
        assert decision.inputs["providers"] == ["twilio", "telnyx"]
        assert decision.inputs["failover"] is True
        with pytest.raises(ApplicationError) as caught:
            await ledger.authorize(AuthorizeInput(intent_id, "sms", 3, provider="carrier-pigeon"))
        assert caught.value.type == "NotFound"
    finally:
        with committed.begin() as session:
            activate_policy(session, before)
