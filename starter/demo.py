"""`herald demo`: real intents through the real path, on the running dev stack or on one
started for the occasion. Each scenario prints its timeline and fails loudly (exit 1)
when the outcome differs from its story."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import settings as settings_module
from domain.requests import NotificationRequest
from ledger import timeline
from ledger.models import Consent
from starter.client import HeraldClient
from starter.stack import Addresses, DevStack, read_running
from workflows.notification import NotificationWorkflow

DEMO_PHONE = "+447400000100"
"""A UK mobile number the carrier simulator delivers normally (docs/simulator.md)."""


@dataclass
class DemoContext:
    client: HeraldClient
    addresses: Addresses
    as_json: bool

    def consent(self, recipient: str, channel: str, purpose: str = "service") -> None:
        with self.client.sessions.begin() as session:
            session.add(
                Consent(
                    recipient_ref=recipient,
                    channel=channel,
                    purpose=purpose,
                    source="demo",
                    granted_at=datetime.now(UTC),
                )
            )

    async def result(self, workflow_id: str, timeout: float = 90.0) -> Any:
        handle = self.client.temporal.get_workflow_handle_for(NotificationWorkflow.run, workflow_id)
        return await asyncio.wait_for(handle.result(), timeout=timeout)

    def show(self, key: str) -> dict[str, Any]:
        doc = self.client.timeline(key)
        if self.as_json:
            print(json.dumps(doc, indent=2, default=str))
        else:
            print(timeline.render(doc))
            url = self.addresses.workflow_url(doc["intent"]["workflow_id"])
            if url:
                print(f"  Temporal Web UI: {url}")
        return doc


class ScenarioFailed(AssertionError):
    pass


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise ScenarioFailed(message)


async def scenario_sms(ctx: DemoContext) -> None:
    """One SMS intent: authorize, prepare, submit, signed receipt, delivered."""
    suffix = uuid.uuid4().hex[:8]
    key = f"demo:d-{suffix}"
    recipient = f"demo-member-{suffix}"
    await asyncio.to_thread(ctx.consent, recipient, "sms")
    ref = await ctx.client.notify(
        NotificationRequest(
            business_key=key,
            recipient_ref=recipient,
            template_key="demo",
            phone=DEMO_PHONE,
            variables={"n": 1, "intent_id": key},
        )
    )
    result = await ctx.result(ref.workflow_id)
    doc = await asyncio.to_thread(ctx.show, key)
    expect(result.outcome == "delivered", f"expected delivered, the workflow said {result.outcome}")
    expect(doc["intent"]["state"] == "delivered", "the ledger does not say delivered")


SCENARIOS: dict[str, Callable[[DemoContext], Awaitable[None]]] = {
    "sms": scenario_sms,
}


async def run_demo(
    cfg: settings_module.Settings, scenario: str | None, *, as_json: bool = False
) -> int:
    names = [scenario] if scenario else list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(
            f"herald demo: unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}",
            file=sys.stderr,
        )
        return 2
    stack: DevStack | None = None
    running = read_running(cfg)
    if running is not None:
        cfg.temporal_address = cfg.temporal_address or running.temporal
        cfg.database_url = cfg.database_url or running.postgres
        client = await HeraldClient.connect(cfg)
        addresses = running
    else:
        stack = DevStack(cfg)
        addresses = await stack.start()
        assert stack.client is not None
        client = stack.client
        if not as_json:
            print("Started the embedded stack for this demo:")
            print(addresses.table())
    failures = 0
    try:
        for name in names:
            if not as_json:
                print(f"\n== scenario {name}")
            try:
                await SCENARIOS[name](DemoContext(client, addresses, as_json))
                if not as_json:
                    print(f"== {name}: as the story says")
            except ScenarioFailed as err:
                failures += 1
                print(f"== {name}: FAILED - {err}", file=sys.stderr)
    finally:
        if stack is not None:
            await stack.stop()
    return 1 if failures else 0
