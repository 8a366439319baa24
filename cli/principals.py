"""`herald principals add | list | revoke | rotate`: who may call the API and run commands.

Run by an admin: the token in HERALD_TOKEN or the data folder's token file (the one
`herald dev` writes), or HERALD_OPERATOR_TOKEN (break-glass). A new token is printed once,
on stdout, with a warning on stderr that it will not be shown again.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import settings as settings_module
from domain.clocks import iso_utc
from domain.principals import ORDER
from ledger.errors import LastAdmin, NotFound, PrincipalExists, PrincipalRevoked
from runtime.tables import Clock, table

WARNING = "store this token now: Herald keeps only its hash and will not show it again"


async def cmd_principals(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from cli.context import CliError, acting, ledger_sessions
    from cli.output import print_value
    from domain.principals import Access, Role
    from ledger import principals

    by = acting(cfg, Access.ADMINISTER)
    now = datetime.now(UTC)
    sessions = ledger_sessions(cfg)
    command = args.principals_command
    file_token = _token_in_file(cfg)
    file_held_it = False
    try:
        with sessions.begin() as session:
            if command == "list":
                views = principals.list_principals(session)
                rows = [
                    {
                        "name": v.name,
                        "role": v.role,
                        "namespace": v.namespace,
                        "created_by": v.created_by,
                        "created_at": iso_utc(v.created_at),
                        "last_used_at": iso_utc(v.last_used_at),
                        "rotated_at": iso_utc(v.rotated_at),
                        "revoked_at": iso_utc(v.revoked_at),
                    }
                    for v in views
                ]
                clock = Clock.for_args(args.utc)
                print_value(rows, args.json, lambda listed: _render_list(listed, clock))
                return 0
            if command == "revoke":
                view = principals.revoke(session, args.name, by=by, at=now)
                out: dict[str, Any] = {"name": view.name, "revoked_at": iso_utc(view.revoked_at)}
                print_value(out, args.json, lambda o: f"principal {o['name']} revoked")
                return 0
            if command == "add":
                issued = principals.create(
                    session, args.name, Role(args.role), by=by, at=now, namespace=args.namespace
                )
            else:
                file_held_it = file_token is not None and principals.holds_token(
                    session, args.name, file_token
                )
                issued = principals.rotate(session, args.name, by=by, at=now)
    except ValueError as err:
        raise CliError(str(err)) from err
    except (
        PrincipalExists,
        PrincipalRevoked,
        LastAdmin,
        NotFound,
    ) as err:
        raise CliError(str(err)) from err
    if file_held_it:
        # The old token is dead: left in the file, it would lock the next command out
        # (and `herald dev`'s whole second terminal with it).
        settings_module.write_secret_file(cfg.token_file, issued.token)
        print(
            f"{cfg.token_file} held {args.name}'s old token: it now holds the new one",
            file=sys.stderr,
        )
    # Committed: only now is the token worth showing.
    print(WARNING, file=sys.stderr)
    out = {
        "name": issued.principal.name,
        "role": issued.principal.role.value,
        "namespace": issued.principal.key_namespace,
        "token": issued.token,
        "warning": WARNING,
    }
    print_value(out, args.json, lambda o: o["token"])
    return 0


def _token_in_file(cfg: settings_module.Settings) -> str | None:
    try:
        return cfg.token_file.read_text().strip() or None
    except (FileNotFoundError, PermissionError, UnicodeDecodeError):
        return None


def _render_list(rows: list[dict[str, Any]], clock: Clock) -> str:
    """The principals as a table, every time in `clock`'s zone, named on the first line."""
    if not rows:
        return "no principals"
    listed = [{**r, "last_used_at": r["last_used_at"] or "never"} for r in rows]
    columns = [
        "name",
        "role",
        "created_at",
        "created_by",
        "last_used_at",
        "revoked_at",
        "namespace",
    ]
    headers = {
        "namespace": "KEY NAMESPACE",
        "created_at": "CREATED",
        "created_by": "BY",
        "last_used_at": "LAST USED",
        "revoked_at": "REVOKED",
    }
    # "never" is not a time: the clock formats only what is one.
    times = ["created_at", "revoked_at"]
    for row in listed:
        if row["last_used_at"] != "never":
            row["last_used_at"] = clock.at(row["last_used_at"])
    return (
        clock.heading() + "\n" + table(listed, columns, headers=headers, times=times, clock=clock)
    )


def register(add: Callable[..., argparse.ArgumentParser]) -> dict[str, Any]:
    from cli.output import action

    top = add(
        "principals",
        "add, list, revoke or rotate the principals (people and apps) that may use Herald",
        json_flag=False,
        example="herald principals add ana --role operator",
    )
    sub = top.add_subparsers(dest="principals_command", required=True, metavar="ACTION")
    add_p = action(
        sub,
        "add",
        "add a principal and print its token once",
        example="herald principals add ana --role operator",
    )
    add_p.add_argument("name", help="letters, digits, '.', '_' or '-' (at most 80)")
    add_p.add_argument(
        "--role",
        required=True,
        choices=[r.value for r in ORDER],
        help="what it may do (docs/api.md, 'Principals and roles'): app creates and reads "
        "intents, viewer reads evidence, operator acts, admin manages",
    )
    add_p.add_argument(
        "--namespace",
        metavar="NS",
        help="the namespace of the business keys it records (docs/api.md, 'How keys are "
        "scoped'): its own, for ever; default its name",
    )
    action(
        sub,
        "list",
        "name, role, created, last used, revoked (no tokens)",
        example="herald principals list --utc",
    )
    revoke_p = action(
        sub,
        "revoke",
        "revoke a principal: its token stops working",
        example="herald principals revoke ana",
    )
    revoke_p.add_argument("name", help="the principal whose token stops working at once")
    rotate_p = action(
        sub,
        "rotate",
        "a new token; the old one stops working at once",
        example="herald principals rotate ana",
    )
    rotate_p.add_argument("name", help="the principal to give a new token (printed once)")
    return {"principals": cmd_principals}
