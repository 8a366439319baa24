"""The fault tier for failover between SMS providers: a stack of its own with both
simulators (Twilio-compatible `twilio`, Telnyx `telnyx`) and a policy version that routes
South African SMS to twilio then telnyx, and European SMS to telnyx then twilio. Every
check is against the simulators' own counts: per intent, at most one message created
across both providers."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import delete

from devstack.stack import DevStack
from ledger import repository as repo
from ledger.models import ProviderCircuit
from ledger.templates import activate_policy, seed_policy
from tests.conftest import key_id, stack_settings, until
from tests.faults.conftest import notify_with_consent
from workflows.notification import NotificationWorkflow

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def failover_policy() -> str:
    import policies

    document = policies.load_packaged("demo").replace(
        'version = "demo-2026-12-07.1"', 'version = "faults-failover-2026-12-07.1"'
    )
    return document + (
        '\n[regions.ZA.providers]\nsms = ["twilio", "telnyx"]\n'
        '\n[regions.EU.providers]\nsms = ["telnyx", "twilio"]\n'
        '\n[regions.default.providers]\nsms = ["twilio", "telnyx"]\n'
        # Elsewhere (a UK number, say) the policy would rather wait for the first provider.
        "\n[regions.default.rules.sms.transactional]\nfailover = false\n"
    )


def za() -> str:
    return f"+2782{secrets.randbelow(10_000_000):07d}"


def eu() -> str:
    return f"+3361{secrets.randbelow(10_000_000):07d}"


@pytest_asyncio.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DevStack]:
    cfg = stack_settings(
        tmp_path_factory.mktemp("failover"),
        # A fast breaker, so a test that opens it sees it close again within seconds.
        circuit_failure_threshold=3,
        circuit_cool_down_seconds=2.0,
    )
    dev = DevStack(cfg, temporal_ui=False)
    await dev.start()
    assert dev.client is not None
    with dev.client.sessions.begin() as session:
        before = repo.active_policy(session).version
        seed_policy(session, failover_policy(), name="faults-failover", activate=True)
    # One message first: the worker is up and its queues are polled before any outage.
    warm = Providers(dev)
    _, workflow_id = await warm.notify(za())
    assert (await warm.result(workflow_id)).outcome == "delivered"
    yield dev
    with dev.client.sessions.begin() as session:
        activate_policy(session, before)
    await dev.stop()
    if dev.postgres is not None:
        await asyncio.to_thread(dev.postgres.destroy)


class Providers:
    def __init__(self, stack: DevStack) -> None:
        assert stack.simulator is not None and stack.telnyx_simulator is not None
        assert stack.client is not None
        self.stack = stack
        self.client = stack.client
        self.urls = {"twilio": stack.simulator.url, "telnyx": stack.telnyx_simulator.url}

    async def _post(self, provider: str, path: str, body: dict[str, Any]) -> Any:
        async with httpx.AsyncClient() as http:
            answer = await http.post(f"{self.urls[provider]}{path}", json=body)
            answer.raise_for_status()
            return answer.json()

    async def script(self, provider: str, to: str, fault: str) -> None:
        await self._post(provider, "/_sim/script", {"to": to, "fault": fault})

    async def down(self, provider: str, seconds: float) -> None:
        """The provider refuses connections for `seconds` (returns once it does)."""
        await self._post(provider, "/_sim/outage", {"seconds": seconds})
        deadline = asyncio.get_running_loop().time() + 5
        while await self.listening(provider):
            assert asyncio.get_running_loop().time() < deadline, f"{provider} never went down"
            await asyncio.sleep(0.02)

    async def listening(self, provider: str) -> bool:
        try:
            async with httpx.AsyncClient() as http:
                await http.get(f"{self.urls[provider]}/_sim/stats")
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
            # Refused, or closed without an answer (or reset mid-read) by a server going
            # down this moment.
            return False
        return True

    async def up_again(self, provider: str, timeout: float = 60) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not await self.listening(provider):
            assert asyncio.get_running_loop().time() < deadline, f"{provider} did not come back"
            await asyncio.sleep(0.1)

    async def created(self, token: str) -> dict[str, int]:
        """Messages created for one attempt token, by provider."""
        out = {}
        async with httpx.AsyncClient() as http:
            for provider, url in self.urls.items():
                stats = (await http.get(f"{url}/_sim/stats")).json()
                out[provider] = int(stats["by_token"].get(token, 0))
        return out

    async def notify(self, phone: str, *, expires_at: datetime | None = None) -> tuple[str, str]:
        key = f"failover:f-{key_id()}"
        ref = await notify_with_consent(self.client, key, phone, expires_at=expires_at)
        return key, ref.workflow_id

    async def result(self, workflow_id: str, timeout: float = 120) -> Any:
        handle = self.client.temporal.get_workflow_handle_for(NotificationWorkflow.run, workflow_id)
        return await asyncio.wait_for(handle.result(), timeout)

    async def sent_once(self, key: str) -> list[dict[str, Any]]:
        """The intent's SMS attempts, after checking at most one message exists in all."""
        attempts = [a for a in self.client.timeline(key)["attempts"] if a["channel"] == "sms"]
        created = [await self.created(a["token"]) for a in attempts]
        assert sum(sum(c.values()) for c in created) <= 1, created
        for attempt, counts in zip(attempts, created, strict=True):
            attempt["created"] = counts
        return attempts


@pytest_asyncio.fixture
async def providers(stack: DevStack) -> Providers:
    """The module's stack as each test starts it: both providers listening and every
    circuit closed (an earlier test's outage leaves a circuit open for its cool-down, which
    would fail the next test's first send over at once)."""
    providers = Providers(stack)
    for provider in providers.urls:
        await providers.up_again(provider)

    def close_circuits() -> None:
        with providers.client.sessions.begin() as session:
            session.execute(delete(ProviderCircuit))

    await asyncio.to_thread(close_circuits)
    return providers


async def test_primary_down_the_message_goes_once_through_the_second(providers):
    await providers.down("twilio", 10)
    key, wid = await providers.notify(za())
    result = await providers.result(wid)
    await providers.up_again("twilio")
    attempts = await providers.sent_once(key)
    assert result.outcome == "delivered"
    doc = providers.client.timeline(key)
    assert [(a["provider"], a["state"]) for a in attempts] == [
        ("twilio", "failed"),
        ("telnyx", "delivered"),
    ], (doc["decisions"], doc["intent"])
    assert attempts[1]["created"] == {"twilio": 0, "telnyx": 1}


async def test_primary_times_out_after_accepting_no_failover_until_the_lookup(providers):
    phone = za()
    await providers.script("twilio", phone, "accept_then_timeout")
    key, wid = await providers.notify(phone)
    result = await providers.result(wid)
    attempts = await providers.sent_once(key)
    assert result.outcome == "delivered"
    # Retried with twilio (an open circuit on the way defers, then a new twilio attempt):
    # never telnyx, and one message in all.
    assert {a["provider"] for a in attempts} == {"twilio"}
    assert attempts[-1]["created"] == {"twilio": 1, "telnyx": 0}


async def test_a_lost_create_still_queued_is_never_sent_again_elsewhere(providers):
    # Twilio holds the message queued (no date_sent) past the lost answer and the lookup's
    # grace: its DateSent list does not show it, and that is no proof it is not there.
    phone = za()
    await providers._post(
        "twilio", "/_sim/script", {"to": phone, "fault": "queued_then_timeout", "seconds": 300}
    )
    key, _ = await providers.notify(phone)

    def sources() -> set[tuple[str, str]]:
        observed = providers.client.timeline(key)["observations"]
        return {(o["source"], o["raw_status"]) for o in observed}

    async def looked_up() -> bool:
        return ("reconcile", "not_seen") in sources()

    # Held until the lookup has answered, however long that takes on this machine.
    await until(looked_up, within=120, what="the lookup's not_seen")
    attempts = await providers.sent_once(key)
    assert [(a["provider"], a["state"], a["created"]) for a in attempts] == [
        ("twilio", "unknown", {"twilio": 1, "telnyx": 0})
    ]

    async def delivered_by_its_receipt() -> bool:
        attempts = providers.client.timeline(key)["attempts"]
        return [a["state"] for a in attempts] == ["delivered"]

    # Twilio sends it at last; its receipt settles the one attempt, nothing else was sent.
    await providers._post("twilio", "/_sim/release", {"to": phone})
    await until(delivered_by_its_receipt, within=60, what="the receipt's delivered")
    attempts = await providers.sent_once(key)
    assert [(a["provider"], a["created"]) for a in attempts] == [
        ("twilio", {"twilio": 1, "telnyx": 0})
    ]


async def test_a_destination_refusal_never_fails_over(providers):
    phone = za()
    await providers.script("twilio", phone, "api_error:21211")
    key, wid = await providers.notify(phone)
    await providers.result(wid)
    attempts = await providers.sent_once(key)
    assert [(a["provider"], a["state"], a["error_code"]) for a in attempts] == [
        ("twilio", "failed", "21211")
    ]


async def test_an_ambiguous_telnyx_send_ends_unknown_and_never_fails_over(providers):
    phone = eu()  # EU: telnyx first
    await providers.script("telnyx", phone, "accept_then_timeout")
    key, wid = await providers.notify(phone)
    result = await providers.result(wid)
    attempts = await providers.sent_once(key)
    # Never moved to twilio. The submit could not place the lost create (no lookup), so
    # the attempt was left unknown; Telnyx's own receipt, carrying the attempt token,
    # may settle it later (a real observation), which is not a resend.
    assert [a["provider"] for a in attempts] == ["telnyx"]
    assert attempts[0]["created"] == {"twilio": 0, "telnyx": 1}
    observations = providers.client.timeline(key)["observations"]
    sources = {(o["source"], o["raw_status"]) for o in observations}
    assert ("send", "timeout") in sources  # the create's answer was lost
    # Either the next try found nothing to say (`no_lookup`: left for a person), or a
    # Telnyx receipt for the token came first and settled it: never a second send.
    assert ("reconcile", "no_lookup") in sources or any(s == "webhook" for s, _ in sources)
    assert result.outcome in ("unknown", "delivered", "sent")


async def test_both_down_defers_then_ends_expired_at_the_expiry_with_nothing_sent(providers):
    await providers.down("twilio", 20)
    await providers.down("telnyx", 20)
    expires = datetime.now(UTC) + timedelta(seconds=8)
    key, wid = await providers.notify(za(), expires_at=expires)
    result = await providers.result(wid)
    await providers.up_again("twilio")
    await providers.up_again("telnyx")
    attempts = await providers.sent_once(key)
    assert result.outcome == "expired"  # never `failed`: the providers refused, not the intent
    assert all(sum(a["created"].values()) == 0 for a in attempts), [
        (o["source"], o["raw_status"], o["provider_code"], o.get("detail"))
        for o in providers.client.timeline(key)["observations"]
    ]
    assert {a["provider"] for a in attempts} == {"twilio", "telnyx"}
    sms = [r for r in result.channels if r.channel == "sms"][0]
    assert "every provider refused" in sms.reason and "nothing was sent" in sms.reason


async def test_failover_forbidden_by_the_policy_waits_for_the_first_provider(providers):
    await providers.down("twilio", 3)
    key, wid = await providers.notify(f"+447400{secrets.randbelow(800_000) + 100_000:06d}")
    result = await providers.result(wid)
    attempts = await providers.sent_once(key)
    assert result.outcome == "delivered"
    # Retried with twilio (an open circuit on the way defers, then a new twilio attempt):
    # never telnyx, and one message in all.
    assert {a["provider"] for a in attempts} == {"twilio"}
    assert attempts[-1]["created"] == {"twilio": 1, "telnyx": 0}


async def test_a_stop_through_telnyx_refuses_a_later_send_through_twilio(providers):
    phone = za()
    async with httpx.AsyncClient() as http:
        answer = await http.post(
            f"{providers.urls['telnyx']}/_sim/inbound",
            json={"from": phone, "to": "+15005550006", "body": "STOP"},
        )
    assert answer.json()["status_code"] == 204  # verified by the stack's ingress
    key, wid = await providers.notify(phone)  # ZA: twilio first
    result = await providers.result(wid)
    assert result.outcome == "denied"
    assert [a for a in providers.client.timeline(key)["attempts"] if a["channel"] == "sms"] == []
