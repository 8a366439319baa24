"""Set-up the SMS activity tests share: the Twilio simulator they send to (a module's own
``simulator`` fixture overrides it, as the Telnyx tests' does), an SMS attempt ready to
send, and what a simulator created for it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from activities.ledger import LedgerActivities
from simulators.server import CarrierServer
from simulators.twilio import SimDelays, SimulatorServer
from tests.activities import intents

SID, TOKEN = "AC" + "0" * 32, "sim-token"
FAST = SimDelays(
    sent=0.02, delivered=0.05, delayed_receipt=0.3, slow_response=0.2, hang=30.0, retry_after=1
)
"""Short carrier timings; a withheld answer (30 s) outlasts any read timeout here."""


@pytest.fixture(scope="module")
async def simulator() -> AsyncIterator[SimulatorServer]:
    server = SimulatorServer(account_sid=SID, auth_token=TOKEN, delays=FAST)
    await server.start()
    yield server
    await server.stop()


async def prepared(  # type: ignore[no-untyped-def]
    committed, cipher, phone: str, *, ledger: LedgerActivities | None = None
) -> str:
    """An SMS attempt to `phone` on a new intent, authorized (through `ledger`, a plain one
    by default) and ready to send; its token."""
    key = f"class-opening:c-9081:m-{uuid.uuid4().hex[:8]}"
    return await intents.prepared(
        committed, cipher, intents.demo_request(key, phone), "sms", ledger
    )


async def submissions(server: CarrierServer, token: str) -> int:
    """Messages the simulator (Twilio's or Telnyx's) created for one attempt token."""
    async with httpx.AsyncClient() as http:
        stats = (await http.get(f"{server.url}/_sim/stats")).json()
    return int(stats["by_token"].get(token, 0))
