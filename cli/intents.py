"""`herald show`, `send`, `cancel`, `approve-resend` and `settle`: one intent's life from
the command line, through the same client (starter) and documents as the HTTP API."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from collections.abc import Callable, Coroutine
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TypeVar

import settings as settings_module
from cli.context import CliError, acting, herald_client, ledger_sessions
from cli.output import api_document, print_json
from domain.channels import NAMES as CHANNEL_NAMES
from domain.intents import FINAL_STATES, REACHED
from runtime.tables import Clock, timeline_head, timeline_lines, timeline_text

if TYPE_CHECKING:
    from cli.main import Command


T = TypeVar("T")

AWAITING_OPERATOR = "awaiting-operator"
"""The workflow's HeraldState while it waits for an operator's approve-resend."""
FOLLOW_EVERY = 0.5
"""Seconds between two reads of the ledger while following an intent."""


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
            print_json(api_document(Timeline, doc))
        else:
            print(_ending(doc, finished, clock))
        return 0
    # An unknown key or an unreachable ledger is reported by `operational_error`.
    with ledger_sessions(cfg)() as session:
        doc = timeline.timeline(session, args.intent, cipher=_masking_cipher(cfg))
    if args.json:
        print_json(api_document(Timeline, doc))
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
    down, without this line. The workflow records what it waits for in the ledger
    (`_waiting_note`); Temporal is asked only when the ledger says nothing."""
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
    ended: str | None = None
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
        if ended is not None:
            return doc, ended
        running, phase = await _workflow_phase(client, doc["intent"]["workflow_id"])
        # The workflow records in the ledger what it waits for, and every verdict, before
        # it says so in Temporal or finishes: what Temporal says now is read against the
        # ledger read after it (the one above may predate a receipt that ended the run).
        if phase == AWAITING_OPERATOR and running:
            ended = AWAITING_OPERATOR
            continue
        # Not running with a final state: finished (or gone from Temporal, where only a
        # finished workflow can be once the ledger holds a final state).
        if not running and state in FINAL_STATES:
            ended = "finished"
            continue
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
    from ledger.errors import InvalidRequest

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
            print_json(api_document(IntentCreated, ref))
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
        print_json(api_document(Timeline, doc))
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
        print_json(api_document(CancelOutcome, {**asdict(result), "operator": by.name}))
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
        print_json(api_document(ResendOutcome, {**asdict(result), "operator": by.name}))
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
        print_json(docs)
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
            print_json({"members": [asdict(m) for m in found], "count": len(found)})
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
        print_json({**asdict(done), "operator": by.name})
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


def register(add: Callable[..., argparse.ArgumentParser]) -> dict[str, Command]:
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
    return {
        "show": cmd_show,
        "send": cmd_send,
        "cancel": cmd_cancel,
        "approve-resend": cmd_approve_resend,
        "settle": cmd_settle,
    }
