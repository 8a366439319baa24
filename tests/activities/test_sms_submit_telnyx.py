"""The SMS submit activity with Telnyx as the provider, against the Telnyx simulator and
the real ledger: an ambiguous create cannot be placed (Telnyx has no lookup by
destination), so the attempt ends unknown and is never sent again."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from temporalio.exceptions import ApplicationError

from activities.contracts import SubmitInput
from activities.ledger import LedgerActivities
from activities.sms import NO_LOOKUP_REASON, SmsActivities
from ledger import repository as repo
from simulators.carrier import Fault
from simulators.telnyx import TelnyxSimulatorServer
from tests.activities.conftest import FAST, prepared, submissions
from transports.telnyx import TelnyxSms

pytestmark = pytest.mark.ledger

KEY = "telnyx-test-key"


@pytest.fixture(scope="module")
async def simulator() -> AsyncIterator[TelnyxSimulatorServer]:
    server = TelnyxSimulatorServer(api_key=KEY, delays=FAST)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def acts(simulator, committed, cipher):  # type: ignore[no-untyped-def]
    http = httpx.AsyncClient()
    transport = TelnyxSms(base_url=simulator.url, api_key=KEY, read_timeout=0.4, client=http)
    sms = SmsActivities(transport, committed, cipher, callback_base_url="http://127.0.0.1:9")
    yield LedgerActivities(committed, cipher), sms
    await http.aclose()


async def test_a_telnyx_send_is_submitted_with_its_callback_on_the_telnyx_route(
    acts, simulator, committed, cipher
):
    ledger, sms = acts
    token = await prepared(committed, cipher, "+447400612001", ledger=ledger)
    outcome = await sms.submit_sms(SubmitInput(token))
    assert outcome.state == "submitted" and outcome.remote_id
    (held,) = [m for m in simulator.sim.messages.values() if m.token == token]
    assert held.webhook_url is not None and "/v1/webhooks/telnyx?token=" in held.webhook_url
    assert await submissions(simulator, token) == 1


async def test_an_ambiguous_telnyx_send_ends_unknown_and_is_never_sent_again(
    acts, simulator, committed, cipher
):
    ledger, sms = acts
    token = await prepared(committed, cipher, "+447400000001", ledger=ledger)  # accept, then hang
    with pytest.raises(ApplicationError) as first:
        await sms.submit_sms(SubmitInput(token))
    assert first.value.type == "AmbiguousSubmission"
    for _ in range(3):  # the RetryPolicy's next tries: no lookup, no resend
        outcome = await sms.submit_sms(SubmitInput(token))
        assert (outcome.state, outcome.remote_id, outcome.reason) == (
            "unknown",
            None,
            NO_LOOKUP_REASON,
        )
        assert not outcome.reconciled  # nothing said "not there": no resend may follow
    assert await submissions(simulator, token) == 1
    with committed() as session:
        assert repo.attempt_by_token(session, token).state == "unknown"


async def test_a_telnyx_stop_refusal_fails_the_attempt_and_suppresses_for_every_provider(
    acts, simulator, committed, cipher
):
    ledger, sms = acts
    # A fresh number each run (the ledger keeps suppressions across runs).
    phone = f"+4474006{uuid.uuid4().int % 100_000:05d}"
    simulator.sim.script(phone, Fault.parse("api_error:40300"))
    token = await prepared(committed, cipher, phone, ledger=ledger)
    with pytest.raises(ApplicationError) as caught:
        await sms.submit_sms(SubmitInput(token))
    assert caught.value.type == "PermanentProviderError" and caught.value.non_retryable
    assert list(caught.value.details) == ["40300", "destination"]
    with committed() as session:
        attempt = repo.attempt_by_token(session, token)
        assert attempt.state == "failed" and attempt.error_code == "40300"
        (row,) = repo.suppressions_for(session, attempt.destination_hmac, "sms")
    assert row.source == "provider:40300"
