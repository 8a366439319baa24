"""`herald` commands for the maintenance machinery: the outbox relay on its own, and the
Temporal Schedules that run reconciliation, the retention purge and the archive.

    herald relay [--once]                 start workflows for committed, unstarted intents
    herald schedules list                 the maintenance schedules, their interval and state
    herald schedules trigger reconcile    run one job now (`--wait` prints its result)
    herald schedules ensure               create/update the schedules without a worker

`herald reconcile`, `herald purge` (cli/ledger.py) and `herald archive run`
(cli/retention.py) do the same work directly against the ledger, without Temporal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import settings as settings_module
from cli.context import CliError, acting, herald_client
from cli.output import action

if TYPE_CHECKING:
    from cli.main import Command

MAINTENANCE_JOBS = ("reconcile", "purge", "archive")
"""`activities.contracts.JOBS` (a test keeps them equal): importing it pulls in the
Temporal SDK, most of a second on every `herald` command just to build the parser."""

WAIT_SECONDS = 60.0
"""How long `schedules trigger --wait` waits for the run to start and finish."""


def _emit(value: Any, as_json: bool, render: Callable[[Any], str]) -> None:
    print(json.dumps(value, indent=2, default=str) if as_json else render(value))


def _done(code: int) -> int:
    """Return `code`, or leave the process at once when this is the `herald` process.

    The Temporal client's Rust threads can abort a short-lived process while the
    interpreter finalizes ("Fatal Python error: PyGILState_Release", temporalio/sdk-python
    issue 300; seen here on `schedules trigger --wait`): once the output is written there
    is nothing left to clean up, so skip finalization.
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if (spec is not None and spec.name == "cli.__main__") or Path(sys.argv[0]).name == "herald":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


async def _connected(cfg: settings_module.Settings):  # type: ignore[no-untyped-def]
    from temporalio.service import RPCError

    try:
        return await herald_client(cfg)
    except RuntimeError as err:  # Temporal unreachable
        raise CliError(f"cannot reach Temporal at {cfg.temporal_target}: {err}") from err
    except RPCError as err:
        raise CliError(f"cannot reach Temporal at {cfg.temporal_target}: {err}") from err


# --- relay --------------------------------------------------------------------------------


async def cmd_relay(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from starter.relay import relay_once, run_relay

    if args.grace < 0:
        raise CliError("--grace must not be negative")
    client = await _connected(cfg)
    if args.once:
        started = await relay_once(client, grace=timedelta(seconds=args.grace))
        _emit({"started": started}, args.json, lambda o: f"started {o['started']} workflow(s)")
        return _done(0)
    import signal

    from runtime.logs import configure_logging

    configure_logging()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await run_relay(client, stop)
    return _done(0)


# --- schedules ----------------------------------------------------------------------------


def _describe_dict(schedule_id: str, desc: Any) -> dict[str, Any]:
    intervals = [i.every.total_seconds() for i in desc.schedule.spec.intervals]
    recent = desc.info.recent_actions[-1] if desc.info.recent_actions else None
    return {
        "schedule_id": schedule_id,
        "exists": True,
        "every_seconds": intervals[0] if len(intervals) == 1 else intervals,
        "paused": desc.schedule.state.paused,
        "actions": desc.info.num_actions,
        "next_run": desc.info.next_action_times[0] if desc.info.next_action_times else None,
        "last_run": recent.started_at if recent else None,
        "last_workflow_id": recent.action.workflow_id if recent else None,
    }


async def _schedules_list(client: Any, cfg: settings_module.Settings) -> list[dict[str, Any]]:
    from temporalio.service import RPCError, RPCStatusCode

    from runtime.schedules import job_schedules

    out: list[dict[str, Any]] = []
    for job in job_schedules(cfg.task_queue):
        try:
            desc = await client.temporal.get_schedule_handle(job.schedule_id).describe()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise CliError(f"cannot describe schedule {job.schedule_id}: {err}") from err
            out.append({"schedule_id": job.schedule_id, "job": job.job, "exists": False})
            continue
        out.append({"job": job.job, **_describe_dict(job.schedule_id, desc)})
    return out


async def _trigger(client: Any, cfg: settings_module.Settings, job: str, wait: bool) -> dict:
    from temporalio.service import RPCError, RPCStatusCode

    from runtime.schedules import schedule_id

    sid = schedule_id(cfg.task_queue, job)
    handle = client.temporal.get_schedule_handle(sid)
    try:
        before = (await handle.describe()).info.num_actions
        await handle.trigger()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise CliError(
                f"schedule {sid} does not exist: start a worker (it creates the schedules) "
                "or run `herald schedules ensure`"
            ) from err
        raise CliError(f"cannot trigger schedule {sid}: {err}") from err
    out: dict[str, Any] = {"schedule_id": sid, "job": job, "triggered": True}
    if not wait:
        return out
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_SECONDS
    while True:
        desc = await handle.describe()
        if desc.info.num_actions > before and desc.info.recent_actions:
            break
        if loop.time() > deadline:
            raise CliError(f"schedule {sid} did not start a run within {WAIT_SECONDS:.0f}s")
        await asyncio.sleep(0.2)
    workflow_id = desc.info.recent_actions[-1].action.workflow_id
    remaining = max(1.0, deadline - loop.time())
    try:
        result = await asyncio.wait_for(
            client.temporal.get_workflow_handle(workflow_id).result(), remaining
        )
    except TimeoutError as err:
        raise CliError(f"run {workflow_id} did not finish within {WAIT_SECONDS:.0f}s") from err
    out["workflow_id"] = workflow_id
    out["result"] = result if isinstance(result, dict) else asdict(result)
    return out


async def cmd_schedules(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    if args.schedules_command == "trigger":
        from domain.principals import Access

        # Running a job now is what the job's own command needs (`herald purge`,
        # `herald archive`: admin).
        acting(cfg, Access.OPERATE if args.job == "reconcile" else Access.ADMINISTER)
    client = await _connected(cfg)
    if args.schedules_command == "list":
        rows = await _schedules_list(client, cfg)

        def render(rows: list[dict[str, Any]]) -> str:
            from runtime.tables import Clock, table

            clock = Clock.for_args(args.utc)
            shown = [
                {
                    **r,
                    "every": f"{r['every_seconds']:.0f}s",
                    "state": "paused" if r["paused"] else "active",
                }
                if r["exists"]
                else {**r, "state": "missing: start a worker"}
                for r in rows
            ]
            columns = ["schedule_id", "every", "state", "actions", "next_run", "last_run"]
            return (
                clock.heading()
                + "\n"
                + table(shown, columns, times=("next_run", "last_run"), clock=clock)
            )

        _emit(rows, args.json, render)
        return _done(0)
    if args.schedules_command == "trigger":
        out = await _trigger(client, cfg, args.job, args.wait)
        _emit(
            out,
            args.json,
            lambda o: (
                f"triggered {o['schedule_id']}"
                + (f"; run {o['workflow_id']}: {o['result']}" if "result" in o else "")
            ),
        )
        return _done(0)
    from runtime.schedules import ensure_schedules

    ids = await ensure_schedules(client.temporal, cfg.task_queue)
    _emit({"schedules": ids}, args.json, lambda o: "ensured " + ", ".join(o["schedules"]))
    return _done(0)


# --- registration -------------------------------------------------------------------------


def register(add: Callable[..., argparse.ArgumentParser]) -> dict[str, Command]:
    relay = add(
        "relay",
        "run the outbox relay on its own (workers also run it)",
        example="herald relay --once",
    )
    relay.add_argument("--once", action="store_true", help="one round, print the count, exit")
    relay.add_argument(
        "--grace",
        type=float,
        default=2.0,
        help="with --once: only rows committed at least this many seconds ago (default 2)",
    )

    sched = add(
        "schedules",
        "list, trigger or ensure the maintenance schedules",
        json_flag=False,
        example="herald schedules trigger reconcile --wait",
    )
    sub = sched.add_subparsers(dest="schedules_command", required=True, metavar="ACTION")
    action(
        sub,
        "list",
        "each schedule with its interval and state",
        example="herald schedules list",
    )
    trigger = action(
        sub,
        "trigger",
        "run one job now through its schedule",
        example="herald schedules trigger reconcile --wait",
    )
    trigger.add_argument("job", choices=MAINTENANCE_JOBS, help="which job")
    trigger.add_argument("--wait", action="store_true", help="wait for the run, print result")
    action(
        sub,
        "ensure",
        "create or update the schedules (workers do this)",
        example="herald schedules ensure",
    )
    return {"relay": cmd_relay, "schedules": cmd_schedules}
