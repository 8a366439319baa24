"""The fault tier for a refusal about the provider account (#49 item 1), end to end: a
stack of its own (real Temporal dev server, Postgres, the worker process, the carrier
simulator) with one SMS provider and a short circuit cool-down.

The carrier is told the account's auth token was rotated (`POST /_sim/credential`), so
the worker's token is refused (HTTP 401, Twilio 20003) as a wrong setting would be. Seven
intents are recorded a second apart: the first refusals open the circuit, the later ones
meet it open, and every one defers (the intent reads `deferred`, never `failed`). The
carrier is then given the worker's token again (the operator's fix), and all seven are
delivered, each by exactly one message the simulator created."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import pytest_asyncio

from devstack.stack import DevStack
from domain.circuit import CircuitState
from ledger import circuits
from tests.conftest import key_id, stack_settings, until
from tests.faults.conftest import notify_with_consent
from workflows.notification import NotificationWorkflow

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

COOL_DOWN_SECONDS = 3.0
INTENTS = 7


@pytest_asyncio.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DevStack]:
    cfg = stack_settings(
        tmp_path_factory.mktemp("account"),
        # The default threshold (5 in 60 s); a short cool-down keeps the story in seconds.
        circuit_cool_down_seconds=COOL_DOWN_SECONDS,
    )
    dev = DevStack(cfg, temporal_ui=False)
    await dev.start()
    yield dev
    await dev.stop()
    if dev.postgres is not None:
        await asyncio.to_thread(dev.postgres.destroy)


def phone(n: int) -> str:
    return f"+44740088{n:04d}"


async def notify(dev: DevStack, n: int) -> tuple[str, str]:
    assert dev.client is not None
    key = f"account:a-{key_id()}"
    ref = await notify_with_consent(dev.client, key, phone(n), n=n)
    return key, ref.workflow_id


async def accept_token(dev: DevStack, secret: str) -> None:
    assert dev.simulator is not None
    async with httpx.AsyncClient() as http:
        answer = await http.post(f"{dev.simulator.url}/_sim/credential", json={"secret": secret})
        answer.raise_for_status()


async def created(dev: DevStack, token: str) -> int:
    assert dev.simulator is not None
    async with httpx.AsyncClient() as http:
        stats = (await http.get(f"{dev.simulator.url}/_sim/stats")).json()
    return int(stats["by_token"].get(token, 0))


def timeline(dev: DevStack, key: str) -> dict[str, Any]:
    assert dev.client is not None
    return dev.client.timeline(key)


async def test_a_refused_credential_defers_seven_intents_and_each_goes_once_when_fixed(stack):
    dev = stack
    assert dev.client is not None
    good = dev.cfg.sms_auth_token.get_secret_value()
    # One message first: the worker is up and polling before the credential goes bad.
    _, warm = await notify(dev, 0)
    handle = dev.client.temporal.get_workflow_handle_for(NotificationWorkflow.run, warm)
    assert (await asyncio.wait_for(handle.result(), 120)).outcome == "delivered"

    await accept_token(dev, "rotated-at-the-carrier")
    posted: dict[str, datetime] = {}
    workflows: dict[str, str] = {}
    try:
        for n in range(1, INTENTS + 1):
            key, workflow_id = await notify(dev, n)
            posted[key], workflows[key] = datetime.now(UTC), workflow_id
            if n < INTENTS:
                await asyncio.sleep(1.0)  # the story's pacing: a second apart, not a wait

        # Every intent was refused at least once and waits, deferred with the reason and
        # a next-eligible time; none reads `failed`; the refusals opened the circuit.
        async def all_deferred() -> bool:
            docs = [timeline(dev, key) for key in posted]
            return all(
                d["intent"]["state"] == "deferred"
                and any(x["rule"] == "provider.refused" for x in d["decisions"])
                for d in docs
            )

        await until(all_deferred, within=60, what="all seven intents deferred")
        with dev.client.sessions() as session:
            breaker = circuits.current(session, "twilio")
        assert breaker is not None and breaker.state != CircuitState.CLOSED
        refused = {key: timeline(dev, key) for key in posted}
        attempts = [a for d in refused.values() for a in d["attempts"]]
        # A probe the half-open circuit lets through may be in flight as we read (prepared,
        # no answer yet); every attempt that has ended was refused, none went out.
        ended = [a for a in attempts if a["state"] != "prepared"]
        assert {a["state"] for a in ended} == {"failed"}, ended
        codes = {a["error_code"] for a in ended}
        assert codes <= {"20003", "circuit_open"} and "20003" in codes
    finally:
        # The operator's fix: the carrier and the worker agree on the token again.
        await accept_token(dev, good)
    fixed_at = datetime.now(UTC)

    results = {
        key: await asyncio.wait_for(
            dev.client.temporal.get_workflow_handle_for(
                NotificationWorkflow.run, workflow_id
            ).result(),
            120,
        )
        for key, workflow_id in workflows.items()
    }
    figures = []
    for n, key in enumerate(posted, start=1):
        doc = timeline(dev, key)
        attempts = doc["attempts"]
        submissions = [await created(dev, a["token"]) for a in attempts]
        delivered = [a for a in attempts if a["state"] == "delivered"]
        # Exactly one accepted submission per intent, delivered; nothing `failed` but the
        # refused tries, each its own attempt with the provider's code.
        assert (results[key].outcome, doc["intent"]["state"]) == ("delivered", "delivered")
        assert sum(submissions) == 1 and len(delivered) == 1, (attempts, submissions)
        assert all(a["state"] == "failed" for a in attempts if a is not delivered[0])
        at = datetime.fromisoformat(delivered[0]["terminal_at"])
        figures.append(
            f"intent {n}: {doc['intent']['state']}, attempts {len(attempts)} "
            f"({', '.join(a['error_code'] or a['state'] for a in attempts)}), "
            f"simulator submissions {sum(submissions)}, post->delivered "
            f"{(at - posted[key]).total_seconds():.1f} s, fix->delivered "
            f"{(at - fixed_at).total_seconds():.1f} s"
        )
    print("\n" + "\n".join(figures))
