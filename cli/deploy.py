"""`herald deploy`: roll a new build out under Worker Versioning, and back
(docs/operations.md, "Deploying a new build").

    herald deploy status                     current and ramping build, each build's state
    herald deploy promote BUILD [--ramp P]   ramp P% of new intents to BUILD, or make it current
    herald deploy drained BUILD              exit 0 once no open run needs BUILD's workers
    herald deploy move-waiting BUILD         runs of BUILD waiting for an operator move to
                                             the current build

Spoken to Temporal through the SDK (runtime/deployments.py): the production image has no
`temporal` CLI. Promoting and moving runs need an admin's token.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import settings as settings_module
from cli.context import CliError, acting, adopt_dev_stack, temporal_unreachable
from cli.maint import _done, _emit

NOTIFICATION_WORKFLOW = "NotificationWorkflow"
"""The notification workflow's type (its class name; cli imports no workflow)."""
WAITING_STATE = "awaiting-operator"
"""The HeraldState of a run in its settlement or resend window: the runs `move-waiting`
moves (workflows/notification/operators.py, `_operator_window`)."""


async def cmd_deploy(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from runtime.deployments import DeploymentError

    if not cfg.worker_versioning:
        raise CliError("HERALD_WORKER_VERSIONING is off: the workers run unversioned")
    ramp = getattr(args, "ramp", None)
    if ramp is not None and not 0 < ramp < 100:
        raise CliError(
            f"--ramp: {ramp:g} is not a share of new intents above 0 and below 100 "
            "(without --ramp the build becomes current)"
        )
    if args.deploy_command in ("promote", "move-waiting"):
        from domain.principals import Access

        acting(cfg, Access.ADMINISTER)
    client = await _connected(cfg)
    try:
        if args.deploy_command == "status":
            return _done(await _status(client, cfg, args))
        if args.deploy_command == "promote":
            return _done(await _promote(client, cfg, args))
        if args.deploy_command == "drained":
            return _done(await _drained(client, cfg, args))
        return _done(await _move_waiting(client, cfg, args))
    except DeploymentError as err:
        raise CliError(str(err)) from None


async def _connected(cfg: settings_module.Settings):  # type: ignore[no-untyped-def]
    """A Temporal client (beside a running `herald dev`, its server): nothing else, the
    deployment lives in Temporal alone."""
    from starter.temporal import TemporalSettingError, connect

    adopt_dev_stack(cfg)
    try:
        return await connect(cfg)
    except TemporalSettingError as err:
        raise CliError(str(err)) from None
    except RuntimeError as err:
        raise CliError(temporal_unreachable(cfg, err)) from None


async def _status(client: Any, cfg: settings_module.Settings, args: argparse.Namespace) -> int:
    from runtime import deployments

    found = await deployments.describe(client, cfg.worker_deployment, task_queue=cfg.task_queue)
    builds = []
    for build in found.builds:
        pinned = await deployments.pinned_runs(client, cfg.worker_deployment, build.build_id)
        builds.append(
            {
                "build_id": build.build_id,
                "status": build.status,
                "drainage": build.drainage,
                "open_pinned_runs": pinned,
                "last_polled": build.last_polled.isoformat() if build.last_polled else None,
            }
        )
    out = {
        "deployment": found.name,
        "current": found.current,
        "ramping": found.ramping,
        "ramp_percent": found.ramp_percent if found.ramping else None,
        "builds": builds,
    }

    def render(o: dict[str, Any]) -> str:
        from runtime.tables import table

        ramp = f"{o['ramping']} at {o['ramp_percent']:g}%" if o["ramping"] else "none"
        now = datetime.now(UTC)
        rows = [
            {**b, "drainage": b["drainage"] or "-", "polled": _ago(b["last_polled"], now)}
            for b in o["builds"]
        ]
        head = f"deployment {o['deployment']}: current {o['current'] or 'none'}, ramping {ramp}"
        columns = ["build_id", "status", "drainage", "open_pinned_runs", "polled"]
        return "\n".join([head, table(rows, columns, headers={"build_id": "BUILD"})])

    _emit(out, args.json, render)
    return 0


def _ago(at: str | None, now: datetime) -> str:
    """When a worker of the build last polled, as `4 s ago`; `no worker seen` when the
    server remembers none (it forgets a poller a few minutes after its last poll)."""
    if at is None:
        return "no worker seen"
    seconds = max(0, round((now - datetime.fromisoformat(at)).total_seconds()))
    return f"{seconds} s ago"


async def _promote(client: Any, cfg: settings_module.Settings, args: argparse.Namespace) -> int:
    from runtime import deployments

    found = await deployments.describe(client, cfg.worker_deployment)
    found.build(args.build_id)  # an unknown build is refused, naming the known ones
    if args.ramp is None:
        await deployments.set_current(client, cfg.worker_deployment, args.build_id)
        said = f"build {args.build_id} is now current: new intents start on it"
        if found.current and found.current != args.build_id:
            said += (
                f"; runs pinned to {found.current} finish on it (`herald deploy drained "
                f"{found.current}` says when its workers may stop)"
            )
    else:
        await deployments.set_ramping(client, cfg.worker_deployment, args.build_id, args.ramp)
        said = (
            f"build {args.build_id} is ramping: {args.ramp:g}% of new intents start on it, "
            f"the rest on {found.current or 'the current build'}"
        )
    _emit({"build_id": args.build_id, "ramp_percent": args.ramp}, args.json, lambda _: said)
    return 0


async def _drained(client: Any, cfg: settings_module.Settings, args: argparse.Namespace) -> int:
    from runtime import deployments

    found = await deployments.describe(client, cfg.worker_deployment)
    found.build(args.build_id)
    pinned = await deployments.pinned_runs(client, cfg.worker_deployment, args.build_id)
    why = ""
    if found.current == args.build_id:
        why = "it is the current build"
    elif found.ramping == args.build_id:
        why = f"it is ramping ({found.ramp_percent:g}% of new intents)"
    elif pinned:
        why = f"{pinned} open run(s) still pin it"
    out = {"build_id": args.build_id, "drained": not why, "open_pinned_runs": pinned}

    def render(o: dict[str, Any]) -> str:
        if o["drained"]:
            return f"build {args.build_id} is drained: no open run pins it; its workers may stop"
        return f"build {args.build_id} is not drained: {why}"

    _emit(out, args.json, render)
    return 0 if not why else 1


async def _move_waiting(
    client: Any, cfg: settings_module.Settings, args: argparse.Namespace
) -> int:
    from activities.contracts import MOVE_TO_CURRENT_BUILD
    from runtime import deployments

    found = await deployments.describe(client, cfg.worker_deployment)
    found.build(args.build_id)
    if found.current == args.build_id:
        raise CliError(f"build {args.build_id} is the current build: its runs stay on it")
    ids = await deployments.waiting_runs(
        client,
        cfg.worker_deployment,
        args.build_id,
        workflow_type=NOTIFICATION_WORKFLOW,
        state=WAITING_STATE,
    )
    for workflow_id in ids:
        await client.get_workflow_handle(workflow_id).signal(MOVE_TO_CURRENT_BUILD)
    out = {"build_id": args.build_id, "asked": len(ids), "current": found.current}
    _emit(
        out,
        args.json,
        lambda o: (
            f"asked {o['asked']} run(s) pinned to {args.build_id} and waiting for an operator "
            f"to continue on {o['current'] or 'the current build'}; each moves at its next "
            "safe point, and only while a worker of its build runs"
        ),
    )
    return 0


def register(add: Callable[..., argparse.ArgumentParser]) -> dict[str, Any]:
    from cli.output import action

    top = add(
        "deploy",
        "roll a new build out (Worker Versioning): status, promote, drained, move-waiting",
        json_flag=False,
        example="herald deploy status",
    )
    sub = top.add_subparsers(dest="deploy_command", required=True, metavar="ACTION")
    action(
        sub,
        "status",
        "the current and ramping build; each build's state, open pinned runs and last poll",
        example="herald deploy status",
    )
    promote = action(
        sub,
        "promote",
        "ramp a share of new intents to a build, or make it current (admin)",
        example="herald deploy promote 0.2.0+1a2b3c4 --ramp 10",
    )
    promote.add_argument("build_id", metavar="BUILD_ID", help="a build whose workers have polled")
    promote.add_argument(
        "--ramp",
        type=float,
        metavar="PERCENT",
        help="start this share of new intents on the build, the rest on the current one "
        "(default: make it current)",
    )
    drained = action(
        sub,
        "drained",
        "exit 0 when no open run pins the build and it is neither current nor ramping, 1 otherwise",
        example="herald deploy drained 0.1.0+g3506597",
    )
    drained.add_argument("build_id", metavar="BUILD_ID", help="a build of the deployment")
    move = action(
        sub,
        "move-waiting",
        "ask the build's runs that wait for an operator (settlement, resend) to continue on "
        "the current build, carrying their state (admin)",
        example="herald deploy move-waiting 0.1.0+g3506597",
    )
    move.add_argument(
        "build_id", metavar="BUILD_ID", help="the build whose waiting runs move (not current)"
    )
    return {"deploy": cmd_deploy}
