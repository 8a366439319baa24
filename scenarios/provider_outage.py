"""`provider-outage`: the primary SMS provider goes down, and failover never sends twice.

The story, on the stack's two simulators (Twilio-compatible as `twilio`, Telnyx as
`telnyx`), with a policy version that routes South African SMS to both in that order:

1. The primary refuses connections (an outage: its port is closed). Each message is
   refused before any byte left, so it goes through Telnyx as the next attempt
   (`<key>:sms:2`): exactly one submission each, none at the primary.
2. Those refusals open the primary's circuit: the next message costs one local refusal
   (`circuit_open`), not a connection attempt, and goes through Telnyx too.
3. The primary is back. After the cool-down one message is let through as the probe,
   it is accepted, and the circuit closes.
4. The primary accepts a message but its answer is lost (the response is withheld past
   the read timeout). Herald does not fail over: it looks the message up with the same
   provider, finds it, and follows it. One message, one provider.

The scenario activates its policy version for the story and re-activates the one that was
active afterwards (other users of a shared `herald dev` see ZA routed to two providers
meanwhile, nothing else).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

import httpx

from domain.circuit import CircuitState
from ledger import circuits
from ledger import repository as repo
from ledger.templates import activate_policy, seed_policy
from scenarios.base import DemoContext, ScenarioFailed, attempts_on, expect, suffix

POLICY_NAME = "demo-provider-outage"
OUTAGE_SECONDS = 20.0
PRIMARY, SECONDARY = "twilio", "telnyx"


def outage_policy() -> str:
    """The demo policy, with SMS in ZA routed to the primary, then Telnyx."""
    import policies

    document = policies.load_packaged("demo")
    lines = []
    for line in document.splitlines():
        if line.startswith("version = "):
            line = 'version = "demo-provider-outage-2026-12-07.1"'
        elif line.startswith("description = "):
            line = 'description = "Demo policy; SMS in ZA fails over from twilio to telnyx."'
        lines.append(line)
    return "\n".join(lines) + f'\n\n[regions.ZA.providers]\nsms = ["{PRIMARY}", "{SECONDARY}"]\n'


def za_mobile() -> str:
    """A valid South African mobile number (082 range) for this run."""
    return f"+2782{secrets.randbelow(10_000_000):07d}"


class Outage:
    """The two simulators as the story sees them."""

    def __init__(self, ctx: DemoContext) -> None:
        self.ctx = ctx
        self.primary = ctx.addresses.simulator.rstrip("/")
        self.secondary = (ctx.addresses.telnyx_simulator or "").rstrip("/")
        if not self.secondary:
            raise ScenarioFailed(
                "no Telnyx simulator in this stack (HERALD_TELNYX_BASE_URL is set): the "
                "provider-outage story needs both simulators"
            )

    async def _call(self, base: str, method: str, path: str, body: Any = None) -> Any:
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.request(method, f"{base}{path}", json=body)
        response.raise_for_status()
        return response.json()

    async def created(self, token: str) -> tuple[int, int]:
        """(messages created at the primary, at the secondary) for one attempt token."""
        first = await self._call(self.primary, "GET", "/_sim/stats")
        second = await self._call(self.secondary, "GET", "/_sim/stats")
        return first["by_token"].get(token, 0), second["by_token"].get(token, 0)

    async def primary_down(self, seconds: float) -> None:
        await self._call(self.primary, "POST", "/_sim/outage", {"seconds": seconds})

    async def primary_listening(self) -> bool:
        try:
            await self._call(self.primary, "GET", "/_sim/stats")
        except httpx.TransportError:
            # Refused, or cut while it read the request (a fresh-clone run met a ReadError
            # as the listener closed): either way it no longer answers.
            return False
        return True

    async def script_primary(self, to: str, fault: str, **extra: Any) -> None:
        await self._call(self.primary, "POST", "/_sim/script", {"to": to, "fault": fault, **extra})


def _circuit(ctx: DemoContext) -> CircuitState:
    with ctx.client.sessions() as session:
        found = circuits.current(session, PRIMARY)
    return found.state if found is not None else CircuitState.CLOSED


async def _send(ctx: DemoContext, run_id: str, n: int, phone: str) -> tuple[str, str]:
    key = f"provider-outage:p-{run_id}:{n}"
    recipient = f"outage-member-{run_id}-{n}"
    ref = await ctx.send_demo_sms(key, recipient, phone, n=n)
    return key, ref.workflow_id


async def _one_message_one_provider(
    ctx: DemoContext, outage: Outage, key: str, workflow_id: str, *, via: str
) -> dict[str, Any]:
    result = await ctx.result(workflow_id)
    doc = await ctx.timeline(key)
    sms = attempts_on(doc, "sms")
    created = [await outage.created(a["token"]) for a in sms]
    total = sum(a + b for a, b in created)
    expect(total == 1, f"{key}: {total} messages created across both providers, not 1")
    reached = [a for a, c in zip(sms, created, strict=True) if sum(c) == 1][0]
    expect(
        reached["provider"] == via,
        f"{key}: the message went through {reached['provider']}, the story says {via}",
    )
    expect(result.outcome == "delivered", f"{key}: ended {result.outcome}, not delivered")
    return doc


async def run(ctx: DemoContext) -> None:
    outage = Outage(ctx)
    with ctx.client.sessions.begin() as session:
        before = repo.active_policy(session).version
        seed_policy(session, outage_policy(), name=POLICY_NAME, activate=True)
    ctx.say(f"policy: SMS in ZA routed to {PRIMARY}, then {SECONDARY} (failover allowed)")
    run_id = suffix()
    try:
        # 1. The primary refuses connections: each message goes through Telnyx, once.
        await outage.primary_down(OUTAGE_SECONDS)
        deadline = time.monotonic() + 5
        while await outage.primary_listening():
            expect(time.monotonic() < deadline, "the primary simulator never went down")
            await asyncio.sleep(0.05)
        ctx.say(f"{PRIMARY} refuses connections for {OUTAGE_SECONDS:.0f} s")
        # Sent together, so all of them meet the outage: each is refused, then sent once.
        sent = [await _send(ctx, run_id, n, za_mobile()) for n in range(1, 6)]
        for _, wid in sent:
            await ctx.result(wid)
        # 2. The refusals opened the primary's circuit: the next one is refused without
        # a connection attempt.
        expect(
            _circuit(ctx) != CircuitState.CLOSED,
            f"the {PRIMARY} circuit did not open after {len(sent)} refused connections",
        )
        key, wid = await _send(ctx, run_id, len(sent) + 1, za_mobile())
        await ctx.result(wid)
        sent.append((key, wid))
        refused = attempts_on(await ctx.timeline(key), "sms")[0]
        expect(
            refused["error_code"] == "circuit_open",
            f"{key}: the primary's refusal was {refused['error_code']}, not its open circuit",
        )
        ctx.say(f"{PRIMARY} circuit open: {key} was refused without a connection")

        # 3. The primary is back (its counts can be read again): every message of the
        # outage went once, through the second provider.
        deadline = time.monotonic() + OUTAGE_SECONDS + 10
        while not await outage.primary_listening():
            expect(time.monotonic() < deadline, "the primary simulator did not come back")
            await asyncio.sleep(0.2)
        docs = [
            await _one_message_one_provider(ctx, outage, key, wid, via=SECONDARY)
            for key, wid in sent
        ]
        ctx.show(docs[0], f"{sent[0][0]}: refused by {PRIMARY}, sent through {SECONDARY}")
        first = attempts_on(docs[0], "sms")
        expect(
            [a["provider"] for a in first] == [PRIMARY, SECONDARY]
            and first[1]["token"].endswith(":sms:2"),
            "the failover try is not the next attempt through the next provider",
        )
        ctx.say(f"{PRIMARY} listens again; waiting for its circuit's probe")
        n = len(sent)
        deadline = time.monotonic() + 90
        while True:
            n += 1
            key, wid = await _send(ctx, run_id, n, za_mobile())
            result = await ctx.result(wid)
            doc = await ctx.timeline(key)
            providers = [a["provider"] for a in attempts_on(doc, "sms")]
            expect(result.outcome == "delivered", f"{key}: ended {result.outcome}")
            if providers == [PRIMARY]:
                break
            expect(time.monotonic() < deadline, f"no probe reached {PRIMARY} within 90 s")
            await asyncio.sleep(2)
        expect(_circuit(ctx) == CircuitState.CLOSED, f"the {PRIMARY} circuit did not close")
        ctx.say(f"the probe went through {PRIMARY}; its circuit is closed again")

        # 4. The primary takes a message and its answer is lost: no failover.
        phone = za_mobile()
        await outage.script_primary(phone, "accept_then_timeout")
        key, wid = await _send(ctx, run_id, n + 1, phone)
        doc = await _one_message_one_provider(ctx, outage, key, wid, via=PRIMARY)
        ctx.show(doc, f"{key}: answer lost, found by the lookup, one message")
        expect(
            len(attempts_on(doc, "sms")) == 1,
            "a lost answer moved to the next provider before the lookup said 'not there'",
        )
    finally:
        with ctx.client.sessions.begin() as session:
            activate_policy(session, before)
        ctx.say(f"policy {before} active again")
