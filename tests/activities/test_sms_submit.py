"""The SMS submit activity against the real carrier simulator and the real ledger:
one attempt token -> at most one provider submission, whatever fails in between."""

from __future__ import annotations

import uuid

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities.contracts import LookupInput, PollInput, SubmitInput
from activities.ledger import LedgerActivities
from activities.sms import SmsActivities
from ledger import observations
from ledger import repository as repo
from ledger.models import Attempt
from tests.activities.conftest import SID, TOKEN, prepared, submissions
from transports.twilio import TwilioSms

pytestmark = pytest.mark.ledger


@pytest.fixture
async def acts(simulator, committed, cipher):  # type: ignore[no-untyped-def]
    http = httpx.AsyncClient()
    transport = TwilioSms(
        base_url=simulator.url, account_sid=SID, auth_token=TOKEN, read_timeout=0.4, client=http
    )
    sms = SmsActivities(
        transport, committed, cipher, callback_base_url="http://127.0.0.1:9"
    )  # nobody listens: no receipts
    ledger = LedgerActivities(committed, cipher)
    yield ledger, sms
    await http.aclose()


def phone(n: int) -> str:
    return f"+4474005{n:05d}"


async def test_a_retry_after_the_provider_accepted_but_before_the_ledger_recorded_sends_once(
    acts, simulator, committed, cipher, monkeypatch
):
    ledger, sms = acts
    token = await prepared(committed, cipher, phone(11001), ledger=ledger)
    original = sms._noted_and_recorded  # the send answer's one transaction
    calls = {"n": 0}

    def crash_once(session, provider, outcome, tok, facts):  # type: ignore[no-untyped-def]
        # The process dies after the provider answered, before the ledger heard of it.
        if facts.source == "send" and calls["n"] == 0:
            calls["n"] += 1
            raise RuntimeError("worker killed")
        return original(session, provider, outcome, tok, facts)

    monkeypatch.setattr(sms, "_noted_and_recorded", crash_once)
    with pytest.raises(RuntimeError):
        await sms.submit_sms(SubmitInput(token))
    monkeypatch.setattr(sms, "_noted_and_recorded", original)
    outcome = None
    for _ in range(50):  # the activity's retries, as the RetryPolicy would run them
        try:
            outcome = await sms.submit_sms(SubmitInput(token))
            break
        except ApplicationError as err:
            assert err.type == "ReconcilePending"
            assert err.category == ApplicationErrorCategory.BENIGN  # expected, not a failure
    assert outcome is not None and outcome.remote_id and outcome.reconciled
    assert await submissions(simulator, token) == 1
    again = await sms.submit_sms(SubmitInput(token))
    assert again.remote_id == outcome.remote_id
    assert await submissions(simulator, token) == 1


async def test_an_ambiguous_timeout_is_recorded_unknown_then_reconciled_without_a_resend(
    acts, simulator, committed, cipher
):
    ledger, sms = acts
    token = await prepared(committed, cipher, "+447400000001", ledger=ledger)  # accept, then hang
    with pytest.raises(ApplicationError) as first:
        await sms.submit_sms(SubmitInput(token))
    assert first.value.type == "AmbiguousSubmission"
    with committed() as session:
        assert repo.attempt_by_token(session, token).state == "unknown"
    outcome = None
    for _ in range(100):
        try:
            outcome = await sms.submit_sms(SubmitInput(token))
            break
        except ApplicationError as err:
            assert err.type == "ReconcilePending"
            assert err.category == ApplicationErrorCategory.BENIGN  # expected, not a failure
    assert outcome is not None and outcome.reconciled and outcome.remote_id
    assert await submissions(simulator, token) == 1
    polled = await sms.poll_sms(PollInput(token))
    assert polled.state in ("submitted", "sent", "delivered")


async def test_a_permanent_rejection_fails_the_attempt_with_the_code_and_suppresses_on_stop(
    acts, committed, cipher
):
    ledger, sms = acts
    token = await prepared(committed, cipher, "+447400021610", ledger=ledger)  # replied STOP
    with pytest.raises(ApplicationError) as caught:
        await sms.submit_sms(SubmitInput(token))
    assert caught.value.type == "PermanentProviderError" and caught.value.non_retryable
    assert caught.value.details[0] == "21610"
    with committed() as session:
        attempt = repo.attempt_by_token(session, token)
        assert attempt.state == "failed" and attempt.error_code == "21610"
        assert repo.suppressions_for(session, attempt.destination_hmac, "sms")


async def test_an_unknown_4xx_refusal_fails_the_attempt_with_its_code_and_is_not_reconciled(
    acts, simulator, committed, cipher
):
    ledger, sms = acts
    to = phone(11077)
    async with httpx.AsyncClient() as http:
        scripted = await http.post(
            f"{simulator.url}/_sim/script",
            json={"to": to, "fault": "api_error:21612", "http_status": 400},
        )
        assert scripted.status_code == 200
    token = await prepared(committed, cipher, to, ledger=ledger)
    with pytest.raises(ApplicationError) as caught:
        await sms.submit_sms(SubmitInput(token))
    # (A code the table does not know, about nothing it says: 21408, a region the account
    # may not send to, is about the account and defers instead; test_sms_failover.py.)
    # Permanent (non-retryable): the workflow's fallback rules act at once; never
    # `AmbiguousSubmission`, which would leave the attempt `unknown` and reconcile it.
    assert caught.value.type == "PermanentProviderError" and caught.value.non_retryable
    assert caught.value.details[0] == "21612"
    with committed() as session:
        attempt = repo.attempt_by_token(session, token)
        assert attempt.state == "failed" and attempt.error_code == "21612"
    assert await submissions(simulator, token) == 0


async def test_a_429_is_retried_with_the_providers_retry_after_and_sends_once(
    acts, simulator, committed, cipher
):
    ledger, sms = acts
    token = await prepared(committed, cipher, "+447400000002", ledger=ledger)  # 429 twice
    delays = []
    for _ in range(5):
        try:
            outcome = await sms.submit_sms(SubmitInput(token))
            break
        except ApplicationError as err:
            assert err.type == "TransientProviderError"
            delays.append(err.next_retry_delay)
    assert outcome.remote_id
    assert len(delays) == 2 and all(d is not None and d.total_seconds() >= 1 for d in delays)
    assert await submissions(simulator, token) == 1


FAULTS = st.sampled_from(
    ["none", "accept_then_timeout", "rate_limit", "unavailable", "slow_response"]
)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(fault=FAULTS, crash_after_send=st.booleans(), extra_retries=st.integers(0, 3))
async def test_one_attempt_token_is_never_submitted_twice(
    acts, simulator, committed, cipher, fault, crash_after_send, extra_retries
):
    """Whatever happens (faults, a crash after the provider answered, retries after success),
    the simulator counts at most one created message for the token."""
    ledger, sms = acts
    number = phone(20000 + uuid.uuid4().int % 9000)
    async with httpx.AsyncClient() as http:
        await http.post(f"{simulator.url}/_sim/script", json={"to": number, "fault": fault})
    token = await prepared(committed, cipher, number, ledger=ledger)
    original = sms._record
    crashed = {"done": not crash_after_send}

    async def maybe_crash(tok, facts):  # type: ignore[no-untyped-def]
        if facts.source == "send" and facts.remote_id and not crashed["done"]:
            crashed["done"] = True
            raise RuntimeError("worker killed after the provider accepted")
        return await original(tok, facts)

    sms._record = maybe_crash  # type: ignore[method-assign]
    try:
        settled = 0
        for _ in range(120):
            try:
                await sms.submit_sms(SubmitInput(token))
                settled += 1
                if settled > extra_retries:
                    break
            except (ApplicationError, RuntimeError):
                continue
    finally:
        sms._record = original  # type: ignore[method-assign]
    assert await submissions(simulator, token) <= 1
    with committed() as session:
        attempt = repo.attempt_by_token(session, token)
        assert attempt.state != "prepared" or attempt.send_started_at is None
    _ = Attempt


async def test_the_attempt_records_the_resolved_sender_and_the_provider_gets_it_not_the_alias(
    acts, simulator, committed, cipher
):
    ledger, sms = acts
    token = await prepared(committed, cipher, phone(11101), ledger=ledger)
    outcome = await sms.submit_sms(SubmitInput(token))
    message = simulator.sim.messages[outcome.remote_id]
    assert (message.from_, message.messaging_service_sid) == ("+15005550006", None)
    with committed() as session:
        attempt = repo.attempt_by_token(session, token)
        assert (attempt.sender, attempt.sender_address) == ("herald-sms", "+15005550006")


async def test_an_alias_mapped_to_a_messaging_service_is_sent_as_messaging_service_sid(
    simulator, committed, cipher
):
    from domain.senders import SenderBook

    service = "MG" + "fedcba9876543210" * 2
    book = SenderBook.build(sms={"herald-sms": service})
    async with httpx.AsyncClient() as http:
        transport = TwilioSms(
            base_url=simulator.url, account_sid=SID, auth_token=TOKEN, client=http
        )
        sms = SmsActivities(
            transport, committed, cipher, callback_base_url="http://127.0.0.1:9", senders=book
        )
        ledger = LedgerActivities(committed, cipher, senders=book)
        token = await prepared(committed, cipher, phone(11102), ledger=ledger)
        outcome = await sms.submit_sms(SubmitInput(token))
    message = simulator.sim.messages[outcome.remote_id]
    assert (message.messaging_service_sid, message.from_) == (service, None)
    with committed() as session:
        assert repo.attempt_by_token(session, token).sender_address == service


async def test_an_attempt_prepared_before_senders_were_kept_resolves_its_alias_at_send(
    acts, simulator, committed, cipher
):
    ledger, sms = acts
    token = await prepared(committed, cipher, phone(11103), ledger=ledger)
    with committed.begin() as session:
        session.query(Attempt).filter(Attempt.token == token).update({Attempt.sender_address: None})
    outcome = await sms.submit_sms(SubmitInput(token))
    assert simulator.sim.messages[outcome.remote_id].from_ == "+15005550006"
    with committed() as session:
        assert repo.attempt_by_token(session, token).sender_address == "+15005550006"


async def test_a_lookup_of_a_message_the_provider_does_not_hold_answers_not_found(
    acts, simulator, committed, cipher
):
    # Twilio's 404 (code 20404) once read as transient: the lookup activity retried it for
    # ever and the operator's `herald settle --lookup` waited with it.
    ledger, sms = acts
    token = await prepared(committed, cipher, phone(11002), ledger=ledger)
    await sms.submit_sms(SubmitInput(token))
    with committed.begin() as session:
        attempt = repo.attempt_by_token(session, token)
        attempt.remote_id = "SM" + "0" * 32  # a message this account does not hold
    result = await sms.lookup_sms(LookupInput(token, requested_by="ops"))
    assert (result.found, result.raw_status) == (False, "not_found")
    assert result.message == "the provider holds nothing for it"
    with committed() as session:
        attempt = repo.attempt_by_token(session, token)
        seen = [(o.source, o.raw_status) for o in observations.observations_of(session, attempt.id)]
    assert ("lookup", "not_found") in seen
