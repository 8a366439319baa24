"""`herald demo [SCENARIO]`: the seed stories through the real path, on the running dev
stack or on one started for the occasion (policy `demo`: the same durable timers with
compressed durations). Each scenario prints its timeline and fails loudly (exit 1) when
the outcome differs from its story; without an argument all of them run."""

from __future__ import annotations

import asyncio
import sys
import time

import settings as settings_module
from devstack.stack import DevStack, read_running
from scenarios import SCENARIOS, DemoContext, ScenarioFailed
from starter.client import HeraldClient

__all__ = ["SCENARIOS", "DemoContext", "ScenarioFailed", "run_demo"]


def _active_policy_name(client: HeraldClient) -> str:
    from ledger import repository as repo

    with client.sessions() as session:
        return repo.active_policy(session).name


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
        sink = None
        policy = await asyncio.to_thread(_active_policy_name, client)
        if policy != "demo" and names != ["sms"]:  # the `sms` story; not a channel
            again = "herald demo" + (f" {scenario}" if scenario else "")
            print(
                f"herald demo: the herald dev running on {cfg.data_path} uses policy "
                f"{policy!r}; the scenarios need the demo policy's compressed timings: stop "
                f"it (Ctrl-C) and start it again with `herald dev --policy demo`, then run "
                f"`{again}` (or, with no stack running, `{again}` starts its own)",
                file=sys.stderr,
            )
            return 2
        if not as_json:
            print(f"Using the herald dev stack running on {cfg.data_path} (policy {policy})")
    else:
        # The scenarios' timings (email after 10 s, horizon 60 s) are the demo policy's;
        # the provider-outage story's circuit half-opens after 5 s instead of 30.
        cfg.policy_name = "demo"
        cfg.circuit_cool_down_seconds = min(cfg.circuit_cool_down_seconds, 5.0)
        stack = DevStack(cfg)
        addresses = await stack.start()
        assert stack.client is not None
        client = stack.client
        sink = stack.sink
        if not as_json:
            print("Started the embedded stack for this demo (policy demo):")
            print(addresses.table())
    failures: list[str] = []
    try:
        for name in names:
            if not as_json:
                print(f"\n== scenario {name}")
            ctx = DemoContext(
                client,
                addresses,
                cfg.data_path,
                sink=sink,
                as_json=as_json,
                retention_days=cfg.pii_retention_days,
                artifact_store=cfg.artifact_store,
            )
            started = time.monotonic()
            try:
                await SCENARIOS[name](ctx)
                if not as_json:
                    print(f"== {name}: as the story says ({time.monotonic() - started:.1f} s)")
            except ScenarioFailed as err:
                failures.append(name)
                print(f"== {name}: FAILED - {err}", file=sys.stderr)
    finally:
        if stack is not None:
            await stack.stop()
    if failures and not as_json:
        print(
            f"\n{len(failures)} of {len(names)} scenario(s) failed: {', '.join(failures)}",
            file=sys.stderr,
        )
    return 1 if failures else 0
