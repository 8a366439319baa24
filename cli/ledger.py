"""`herald` commands that read and maintain the ledger: purge, legal-hold, reconcile, list
and suppression (template and policy versions are cli/content.py's).

They talk to Postgres only (no Temporal), so they work while the workers are down. When
`herald dev` runs on the same data folder its database is used; otherwise the settings'
`HERALD_DATABASE_URL` (or the embedded default).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import settings as settings_module
from ledger.errors import NotFound

if TYPE_CHECKING:
    from cli.main import Command

from cli.context import CliError, acting, adopt_running
from cli.output import action
from domain.channels import NAMES as CHANNEL_NAMES
from domain.channels import NAMES_AND_ALL
from runtime.tables import Clock, table

# --- plumbing ---------------------------------------------------------------------------


@contextmanager
def _session(cfg: settings_module.Settings, *, write: bool) -> Iterator[Any]:
    """A session on the ledger, committed at the end when `write` (rolled back otherwise)."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import OperationalError
    from sqlalchemy.orm import Session

    adopt_running(cfg)  # or stop, naming the folder: never a guess at the default port
    url = cfg.resolved_database_url()
    engine = create_engine(url)
    try:
        with Session(engine, expire_on_commit=False) as session:
            try:
                yield session
                if write:
                    session.commit()
                else:
                    session.rollback()
            except OperationalError as err:
                where = make_url(url).render_as_string(hide_password=True)
                first = str(err.orig or err).strip().splitlines()[0]
                raise CliError(
                    f"cannot use the ledger database {where}: {first} "
                    "(is `herald dev` running, or HERALD_DATABASE_URL set?)"
                ) from err
    finally:
        engine.dispose()


def _emit(value: Any, as_json: bool, render: Callable[[Any], str]) -> None:
    if as_json:
        print(json.dumps(value, indent=2, default=str))
    else:
        print(render(value))


def _when(text: str | None, name: str) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError as err:
        raise CliError(f"{name}: {text!r} is not an ISO 8601 time") from err
    if value.tzinfo is None:
        raise CliError(f"{name}: {text!r} needs a timezone, e.g. 2025-01-31T12:00:00+00:00")
    return value


# --- purge and legal hold -----------------------------------------------------------------


async def cmd_purge(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from domain.principals import Access
    from ledger import principals, retention

    problems = [] if args.batch >= 1 else ["--batch must be at least 1"]
    try:
        now = _when(args.now, "--now") or datetime.now(UTC)
    except CliError as err:
        problems.insert(0, str(err))
    if problems:
        raise CliError("; ".join(problems))
    by = acting(cfg, Access.ADMINISTER)
    if args.dry_run:
        total = _purge_dry_run(cfg, now, args.batch)
    else:
        total = retention.purge_in_batches(
            lambda: _session(cfg, write=True), now=now, batch=args.batch
        )
    report = total.as_dict()
    del report["more"]
    if not args.dry_run:
        with _session(cfg, write=True) as session:
            principals.record_audit(
                session,
                by=by,
                action="purge.run",
                subject="pii",
                at=datetime.now(UTC),
                detail={k: report[k] for k in ("now", "intents_purged", "attempts_purged", "held")},
            )
    report["dry_run"] = args.dry_run
    if args.dry_run:
        report["business_keys"] = _business_keys(cfg, report["intent_ids"])
    clock = Clock.for_args(args.utc)

    def render(r: dict[str, Any]) -> str:
        verb, removed = (
            ("would purge", "would be deleted") if r["dry_run"] else ("purged", "deleted")
        )
        text = (
            f"{verb} PII of {r['intents_purged']} intent(s) and {r['attempts_purged']} "
            f"attempt(s) due by {clock.at(r['now'])}; {r['held']} on legal hold, "
            f"{r['waiting_for_send']} waiting for their send time; "
            f"{r['idempotency_keys_expired']} expired idempotency key(s) {removed}"
        )
        if r["dry_run"]:
            keys = r.get("business_keys") or []
            text += "".join(f"\n  {key}" for key in keys)
            text += "\n(dry run: nothing was removed)"
        return text

    _emit(report, args.json, render)
    return 0


def _purge_dry_run(cfg: settings_module.Settings, now: datetime, batch: int) -> Any:
    """What `purge` would remove, found by doing it in one transaction that is rolled back
    (the same statements, so the same answer), nothing kept."""
    from ledger import retention

    with _session(cfg, write=False) as session:
        report = retention.purge(session, now=now)
        expired = batch
        while expired == batch:
            expired = retention.expire_idempotency_keys(session, batch=batch)
            report.idempotency_keys_expired += expired
    report.batches = 1
    return report


def _business_keys(cfg: settings_module.Settings, intent_ids: list[str]) -> list[str]:
    from sqlalchemy import select

    from ledger.models import Intent

    if not intent_ids:
        return []
    with _session(cfg, write=False) as session:
        return sorted(
            session.execute(select(Intent.business_key).where(Intent.id.in_(intent_ids))).scalars()
        )


async def cmd_legal_hold(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from domain.principals import Access
    from ledger import retention

    by = acting(cfg, Access.ADMINISTER)
    with _session(cfg, write=True) as session:
        try:
            result = retention.set_legal_hold(
                session,
                args.intent,
                args.on,
                operator=by.name,
                operator_role=by.role.value,
                reason=args.reason,
                at=datetime.now(UTC),
            )
        except NotFound as err:
            raise CliError(str(err)) from err
        out = result.as_dict()

    def render(r: dict[str, Any]) -> str:
        text = f"legal hold {'on' if r['legal_hold'] else 'off'} for {r['business_key']}" + (
            "" if r["changed"] else " (unchanged)"
        )
        if r["legal_hold"] and r["pii_purged"]:
            text += "; note: its PII was already purged and cannot be restored"
        return text

    _emit(out, args.json, render)
    return 0


# --- reconcile ----------------------------------------------------------------------------


async def cmd_reconcile(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from ledger import reconcile, review_items, settlements

    now = _when(args.now, "--now") or datetime.now(UTC)
    if args.record:
        from domain.principals import Access

        acting(cfg, Access.OPERATE)  # filing review items is an operator's act; reading is not
    with _session(cfg, write=args.record) as session:
        rows = reconcile.find(
            session,
            now=now,
            unknown_older_than=timedelta(minutes=args.unknown_after_minutes),
            submitted_check_after=timedelta(minutes=args.check_after_minutes),
            grace=timedelta(minutes=args.grace_minutes),
        )
        recorded = review_items.record_review_items(session, rows, now) if args.record else None
        waiting = settlements.waiting_intents(session)
        settled = settlements.recent_settlements(session, since=now - timedelta(days=1))
    if args.workflows:
        differences = await _workflow_differences(
            cfg, now=now, grace=timedelta(minutes=args.grace_minutes), record=args.record
        )
        rows += differences
        if recorded is not None:
            recorded += len(differences)
    out = {
        "now": now.isoformat(),
        "rows": [row.as_dict() for row in rows],
        "recorded_new": recorded,
        "waiting": waiting,
        "settlements": settled,
    }

    def render(o: dict[str, Any]) -> str:
        clock = Clock.for_args(args.utc)
        text = f"needing review at {clock.at(now)}\n" + table(
            o["rows"], ["kind", "age", "subject", "business_key"], empty="nothing to review"
        )
        if o["recorded_new"] is not None:
            text += f"\n{o['recorded_new']} new review item(s) recorded"
        text += "\n\nwaiting for an operator (soonest window first)\n" + table(
            [{**w, "until": clock.at(w["until"])} for w in o["waiting"]],
            ["awaiting", "until", "business_key"],
            empty="no intent waits for an operator",
        )
        text += "\n\nsettlements in the last day\n" + table(
            [{**x, "at": clock.at(x["at"])} for x in o["settlements"]],
            ["at", "outcome", "rule", "state", "operator", "business_key"],
            empty="none",
        )
        return text

    _emit(out, args.json, render)
    return 0


async def _workflow_differences(
    cfg: settings_module.Settings, *, now: datetime, grace: timedelta, record: bool
) -> list[Any]:
    """`reconcile.reconcile_workflows` against the stack's Temporal: open intents whose
    workflow is closed or missing, running workflows whose intent is missing (what a
    restore leaves, docs/operations.md "Backup and restore")."""
    from functools import partial

    from cli.context import herald_client, ledger_sessions
    from ledger import reconcile

    temporal = (await herald_client(cfg)).temporal
    return await reconcile.reconcile_workflows(
        ledger_sessions(cfg),
        partial(_workflow_status, temporal),
        now=now,
        grace=grace,
        running=partial(_running_notifications, temporal),
        record=record,
    )


async def _workflow_status(temporal: Any, workflow_id: str) -> tuple[str, datetime | None] | None:
    """As activities.maintenance.workflow_status (the CLI may not import activities)."""
    from temporalio.service import RPCError, RPCStatusCode

    try:
        described = await temporal.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise CliError(f"cannot describe workflow {workflow_id}: {err}") from err
    return (described.status.name if described.status else "UNKNOWN"), described.close_time


async def _running_notifications(temporal: Any, limit: int) -> list[tuple[str, datetime | None]]:
    """As activities.maintenance.running_notifications."""
    from temporalio.service import RPCError

    query = "WorkflowType = 'NotificationWorkflow' AND ExecutionStatus = 'Running'"
    try:
        return [(w.id, w.start_time) async for w in temporal.list_workflows(query, limit=limit)]
    except RPCError as err:
        raise CliError(f"cannot list the running workflows in Temporal: {err}") from err


# --- list ---------------------------------------------------------------------------------


async def cmd_list(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    """One page (`--limit`), or every page (`--all`), of GET /v1/intents's list: the same
    keyset paging (`ledger.listing.page`), so a `next` cursor either prints goes on here."""
    from api.schemas import IntentPage
    from domain.intents import IntentState
    from ledger import listing

    problems = []
    if args.state is not None and args.state not in {s.value for s in IntentState}:
        problems.append(
            f"--state: unknown state {args.state!r}; one of "
            + ", ".join(s.value for s in IntentState)
        )
    if args.limit < 1:
        problems.append("--limit must be at least 1")
    since = None
    try:
        since = _when(args.since, "--since")
    except CliError as err:
        problems.append(str(err))
    flt = listing.IntentFilter(
        state=args.state,
        channel=args.channel,
        region=args.region,
        event_type=args.event_type,
        created_from=since,
        awaiting=args.awaiting,
    )
    cursor = None
    if args.cursor is not None and not problems:
        try:
            cursor = listing.read_cursor(args.cursor, flt)
        except listing.InvalidCursor as err:
            problems.append(f"--cursor: {err}")
    if problems:
        raise CliError("; ".join(problems))
    with _session(cfg, write=False) as session:
        # The document GET /v1/intents returns for the same filters.
        page = IntentPage.of(listing.page(session, flt, cursor, size=args.limit), limit=args.limit)
        while args.all and page.next is not None:
            more = listing.page(session, flt, listing.read_cursor(page.next, flt), size=args.limit)
            following = IntentPage.of(more, limit=args.limit)
            page.items += following.items
            page.scanned += following.scanned
            page.next, page.truncated = following.next, following.truncated
        out = page.model_dump(mode="json")
    clock = Clock.for_args(args.utc)

    def render(o: dict[str, Any]) -> str:
        text = clock.heading() + "\n"
        text += table(
            o["items"],
            ["created_at", "state", "business_key", "channels", "region", "event_type"],
            times=("created_at",),
            clock=clock,
            empty="no intent matches",
        )
        if o["truncated"]:
            text += f"\n(read {listing.SCAN_PER_PAGE} intents for this page; more may match)"
        if o["next"]:
            text += f"\nolder: --cursor {o['next']}"
        if o["previous"]:
            text += f"\nnewer: --cursor {o['previous']}"
        return text

    _emit(out, args.json, render)
    return 0


def _timed(
    args: argparse.Namespace, rows: list[dict[str, Any]], columns: list[str], times: tuple[str, ...]
) -> str:
    """A table whose `times` columns are in the zone `--utc` chose, named above it."""
    clock = Clock.for_args(args.utc)
    return clock.heading() + "\n" + table(rows, columns, times=times, clock=clock)


# --- suppressions -------------------------------------------------------------------------

_REASON = re.compile(r"^[a-z][a-z0-9_]{0,59}$")


def _lookup(cfg: settings_module.Settings, destination: str, channel: str | None) -> str:
    """The destination's lookup HMAC (the ledger never stores it readable)."""
    from sqlalchemy import create_engine

    from domain.destinations import normalized_destination
    from ledger.keys import load_cipher

    try:
        normalized = normalized_destination(destination, channel)
    except ValueError as err:
        raise CliError(f"destination: {err}") from err
    # The HMAC is only worth anything under the stack's own key: find the stack first.
    adopt_running(cfg)
    engine = create_engine(cfg.resolved_database_url())
    try:
        # The ledger's own lookup key, once the ring is checked against it (ledger.keys).
        return load_cipher(engine, cfg.resolved_data_keys()).lookup_hmac(normalized)
    finally:
        engine.dispose()


def _suppression(row: Any) -> dict[str, Any]:
    """The suppression as `/v1/suppressions` shows it (`SuppressionView`)."""
    from api.schemas import SuppressionView
    from ledger.evidence import suppression_fields

    return SuppressionView.model_validate(suppression_fields(row)).model_dump(mode="json")


async def cmd_suppression(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    """What the `/v1/suppressions` API does, from an operator's terminal; the destination
    is taken as an argument and never printed back (only the suppression's id)."""
    from domain.principals import Access
    from ledger import evidence

    source = getattr(args, "source", "cli")
    if not source or len(source) > 60 or "\x00" in source:
        raise CliError("--source: required, at most 60 characters")
    now = datetime.now(UTC)
    if args.suppression_command == "add":
        if not _REASON.match(args.reason):
            raise CliError("--reason: a machine word (a-z, 0-9, _; at most 60), e.g. operator")
        by = acting(cfg, Access.OPERATE)
        lookup = _lookup(cfg, args.destination, args.channel)
        with _session(cfg, write=True) as session:
            row, created = evidence.suppress_by(
                session,
                by,
                destination_hmac=lookup,
                channel=args.channel,
                reason=args.reason,
                source=source,
                at=now,
            )
            out: Any = {**_suppression(row), "created": created}
        _emit(
            out,
            args.json,
            lambda o: (
                f"suppression {o['id']} on {o['channel']} ({o['reason']})"
                + ("" if o["created"] else ": already active, nothing added")
            ),
        )
    elif args.suppression_command == "list":
        lookup = _lookup(cfg, args.destination, args.channel)
        with _session(cfg, write=False) as session:
            # POST /v1/suppressions/search's document (SuppressionList).
            out = {
                "items": [
                    _suppression(r)
                    for r in evidence.suppressions_of(session, lookup, channel=args.channel)
                ]
            }
        _emit(
            out,
            args.json,
            lambda o: (
                _timed(
                    args,
                    [
                        {
                            **r,
                            "state": "active" if r["active"] else f"lifted by {r['lifted_source']}",
                        }
                        for r in o["items"]
                    ],
                    ["id", "channel", "reason", "source", "at", "state", "lifted_at"],
                    ("at", "lifted_at"),
                )
                if o["items"]
                else "no suppression on record for that destination"
            ),
        )
    else:
        by = acting(cfg, Access.OPERATE)
        with _session(cfg, write=True) as session:
            try:
                row, changed = evidence.lift_suppression_by(
                    session, by, args.id, source=source, at=now
                )
            except NotFound as err:
                raise CliError(f"no suppression {args.id}") from err
            out = {**_suppression(row), "changed": changed}
        _emit(
            out,
            args.json,
            lambda o: f"suppression {o['id']} lifted" + ("" if o["changed"] else " already"),
        )
    return 0


# --- registration -------------------------------------------------------------------------


def register(add: Callable[..., argparse.ArgumentParser]) -> dict[str, Command]:
    purge = add(
        "purge",
        "remove readable PII whose retention has passed (legal holds exempt)",
        example="herald purge --dry-run",
    )
    purge.add_argument(
        "--now",
        metavar="TIME",
        help="compare purge-after times against this ISO 8601 time with its zone (default: now)",
    )
    purge.add_argument(
        "--batch", type=int, default=1000, help="intents per transaction (default 1000)"
    )
    purge.add_argument(
        "--dry-run",
        action="store_true",
        help="say what would be removed (intents by business key, counts) and remove nothing",
    )

    hold = add(
        "legal-hold",
        "put an intent on legal hold (exempt from purge) or lift it",
        example="herald legal-hold order-created:o-77 --on --reason 'case 12'",
    )
    hold.add_argument("intent", help="intent id or business key")
    switch = hold.add_mutually_exclusive_group(required=True)
    switch.add_argument("--on", dest="on", action="store_true", help="place the hold")
    switch.add_argument("--off", dest="on", action="store_false", help="lift the hold")
    hold.add_argument("--reason", required=True, help="why (recorded)")

    rec = add(
        "reconcile",
        "list what needs review, with ages; --record files review items",
        example="herald reconcile --record",
    )
    rec.add_argument(
        "--record", action="store_true", help="record each row as a review item (once)"
    )
    rec.add_argument(
        "--now",
        metavar="TIME",
        help="evaluate ages at this ISO 8601 time with its zone (default: now)",
    )
    rec.add_argument(
        "--workflows",
        action="store_true",
        help="also compare with Temporal (it must be reachable): open intents whose "
        "workflow is closed or missing, running workflows whose intent is missing (after "
        "a restore; docs/operations.md)",
    )
    rec.add_argument(
        "--grace-minutes",
        type=float,
        default=5.0,
        help="grace before an intent or a prepared attempt is overdue (default 5)",
    )
    rec.add_argument(
        "--check-after-minutes",
        type=float,
        default=15.0,
        help="silence after which a submitted attempt is overdue (default 15)",
    )
    rec.add_argument(
        "--unknown-after-minutes",
        type=float,
        default=60.0,
        help="age after which an unknown outcome is listed (default 60)",
    )

    lst = add(
        "list",
        "list intents, newest first, with their derived state",
        example="herald list --state failed --since 2026-12-01T00:00:00+01:00",
    )
    from domain.intents import IntentState

    lst.add_argument(
        "--state",
        metavar="STATE",
        help="derived intent state, one of: " + ", ".join(s.value for s in IntentState),
    )
    lst.add_argument("--channel", choices=CHANNEL_NAMES, help="channel in the intent's plan")
    lst.add_argument("--region", help="region code, e.g. EU")
    lst.add_argument("--event-type", help="the business key's event type, e.g. order-created")
    lst.add_argument(
        "--since",
        metavar="TIME",
        help="created at or after this ISO 8601 time, which must carry its zone "
        "(e.g. 2026-12-01T09:00:00+01:00 or ...Z); a time without one is refused, not guessed",
    )
    from domain.settlement import AWAITING_FILTERS

    lst.add_argument(
        "--awaiting",
        choices=AWAITING_FILTERS,
        help="only intents whose workflow waits for an operator: for a settlement, an "
        "approve-resend, or anything (`any`); the JSON says until when (`awaiting_until`)",
    )
    lst.add_argument(
        "--limit", type=int, default=50, help="at most this many per page (default 50)"
    )
    lst.add_argument(
        "--cursor",
        help="start at this page: the `older:` or `newer:` cursor a list printed (its "
        "`next` or `previous` in --json), given with the same filters",
    )
    lst.add_argument(
        "--all", action="store_true", help="follow every older page to the end (one table)"
    )

    sup = add(
        "suppression",
        "suppress a destination, list its suppressions, lift one",
        json_flag=False,
        example="herald suppression add +447400000100 --channel sms",
    )
    sup_sub = sup.add_subparsers(dest="suppression_command", required=True, metavar="ACTION")
    sup_add = action(
        sup_sub,
        "add",
        "suppress a destination on a channel ('*': all)",
        example="herald suppression add +447400000100 --channel sms",
    )
    sup_add.add_argument("destination", help="a phone number (E.164) or an email address")
    sup_add.add_argument(
        "--channel",
        required=True,
        choices=NAMES_AND_ALL,
        help="channel suppressed ('*': every channel)",
    )
    sup_add.add_argument(
        "--reason",
        default="operator",
        help="a machine word; the policy denies with rule suppression.<reason> (default operator)",
    )
    sup_list = action(
        sup_sub,
        "list",
        "every suppression of a destination, lifted too",
        example="herald suppression list +447400000100",
    )
    sup_list.add_argument("destination", help="a phone number (E.164) or an email address")
    sup_list.add_argument("--channel", choices=NAMES_AND_ALL, help="only those applying")
    sup_lift = action(
        sup_sub,
        "lift",
        "lift one suppression by id (kept as history)",
        example="herald suppression lift 3",
    )
    sup_lift.add_argument("id", type=int, help="the suppression's id (`suppression list`)")
    for sp in (sup_add, sup_lift):
        sp.add_argument("--source", default="cli", help="who or what asks (recorded)")

    return {
        "purge": cmd_purge,
        "legal-hold": cmd_legal_hold,
        "reconcile": cmd_reconcile,
        "list": cmd_list,
        "suppression": cmd_suppression,
    }
