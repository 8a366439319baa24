"""`herald`: the command line for developers and operators.

Every command has `--help`; commands that print data take `--json`; errors go to stderr
with a non-zero exit code; operator commands record `--operator` and `--reason`.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import importlib
import json
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime
from typing import Any

import settings as settings_module
from runtime.loop import run


class CliError(Exception):
    """A problem the user can fix; printed without a traceback."""


def _print(value: Any, as_json: bool, render: Callable[[Any], str] | None = None) -> None:
    if as_json:
        plain = asdict(value) if is_dataclass(value) and not isinstance(value, type) else value
        print(json.dumps(plain, indent=2, default=str))
    else:
        print(render(value) if render else value)


def _adopt_running(cfg: settings_module.Settings) -> None:
    """Use the addresses of a running `herald dev` for whatever settings leave unset."""
    from devstack.stack import read_running

    running = read_running(cfg)
    if running is not None:
        cfg.temporal_address = cfg.temporal_address or running.temporal
        cfg.database_url = cfg.database_url or running.postgres


def _sessions(cfg: settings_module.Settings):  # type: ignore[no-untyped-def]
    """Ledger-only commands need no Temporal connection."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    _adopt_running(cfg)
    return sessionmaker(
        create_engine(cfg.resolved_database_url(), pool_pre_ping=True), expire_on_commit=False
    )


async def _client(cfg: settings_module.Settings):  # type: ignore[no-untyped-def]
    from starter.client import HeraldClient

    _adopt_running(cfg)
    try:
        return await HeraldClient.connect(cfg)
    except RuntimeError as err:
        if "connect" not in str(err).lower():
            raise
        raise CliError(
            f"cannot reach Temporal at {cfg.temporal_target} (is `herald dev` "
            "running, or HERALD_TEMPORAL_ADDRESS set?)"
        ) from err


def _acting(cfg: settings_module.Settings, access: Any) -> Any:
    """The principal this command acts as: the token in HERALD_TOKEN or the data folder's
    token file, checked like the API checks it (HERALD_OPERATOR_TOKEN is break-glass
    admin). What it does is recorded under that name and role, never under a flag."""
    import hashlib
    import hmac

    from domain.principals import BREAK_GLASS_NAME, Principal, Role, roles_for
    from ledger import principals

    token = cfg.cli_token()
    if token is None:
        raise CliError(
            f"no token: set HERALD_TOKEN, or run `herald dev` (it writes {cfg.token_file})"
        )
    where = "HERALD_TOKEN" if cfg.token is not None else str(cfg.token_file)
    principal: Principal | None = None
    if cfg.operator_token is not None and hmac.compare_digest(
        hashlib.sha256(token.encode()).digest(),
        hashlib.sha256(cfg.operator_token.get_secret_value().encode()).digest(),
    ):
        principal = Principal(BREAK_GLASS_NAME, Role.ADMIN)
    else:
        with _sessions(cfg).begin() as session:
            principal = principals.authenticate(session, token, at=datetime.now(UTC))
    if principal is None:
        raise CliError(f"the token in {where} is not accepted (unknown or revoked)")
    if not principal.may(access):
        allowed = ", ".join(r.value for r in roles_for(access))
        raise CliError(
            f"{access.value} needs the {roles_for(access)[0].value} role (any of: {allowed}); "
            f"{principal.name} is {principal.role.value}"
        )
    return principal


# --- commands ---------------------------------------------------------------------------


async def cmd_dev(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from devstack.stack import AlreadyRunning, DevStack

    try:
        cfg.sender_book()  # the worker it starts would refuse them: say so before starting
    except RuntimeError as err:
        raise CliError(str(err)) from err
    stack = DevStack(cfg, temporal_ui=not args.headless)
    try:
        addresses = await stack.start()
    except AlreadyRunning as err:
        raise CliError(str(err)) from err
    print("Herald dev stack is up (Ctrl-C to stop):")
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


async def cmd_show(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from ledger import timeline

    # An unknown key or an unreachable ledger is reported by `operational_error`.
    with _sessions(cfg)() as session:
        doc = timeline.timeline(session, args.intent)
    _print(doc, args.json, timeline.render)
    return 0


async def cmd_send(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from domain.requests import NotificationRequest
    from ledger.intake import InvalidRequest

    variables = json.loads(args.vars) if args.vars else {}
    request = NotificationRequest(
        business_key=args.key,
        recipient_ref=args.recipient,
        template_key=args.template,
        category=args.category,
        phone=args.phone,
        email=args.email,
        channels=tuple(args.channels.split(",")) if args.channels else (),
        mode=args.mode,
        variables=variables,
        locale=args.locale,
        send_at=datetime.fromisoformat(args.send_at) if args.send_at else None,
    )
    client = await _client(cfg)
    try:
        ref = await client.notify(request)
    except InvalidRequest as err:
        raise CliError(f"invalid request: {err}") from err
    _print(
        ref,
        args.json,
        lambda r: (
            f"{'existing' if r.existed else 'new'} intent {r.intent_id} workflow {r.workflow_id}"
        ),
    )
    return 0


async def cmd_cancel(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from domain.principals import Access

    by = _acting(cfg, Access.OPERATE)
    client = await _client(cfg)
    result = await client.cancel(args.intent, by=by, reason=args.reason)
    _print(result, args.json, lambda r: r.message)
    return 0


async def cmd_approve_resend(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from domain.principals import Access

    by = _acting(cfg, Access.OPERATE)
    client = await _client(cfg)
    result = await client.approve_resend(
        args.intent, channel=args.channel, by=by, reason=args.reason
    )
    _print(result, args.json, lambda r: ("accepted: " if r.accepted else "refused: ") + r.message)
    return 0 if result.accepted else 3


async def cmd_consent(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from ledger import evidence

    for name, value, most in (
        ("recipient", args.recipient, 120),
        ("--purpose", args.purpose, 40),
        ("--source", args.source, 120),
    ):
        if not value or len(value) > most or "\x00" in value:
            raise CliError(f"{name}: required, at most {most} characters")
    from domain.principals import Access

    by = _acting(cfg, Access.OPERATE)
    now = datetime.now(UTC)
    # A ledger that cannot be reached is reported by `operational_error`, like every command.
    out = _consent(evidence, _sessions(cfg), args, now, by)

    def render(o: dict[str, Any]) -> str:
        if not o["revoked"]:
            return f"consent {o['id']} recorded"
        if not o["ended"]:
            return (
                f"no live {o['purpose']!r} consent on {o['channel']} for {o['recipient_ref']}; "
                "nothing to revoke"
            )
        ids = ", ".join(f"{c['id']} ({c['channel']})" for c in o["ended"])
        return f"revoked consent {ids} at {o['revoked_at']}"

    _print(out, args.json, render)
    return 0


def _consent(
    evidence: Any, sessions: Any, args: argparse.Namespace, now: datetime, by: Any
) -> dict[str, Any]:
    with sessions.begin() as session:
        if args.revoke:
            ended = evidence.revoke_consent_by(
                session,
                by,
                recipient_ref=args.recipient,
                channel=args.channel,
                purpose=args.purpose,
                source=args.source,
                at=now,
            )
            out: dict[str, Any] = {
                "recipient_ref": args.recipient,
                "channel": args.channel,
                "purpose": args.purpose,
                "revoked": True,
                "revoked_at": now.isoformat(),
                "ended": [{"id": c.id, "channel": c.channel} for c in ended],
            }
        else:
            row = evidence.record_consent_by(
                session,
                by,
                recipient_ref=args.recipient,
                channel=args.channel,
                purpose=args.purpose,
                source=args.source,
                at=now,
            )
            out = {
                "id": row.id,
                "recipient_ref": row.recipient_ref,
                "channel": row.channel,
                "purpose": row.purpose,
                "revoked": False,
                "granted_at": now.isoformat(),
            }
    return out


async def cmd_migrate(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    from ledger import migrate
    from ledger.templates import seed_packaged

    url = cfg.resolved_database_url()
    await asyncio.to_thread(migrate.upgrade, url)
    with sessionmaker(create_engine(url)).begin() as session:
        seed_packaged(session, cfg.policy_name)
    _print({"migrated": True}, args.json, lambda _: "ledger migrated to head")
    return 0


async def cmd_worker(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    import worker

    try:
        cfg.sender_book()  # one line naming the bad alias, before anything connects
    except RuntimeError as err:
        raise CliError(str(err)) from err
    await worker.main()
    return 0


Command = Callable[[argparse.Namespace, settings_module.Settings], Coroutine[Any, Any, int]]

COMMANDS: dict[str, Command] = {
    "dev": cmd_dev,
    "demo": cmd_demo,
    "show": cmd_show,
    "send": cmd_send,
    "cancel": cmd_cancel,
    "approve-resend": cmd_approve_resend,
    "consent": cmd_consent,
    "migrate": cmd_migrate,
    "worker": cmd_worker,
}

# Modules that add their own subcommands. Each has `register(add) -> dict[str, Command]`,
# where `add(name, help, json_flag=True)` returns an argparse subparser (so `--json` is
# uniform). Imported when the parser is built.
COMMAND_MODULES = [
    "cli.ledger",
    "cli.ops",
    "cli.bench",
    "cli.maint",
    "cli.principals",
]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="herald", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    def add(name: str, help: str, *, json_flag: bool = True) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help)
        if json_flag:
            sp.add_argument("--json", action="store_true", help="print JSON")
        return sp

    dev = add("dev", "run the embedded stack until Ctrl-C or SIGTERM", json_flag=False)
    dev.add_argument("--headless", action="store_true", help="no Temporal Web UI")
    demo = add("demo", "run a demo scenario end to end (all of them without an argument)")
    demo.add_argument("scenario", nargs="?", default=None)
    show = add("show", "an intent's timeline from the ledger")
    show.add_argument("intent", help="intent id or business key")
    send = add("send", "record an intent and start its workflow")
    send.add_argument("--key", required=True, help="business key, e.g. order-created:o-77")
    send.add_argument("--recipient", required=True, help="the app's recipient id")
    send.add_argument("--template", required=True)
    send.add_argument("--category", default="transactional")
    send.add_argument("--phone")
    send.add_argument("--email")
    send.add_argument("--channels", help="comma-separated order, e.g. sms,email")
    send.add_argument("--mode", default="fallback", choices=["fallback", "all"])
    send.add_argument("--vars", help="template variables as a JSON object")
    send.add_argument("--locale", default="en")
    send.add_argument("--send-at", help="ISO 8601 with timezone")
    for name, help in (
        ("cancel", "close an intent's future work (nothing sent is recalled)"),
        ("approve-resend", "approve a new attempt after a retryable failure"),
    ):
        sp = add(name, help)
        sp.add_argument("intent", help="intent id or business key")
        sp.add_argument("--reason", required=True)
        if name == "approve-resend":
            sp.add_argument("--channel", default="sms", choices=["sms", "email"])
    consent = add("consent", "record (or revoke) consent evidence for a recipient")
    consent.add_argument("recipient")
    consent.add_argument("--channel", required=True, choices=["sms", "email", "*"])
    consent.add_argument("--purpose", default="service")
    consent.add_argument("--source", default="cli", help="where it came from (recorded)")
    consent.add_argument(
        "--revoke",
        action="store_true",
        help="end every live grant for this recipient, purpose and channel (a '*' grant "
        "included); the rows stay as history",
    )
    add("migrate", "apply ledger migrations and load packaged policies and templates")
    add(
        "worker",
        "run a Temporal worker (workflows, ledger, SMS and email activities)",
        json_flag=False,
    )
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:
                raise
            continue
        COMMANDS.update(module.register(add))
    return p


def settings_problem(err: Exception) -> str:
    """One line for a settings error: each bad HERALD_* variable and what is wrong with it
    (pydantic's own text spans lines and repeats the value, which may be a secret)."""
    from pydantic import ValidationError

    if not isinstance(err, ValidationError):
        return _first_line(err)
    return "; ".join(
        f"HERALD_{'_'.join(str(part) for part in e['loc']).upper()}: {e['msg']}"
        for e in err.errors(include_url=False, include_input=False)
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        cfg = settings_module.load()
    except (RuntimeError, ValueError) as err:
        # A missing production secret or a malformed HERALD_* value: say which, no traceback.
        print(f"herald {args.command}: settings: {settings_problem(err)}", file=sys.stderr)
        return 2
    try:
        return run(COMMANDS[args.command](args, cfg))
    except CliError as err:
        print(f"herald {args.command}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader left (`herald list | head`): nothing more to say, and nothing to flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as err:
        message = operational_error(err, cfg)
        if message is None:
            raise  # a bug: the traceback is what a developer needs
        print(f"herald {args.command}: {message}", file=sys.stderr)
        return 2


def operational_error(err: BaseException, cfg: settings_module.Settings) -> str | None:
    """One line for a failure the user can fix (a service down, a wrong URL or address, an
    unknown key, a busy port), whichever command hit it; None for anything else (a bug).

    `cfg` is the command's settings after it adopted a running `herald dev`, so the URL
    and address named are the ones actually tried."""
    from sqlalchemy import exc as sa_exc
    from temporalio.service import RPCError

    from devstack.binaries import MissingBinary
    from devstack.ports import PortInUse
    from devstack.postgres import PostgresStartError
    from devstack.temporal import TemporalStartError
    from ledger.repository import NotFound

    if isinstance(err, NotFound):
        return str(err)
    if isinstance(err, sa_exc.ArgumentError | sa_exc.NoSuchModuleError):
        return f"the ledger database URL is not usable: {_first_line(err)}"
    if isinstance(err, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.ProgrammingError):
        hint = (
            "run `herald migrate`?"
            if isinstance(err, sa_exc.ProgrammingError)
            else "is `herald dev` running, or HERALD_DATABASE_URL set?"
        )
        return (
            f"cannot use the ledger database {_database_where(cfg)}: "
            f"{_first_line(err.orig or err)} ({hint})"
        )
    if isinstance(err, RuntimeError) and "client connect" in str(err).lower():
        return (
            f"cannot reach Temporal at {cfg.temporal_target} (is `herald dev` running, "
            "or HERALD_TEMPORAL_ADDRESS set?)"
        )
    if isinstance(err, RPCError):
        status = err.status.name if err.status else "error"
        return f"Temporal at {cfg.temporal_target} answered {status}: {_first_line(err)}"
    if isinstance(err, MissingBinary | PostgresStartError | TemporalStartError):
        more = "" if len(str(err).strip().splitlines()) <= 1 else f" (logs in {cfg.data_path})"
        return f"{_first_line(err)}{more}"
    if isinstance(err, PortInUse):
        return str(err.strerror)
    if isinstance(err, OSError):
        if err.errno == errno.EADDRINUSE:
            return (
                "a port it needs is already in use (another `herald dev`? the HERALD_*_PORT "
                "settings choose them)"
            )
        return _first_line(err)
    return None


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def _database_where(cfg: settings_module.Settings) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(cfg.resolved_database_url()).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - the URL itself is what failed to parse
        return "(unparsable URL)"


def entry() -> None:
    """The console script: run, flush, and leave without interpreter teardown, which can
    abort a process that used the Temporal client (temporalio/sdk-python#300)."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
