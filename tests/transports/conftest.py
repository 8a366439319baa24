"""Fixtures: the carrier simulator, a callback receiver and an SMTP sink on free ports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from urllib.parse import parse_qsl

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from simulators.server import LoopbackServer
from simulators.telnyx import TelnyxSimulatorServer
from simulators.twilio import SimDelays, SimulatorServer
from transports.telnyx import TelnyxSms
from transports.twilio import TwilioSms

ACCOUNT_SID = "AC" + "0" * 31 + "1"
AUTH_TOKEN = "test-auth-token-0123456789abcdef"
TELNYX_API_KEY = "KEY0123456789ABCDEF_test"
SENDER = "+15005550006"
NORMAL_TO = "+447400123456"

# Short carrier timings so the whole tier stays fast; every wait below is on a condition.
FAST = SimDelays(
    sent=0.05, delivered=0.1, delayed_receipt=0.8, slow_response=0.3, hang=30.0, retry_after=1
)


@dataclass(frozen=True)
class Received:
    """One request the callback receiver got, as it arrived on the wire."""

    path: str
    url: str
    params: dict[str, str]
    headers: dict[str, str]
    at: float
    body: bytes = b""
    """The raw body (a JSON webhook is signed over exactly these bytes)."""


class CallbackReceiver:
    """A tiny app standing in for Herald's webhook endpoints; records every POST."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self._changed = asyncio.Condition()

        async def record(request: Request) -> PlainTextResponse:
            raw = await request.body()
            params = dict(parse_qsl(raw.decode(), keep_blank_values=True))
            self.requests.append(
                Received(
                    path=request.url.path,
                    url=str(request.url),
                    params=params,
                    headers={k.lower(): v for k, v in request.headers.items()},
                    at=asyncio.get_running_loop().time(),
                    body=raw,
                )
            )
            async with self._changed:
                self._changed.notify_all()
            return PlainTextResponse("", status_code=204)

        app = Starlette(
            routes=[
                Route("/receipts", record, methods=["POST"]),
                Route("/inbound", record, methods=["POST"]),
                Route("/telnyx", record, methods=["POST"]),
            ]
        )
        self.server = LoopbackServer(app)

    def for_sid(self, sid: str) -> list[Received]:
        return [r for r in self.requests if r.params.get("MessageSid") == sid]

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        async def reached() -> None:
            async with self._changed:
                await self._changed.wait_for(predicate)

        await asyncio.wait_for(reached(), timeout=timeout)


@pytest.fixture(scope="session")
async def receiver() -> AsyncIterator[CallbackReceiver]:
    rec = CallbackReceiver()
    await rec.server.start()
    yield rec
    await rec.server.stop()


@pytest.fixture(scope="session")
async def simulator(receiver: CallbackReceiver) -> AsyncIterator[SimulatorServer]:
    server = SimulatorServer(
        account_sid=ACCOUNT_SID,
        auth_token=AUTH_TOKEN,
        delays=FAST,
        inbound_url=f"{receiver.server.url}/inbound",
    )
    await server.start()
    yield server
    await server.stop()


@pytest.fixture(scope="session")
async def telnyx_simulator(receiver: CallbackReceiver) -> AsyncIterator[TelnyxSimulatorServer]:
    server = TelnyxSimulatorServer(
        api_key=TELNYX_API_KEY, delays=FAST, inbound_url=f"{receiver.server.url}/inbound"
    )
    await server.start()
    yield server
    await server.stop()


@pytest.fixture(autouse=True)
def _clean_simulator(request: pytest.FixtureRequest) -> None:
    # Only for tests that use a simulator: forget messages, counts and scripts.
    for name in ("simulator", "telnyx_simulator"):
        if name in request.fixturenames:
            request.getfixturevalue(name).sim.reset()
            request.getfixturevalue("receiver").requests.clear()


@pytest.fixture
async def sms(simulator: SimulatorServer) -> AsyncIterator[TwilioSms]:
    transport = TwilioSms(
        base_url=simulator.url,
        account_sid=ACCOUNT_SID,
        auth_token=AUTH_TOKEN,
        connect_timeout=1.0,
        read_timeout=2.0,
    )
    yield transport
    await transport.aclose()


@pytest.fixture
async def telnyx(telnyx_simulator: TelnyxSimulatorServer) -> AsyncIterator[TelnyxSms]:
    transport = TelnyxSms(
        base_url=telnyx_simulator.url,
        api_key=TELNYX_API_KEY,
        connect_timeout=1.0,
        read_timeout=2.0,
    )
    yield transport
    await transport.aclose()
