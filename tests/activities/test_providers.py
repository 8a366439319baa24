"""Providers as data at the activities: the attempt records the policy's first provider
alias for its channel and region, and its send goes through that alias's account."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from temporalio.exceptions import ApplicationError

from activities.contracts import AuthorizeInput, SubmitInput
from activities.ledger import LedgerActivities
from activities.sms import SmsActivities
from ledger import repository as repo
from ledger.models import Attempt
from ledger.timeline import rows, timeline
from simulators.twilio import SimDelays, SimulatorServer
from tests.activities import intents
from transports.twilio import TwilioSms

pytestmark = pytest.mark.ledger

SID, TOKEN = "AC" + "0" * 32, "sim-token"
DEAD = "http://127.0.0.1:9"
"""Nobody listens here: a send through this account would fail, not reach the simulator."""


@pytest.fixture(scope="module")
async def simulator() -> AsyncIterator[SimulatorServer]:
    server = SimulatorServer(account_sid=SID, auth_token=TOKEN, delays=SimDelays(sent=0.02))
    await server.start()
    yield server
    await server.stop()


def _key() -> str:
    return f"class-opening:c-9081:m-{uuid.uuid4().hex[:8]}"


async def test_the_attempt_records_the_policys_first_provider_and_the_timeline_shows_it(
    committed, cipher
):
    ledger = LedgerActivities(committed, cipher)
    key = _key()
    token = await intents.prepared(
        committed, cipher, intents.demo_request(key, "+447400512001"), "sms", ledger
    )
    with committed() as session:
        assert repo.attempt_by_token(session, token).provider == "twilio"
        doc = timeline(session, key, cipher=cipher)
    assert doc["attempts"][0]["provider"] == "twilio"
    assert any("provider=twilio" in row["detail"] for row in rows(doc))


async def test_a_send_goes_through_the_account_of_the_alias_the_attempt_recorded(
    simulator, committed, cipher
):
    ledger = LedgerActivities(committed, cipher)
    token = await intents.prepared(
        committed, cipher, intents.demo_request(_key(), "+447400512002"), "sms", ledger
    )
    with committed.begin() as session:
        session.query(Attempt).filter(Attempt.token == token).update({Attempt.provider: "eu"})
    async with httpx.AsyncClient() as http:
        dead = TwilioSms(base_url=DEAD, account_sid=SID, auth_token=TOKEN, client=http)
        live = TwilioSms(base_url=simulator.url, account_sid=SID, auth_token=TOKEN, client=http)
        sms = SmsActivities(
            dead, committed, cipher, callback_base_url=DEAD, providers={"twilio": dead, "eu": live}
        )
        outcome = await sms.submit_sms(SubmitInput(token))
    assert outcome.remote_id in simulator.sim.messages


async def test_an_alias_the_worker_has_no_account_for_is_retried_never_sent_elsewhere(
    simulator, committed, cipher
):
    ledger = LedgerActivities(committed, cipher)
    token = await intents.prepared(
        committed, cipher, intents.demo_request(_key(), "+447400512003"), "sms", ledger
    )
    with committed.begin() as session:
        session.query(Attempt).filter(Attempt.token == token).update({Attempt.provider: "gone"})
    before = len(simulator.sim.messages)
    async with httpx.AsyncClient() as http:
        live = TwilioSms(base_url=simulator.url, account_sid=SID, auth_token=TOKEN, client=http)
        sms = SmsActivities(
            live, committed, cipher, callback_base_url=DEAD, providers={"twilio": live}
        )
        with pytest.raises(ApplicationError) as refused:
            await sms.submit_sms(SubmitInput(token))
    assert refused.value.type == "ProviderNotConfigured" and not refused.value.non_retryable
    assert len(simulator.sim.messages) == before
    with committed() as session:
        # The claim is released: nothing left, so the retry that finds the account sends.
        assert repo.attempt_by_token(session, token).send_started_at is None


async def test_authorize_refuses_an_unknown_channel_before_it_records_anything(committed, cipher):
    """The former `_destination_of` branch: a third channel read the email columns."""
    ledger = LedgerActivities(committed, cipher)
    key = _key()
    intent_id = intents.record(committed, cipher, intents.demo_request(key, "+447400512004"))
    with pytest.raises(ApplicationError) as refused:
        await ledger.authorize(AuthorizeInput(intent_id, "fax", 1))
    assert refused.value.type == "UnknownChannel" and refused.value.non_retryable
    with committed() as session:
        assert timeline(session, key)["decisions"] == []
