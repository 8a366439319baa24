"""Senders as the provider takes them: a number or an alphanumeric id in `From`, a
Messaging Service SID as `MessagingServiceSid`; a policy alias is refused like the real API."""

from __future__ import annotations

import httpx
import pytest

from simulators.twilio import SimulatorServer
from tests.transports.conftest import ACCOUNT_SID, AUTH_TOKEN, NORMAL_TO
from transports.errors import SmsPermanentError
from transports.sms import SmsMessage
from transports.twilio import TwilioSms

SERVICE = "MG" + "0123456789abcdef" * 2


def _message(sender: str, token: str = "order-created:o-1:sms:1") -> SmsMessage:
    return SmsMessage(token, NORMAL_TO, "Order o-1", sender, None)


@pytest.mark.parametrize("alias", ["herald-us-10dlc", "herald sms sender", "12345", "+1"])
async def test_a_from_that_is_no_sender_is_refused_like_the_real_api(
    sms: TwilioSms, simulator: SimulatorServer, alias: str
) -> None:
    with pytest.raises(SmsPermanentError) as refused:
        await sms.submit(_message(alias))
    assert refused.value.code == "21212"
    assert not simulator.sim.messages


async def test_a_messaging_service_sid_goes_as_messaging_service_sid_not_from(
    sms: TwilioSms, simulator: SimulatorServer
) -> None:
    submitted = await sms.submit(_message(SERVICE))
    message = simulator.sim.messages[submitted.remote_id]
    assert (message.messaging_service_sid, message.from_) == (SERVICE, None)
    assert submitted.raw_status == "accepted"


@pytest.mark.parametrize("sender", ["+15005550006", "Herald", "Herald-Tix"])
async def test_a_number_or_an_alphanumeric_id_goes_as_from(
    sms: TwilioSms, simulator: SimulatorServer, sender: str
) -> None:
    submitted = await sms.submit(_message(sender))
    message = simulator.sim.messages[submitted.remote_id]
    assert (message.from_, message.messaging_service_sid) == (sender, None)


@pytest.mark.parametrize(
    ("form", "code"),
    [
        ({"MessagingServiceSid": "MG123"}, 21701),
        ({"MessagingServiceSid": SERVICE.upper()}, 21701),
        ({}, 21603),
        ({"From": "herald-za"}, None),  # 9 characters with a hyphen: a valid alphanumeric id
    ],
)
async def test_the_create_endpoint_checks_the_sender_fields(
    simulator: SimulatorServer, form: dict[str, str], code: int | None
) -> None:
    async with httpx.AsyncClient(auth=(ACCOUNT_SID, AUTH_TOKEN)) as http:
        answer = await http.post(
            f"{simulator.url}/2010-04-01/Accounts/{ACCOUNT_SID}/Messages.json",
            data={"To": NORMAL_TO, "Body": "hi", **form},
        )
    if code is None:
        assert answer.status_code == 201, answer.text
    else:
        assert (answer.status_code, answer.json()["code"]) == (400, code)
