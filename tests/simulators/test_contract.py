"""The simulator's own contract: signed callbacks, inbound SMS, stats, scripts, shutdown."""

from __future__ import annotations

import asyncio

import httpx
import phonenumbers
import pytest
from twilio.request_validator import RequestValidator

from simulators.twilio import FAULT_NUMBERS, SimDelays, SimulatorServer
from tests.transports.conftest import ACCOUNT_SID, AUTH_TOKEN, NORMAL_TO, SENDER, CallbackReceiver
from transports.errors import SmsAmbiguousError
from transports.sms import SmsMessage
from transports.twilio import TwilioSms

VALIDATOR = RequestValidator(AUTH_TOKEN)


async def delivered_receipt(
    sms: TwilioSms, receiver: CallbackReceiver, token: str = "order-created:o-77:sms:1"
):
    url = f"{receiver.server.url}/receipts?token={token}&tenant=acme"
    sid = (await sms.submit(SmsMessage(token, NORMAL_TO, "Order o-77", SENDER, url))).remote_id
    await receiver.wait_until(
        lambda: any(r.params["MessageStatus"] == "delivered" for r in receiver.for_sid(sid))
    )
    return next(r for r in receiver.for_sid(sid) if r.params["MessageStatus"] == "delivered")


async def test_a_callback_signature_verifies_with_twilios_request_validator(
    sms: TwilioSms, receiver: CallbackReceiver
) -> None:
    receipt = await delivered_receipt(sms, receiver)
    assert "token=order-created" in receipt.url and "tenant=acme" in receipt.url
    assert VALIDATOR.validate(receipt.url, receipt.params, receipt.headers["x-twilio-signature"])
    assert set(receipt.params) >= {
        "MessageSid",
        "SmsSid",
        "MessageStatus",
        "SmsStatus",
        "To",
        "From",
        "AccountSid",
        "ApiVersion",
    }
    assert receipt.params["AccountSid"] == ACCOUNT_SID
    assert receipt.headers["content-type"].startswith("application/x-www-form-urlencoded")
    assert receipt.headers["i-twilio-idempotency-token"]


async def test_a_tampered_parameter_fails_signature_validation(
    sms: TwilioSms, receiver: CallbackReceiver
) -> None:
    receipt = await delivered_receipt(sms, receiver)
    tampered = {**receipt.params, "MessageStatus": "undelivered"}
    assert not VALIDATOR.validate(receipt.url, tampered, receipt.headers["x-twilio-signature"])
    added = {**receipt.params, "ErrorCode": "30003"}
    assert not VALIDATOR.validate(receipt.url, added, receipt.headers["x-twilio-signature"])


async def test_a_wrong_url_fails_signature_validation(
    sms: TwilioSms, receiver: CallbackReceiver
) -> None:
    receipt = await delivered_receipt(sms, receiver)
    signature = receipt.headers["x-twilio-signature"]
    other_token = receipt.url.replace("order-created:o-77:sms:1", "order-created:o-78:sms:1")
    assert not VALIDATOR.validate(other_token, receipt.params, signature)
    assert not VALIDATOR.validate(receipt.url.replace("/receipts", "/r"), receipt.params, signature)
    assert not VALIDATOR.validate(receipt.url.split("?")[0], receipt.params, signature)


async def test_a_missing_signature_or_another_auth_token_fails_validation(
    sms: TwilioSms, receiver: CallbackReceiver
) -> None:
    receipt = await delivered_receipt(sms, receiver)
    assert not VALIDATOR.validate(receipt.url, receipt.params, receipt.headers.get("x-missing", ""))
    other = RequestValidator("another-token")
    assert not other.validate(receipt.url, receipt.params, receipt.headers["x-twilio-signature"])


async def test_an_inbound_stop_is_posted_signed_to_the_inbound_url(
    simulator: SimulatorServer, receiver: CallbackReceiver
) -> None:
    async with httpx.AsyncClient() as client:
        answer = await client.post(
            f"{simulator.url}/_sim/inbound",
            json={"from": "+447400123456", "to": SENDER, "body": "STOP"},
        )
    assert answer.status_code == 200 and answer.json()["status_code"] == 204
    (inbound,) = [r for r in receiver.requests if r.path == "/inbound"]
    assert inbound.params["Body"] == "STOP" and inbound.params["From"] == "+447400123456"
    assert inbound.params["To"] == SENDER and inbound.params["AccountSid"] == ACCOUNT_SID
    assert inbound.params["MessageSid"] == answer.json()["sid"]
    assert VALIDATOR.validate(inbound.url, inbound.params, inbound.headers["x-twilio-signature"])


async def test_the_inbound_url_can_be_set_at_run_time(
    simulator: SimulatorServer, receiver: CallbackReceiver
) -> None:
    async with httpx.AsyncClient() as client:
        set_url = f"{receiver.server.url}/inbound?via=script"
        answer = await client.post(f"{simulator.url}/_sim/script", json={"inbound_url": set_url})
        assert answer.json()["inbound_url"] == set_url
        await client.post(
            f"{simulator.url}/_sim/inbound", json={"from": "+447400123456", "body": "START"}
        )
        await client.post(
            f"{simulator.url}/_sim/script", json={"inbound_url": f"{receiver.server.url}/inbound"}
        )
    (inbound,) = [r for r in receiver.requests if r.path == "/inbound"]
    assert inbound.url.endswith("?via=script") and inbound.params["Body"] == "START"


async def test_an_unknown_fault_is_refused_by_the_script_endpoint(
    simulator: SimulatorServer,
) -> None:
    async with httpx.AsyncClient() as client:
        bad = await client.post(f"{simulator.url}/_sim/script", json={"to": "+1", "fault": "x"})
        no_code = await client.post(
            f"{simulator.url}/_sim/script", json={"to": "+1", "fault": "undelivered"}
        )
    assert bad.status_code == 400 and no_code.status_code == 400


async def test_a_script_can_clear_a_built_in_fault_number(
    sms: TwilioSms, simulator: SimulatorServer, receiver: CallbackReceiver
) -> None:
    async with httpx.AsyncClient() as client:
        await client.post(
            f"{simulator.url}/_sim/script", json={"to": "+447400021211", "fault": "none"}
        )
    token = "class-opening:c-1:m-1:sms:1"
    url = f"{receiver.server.url}/receipts?token={token}"
    submitted = await sms.submit(SmsMessage(token, "+447400021211", "hi", SENDER, url))
    assert submitted.raw_status == "queued"


async def test_stats_count_one_submission_per_token_in_the_normal_path(
    sms: TwilioSms, simulator: SimulatorServer, receiver: CallbackReceiver
) -> None:
    tokens = [f"class-opening:c-9081:m-{n}:sms:1" for n in range(3)]
    for token in tokens:
        url = f"{receiver.server.url}/receipts?token={token}"
        await sms.submit(SmsMessage(token, NORMAL_TO, "Seat open", SENDER, url))
    async with httpx.AsyncClient() as client:
        counts = (await client.get(f"{simulator.url}/_sim/stats")).json()
        await client.post(f"{simulator.url}/_sim/reset")
        after_reset = (await client.get(f"{simulator.url}/_sim/stats")).json()
    assert counts["by_token"] == {t: 1 for t in tokens}
    assert counts["total"] == 3 and counts["by_to"] == {NORMAL_TO: 3}
    assert after_reset["total"] == 0 and after_reset["by_token"] == {}


def test_every_fault_number_is_a_valid_mobile_number() -> None:
    for number in FAULT_NUMBERS:
        parsed = phonenumbers.parse(number)
        assert phonenumbers.is_valid_number(parsed), number
        assert phonenumbers.number_type(parsed) == phonenumbers.PhoneNumberType.MOBILE, number
        assert phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164) == number


async def test_a_simulator_on_port_zero_reports_its_port_and_stops_despite_a_withheld_response(
    receiver: CallbackReceiver,
) -> None:
    server = SimulatorServer(
        account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN, delays=SimDelays(hang=60.0)
    )
    await server.start()
    assert server.port != 0 and server.url.endswith(f":{server.port}")
    async with TwilioSms(
        base_url=server.url, account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN, read_timeout=0.3
    ) as sms:
        with pytest.raises(SmsAmbiguousError):
            await sms.submit(SmsMessage("t:1", "+447400000001", "hi", SENDER, None))
    assert server.sim.stats.total == 1
    loop = asyncio.get_running_loop()
    began = loop.time()
    await server.stop()
    assert loop.time() - began < 5, "stop() must cut the 60 s withheld response short"
