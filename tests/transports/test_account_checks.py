"""Each adapter proves its account with the provider's cheapest authenticated read, and
the simulators answer that read as the real APIs do: the official SDKs (twilio, telnyx,
sendgrid) read the simulators' answers, and refuse them with a wrong credential."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import telnyx
from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword
from python_http_client.exceptions import UnauthorizedError
from sendgrid import SendGridAPIClient
from twilio.base.exceptions import TwilioRestException
from twilio.rest import Client as TwilioClient

from devstack import free_port
from simulators.sendgrid import SendGridSimulatorServer
from simulators.smtp import SmtpSink
from simulators.telnyx import TelnyxSimulatorServer
from simulators.twilio import SimulatorServer
from tests.transports.conftest import ACCOUNT_SID, AUTH_TOKEN, TELNYX_API_KEY
from transports.errors import AccountCheckFailed
from transports.sendgrid import SendGridEmail
from transports.smtp import SmtpEmail
from transports.telnyx import TelnyxSms
from transports.twilio import TwilioSms

SENDGRID_KEY = "SG.account-check-key"


def _twilio_sdk(url: str, token: str) -> TwilioClient:
    client = TwilioClient(ACCOUNT_SID, token)
    client.api.base_url = url  # the official client, pointed at the simulator
    return client


async def test_twilio_the_account_read_proves_the_token(simulator: SimulatorServer) -> None:
    async with TwilioSms(
        base_url=simulator.url, account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN
    ) as sms:
        assert await sms.check_account() == f"account {ACCOUNT_SID} active"
    async with TwilioSms(base_url=simulator.url, account_sid=ACCOUNT_SID, auth_token="no") as sms:
        with pytest.raises(AccountCheckFailed, match=r"credentials refused .*HTTP 401, code 20003"):
            await sms.check_account()
    sent_before = simulator.sim.stats.requests_total

    def official() -> Any:
        return _twilio_sdk(simulator.url, AUTH_TOKEN).api.v2010.accounts(ACCOUNT_SID).fetch()

    account = await asyncio.to_thread(official)
    assert (account.sid, account.status, account.type) == (ACCOUNT_SID, "active", "Full")
    assert account.date_created is not None and account.uri.endswith(f"{ACCOUNT_SID}.json")

    def refused() -> Any:
        return _twilio_sdk(simulator.url, "wrong").api.v2010.accounts(ACCOUNT_SID).fetch()

    with pytest.raises(TwilioRestException) as raised:
        await asyncio.to_thread(refused)
    assert (raised.value.status, raised.value.code) == (401, 20003)
    assert simulator.sim.stats.requests_total == sent_before  # a read, never a send


async def test_telnyx_the_balance_read_proves_the_key(
    telnyx_simulator: TelnyxSimulatorServer,
) -> None:
    async with TelnyxSms(base_url=telnyx_simulator.url, api_key=TELNYX_API_KEY) as sms:
        assert await sms.check_account() == "API key accepted"
    async with TelnyxSms(base_url=telnyx_simulator.url, api_key="wrong") as sms:
        with pytest.raises(AccountCheckFailed, match=r"credentials refused .*HTTP 401, code 10009"):
            await sms.check_account()
    official = telnyx.AsyncTelnyx(api_key=TELNYX_API_KEY, base_url=f"{telnyx_simulator.url}/v2")
    balance = await official.balance.retrieve()
    assert balance.data is not None and balance.data.record_type == "balance"
    assert balance.data.currency == "USD" and balance.data.available_credit == "100.00"
    refusing = telnyx.AsyncTelnyx(api_key="wrong", base_url=f"{telnyx_simulator.url}/v2")
    with pytest.raises(telnyx.AuthenticationError):
        await refusing.balance.retrieve()


@pytest.fixture
async def sendgrid() -> AsyncIterator[SendGridSimulatorServer]:
    server = SendGridSimulatorServer(api_key=SENDGRID_KEY)
    await server.start()
    yield server
    await server.stop()


async def test_sendgrid_the_scopes_read_proves_the_key_may_send(
    sendgrid: SendGridSimulatorServer,
) -> None:
    async with SendGridEmail(api_key=SENDGRID_KEY, base_url=sendgrid.url) as email:
        assert await email.check_account() == "API key accepted, mail.send allowed"
    async with SendGridEmail(api_key="SG.wrong", base_url=sendgrid.url) as email:
        with pytest.raises(AccountCheckFailed, match=r"credentials refused .*HTTP 401"):
            await email.check_account()

    def official(key: str) -> Any:
        return SendGridAPIClient(key, host=sendgrid.url).client.scopes.get()

    answer = await asyncio.to_thread(official, SENDGRID_KEY)
    assert answer.status_code == 200 and "mail.send" in answer.to_dict["scopes"]
    with pytest.raises(UnauthorizedError):
        await asyncio.to_thread(official, "SG.wrong")
    assert sendgrid.sim.stats()["requests_total"] == 0  # nothing was sent


class _Accounts:
    """An SMTP relay that asks for AUTH: one user, one password."""

    def __call__(self, server: SMTP, session: Any, envelope: Any, mechanism: str, auth: Any) -> Any:
        ok = isinstance(auth, LoginPassword) and (auth.login, auth.password) == (b"herald", b"pw")
        # handled=False: aiosmtpd answers the failure itself (535); True leaves it unsaid.
        return AuthResult(success=ok, handled=False)


async def test_smtp_the_session_stops_after_auth(tmp_path: Any) -> None:
    async with SmtpSink() as sink:
        plain = SmtpEmail(host="127.0.0.1", port=sink.port)
        assert await plain.check_account() == f"127.0.0.1:{sink.port} EHLO ok"
        assert sink.messages == []
    # A relay that offers AUTH (without TLS, for the test): the right login and a wrong one.
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(object(), authenticator=_Accounts(), auth_require_tls=False),
        "127.0.0.1",
        0,
    )
    port = server.sockets[0].getsockname()[1]
    try:
        good = SmtpEmail(host="127.0.0.1", port=port, username="herald", password="pw")
        assert await good.check_account() == f"127.0.0.1:{port} EHLO, AUTH ok"
        bad = SmtpEmail(host="127.0.0.1", port=port, username="herald", password="no")
        with pytest.raises(AccountCheckFailed, match=r"refused the login \(SMTP 535\)"):
            await bad.check_account()
    finally:
        server.close()
        await server.wait_closed()
    closed = SmtpEmail(host="127.0.0.1", port=free_port())
    with pytest.raises(AccountCheckFailed, match="cannot reach 127.0.0.1:"):
        await closed.check_account(timeout=2)
