"""`herald dev` and `herald demo`: the embedded stack on this machine, and the demo
scenarios run against it."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import settings as settings_module
from cli.context import CliError

if TYPE_CHECKING:
    from cli.main import Command


async def cmd_dev(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from devstack.stack import AlreadyRunning, DevStack

    if args.policy is not None:
        cfg.policy_name = _policy_spec(args.policy)
    try:
        cfg.sender_book()  # the worker it starts would refuse them: say so before starting
    except RuntimeError as err:
        raise CliError(str(err)) from err
    stack = DevStack(cfg, temporal_ui=not args.headless)
    try:
        addresses = await stack.start()
    except AlreadyRunning as err:
        raise CliError(str(err)) from err
    print(f"Herald dev stack is up, policy {cfg.policy_name} (Ctrl-C to stop):")
    print(addresses.table())
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        while not stop.is_set():
            if stack.worker is not None and not stack.worker.is_alive():
                print("herald: the worker exited; see worker.log", file=sys.stderr)
                break
            try:
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            except TimeoutError:
                pass
    finally:
        print("stopping...")
        await stack.stop()
    return 0


async def cmd_demo(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from scenarios.demo import run_demo

    return await run_demo(cfg, args.scenario, as_json=args.json)


def _policy_names() -> list[str]:
    import policies

    return policies.packaged_names()


def _policy_spec(spec: str) -> str:
    """A packaged policy's name, or a policy file's absolute path (the worker and a second
    terminal run elsewhere), once it is known to read and parse; CliError in one line."""
    import policies
    from domain.policy import PolicyError, load_policy

    try:
        _, document = policies.load(spec)
        load_policy(document)
    except (FileNotFoundError, PolicyError) as err:
        raise CliError(f"--policy: {err}") from None
    return str(Path(spec).expanduser().resolve()) if policies.is_file(spec) else spec


DEMO_SCENARIOS = (
    "sms",
    "class-opening",
    "order-created",
    "scheduled-alert",
    "itinerary-change",
    "session-report",
    "provider-outage",
    "email-events",
    "ambiguous-settled",
    "template-rollout",
)
"""`scenarios.SCENARIOS`' names (a test keeps them equal): importing the scenarios takes
a second and a half, too long to build the parser of every command."""


def register(add: Callable[..., argparse.ArgumentParser]) -> dict[str, Command]:
    dev = add(
        "dev",
        "run the embedded stack until Ctrl-C or SIGTERM",
        json_flag=False,
        example="herald dev --policy demo",
    )
    dev.add_argument("--headless", action="store_true", help="no Temporal Web UI")
    dev.add_argument(
        "--policy",
        metavar="NAME|FILE",
        help="the policy the stack runs (default: HERALD_POLICY_NAME, else default): a "
        f"packaged one ({', '.join(_policy_names())}; demo compresses the durations "
        "`herald demo` needs) or a policy file of your own in their format (a path ending "
        "in .toml), recorded and activated as it starts",
    )
    demo = add(
        "demo",
        "run a demo scenario end to end (all of them without an argument)",
        example="herald demo class-opening",
    )
    demo.add_argument(
        "scenario",
        nargs="?",
        default=None,
        choices=DEMO_SCENARIOS,
        metavar="SCENARIO",
        help="one of: " + ", ".join(list(DEMO_SCENARIOS)) + " (default: all of them)",
    )
    return {"dev": cmd_dev, "demo": cmd_demo}
