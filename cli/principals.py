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
from domain.principals import ORDER

WARNING = "store this token now: Herald keeps only its hash and will not show it again"


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value else None


async def cmd_principals(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from cli.context import CliError, acting, ledger_sessions
    from cli.main import _print
    from domain.principals import Access, Role
    from ledger import principals
    from ledger import repository as repo

    by = acting(cfg, Access.ADMINISTER)
    now = datetime.now(UTC)
    sessions = ledger_sessions(cfg)
    command = args.principals_command
    try:
        with sessions.begin() as session:
            if command == "list":
                views = principals.list_principals(session)
                rows = [
                    {
                        "name": v.name,
                        "role": v.role,
                        "created_by": v.created_by,
                        "created_at": _iso(v.created_at),
                        "last_used_at": _iso(v.last_used_at),
                        "rotated_at": _iso(v.rotated_at),
                        "revoked_at": _iso(v.revoked_at),
                    }
                    for v in views
                ]
                _print(rows, args.json, _render_list)
                return 0
            if command == "revoke":
                view = principals.revoke(session, args.name, by=by, at=now)
                out: dict[str, Any] = {"name": view.name, "revoked_at": _iso(view.revoked_at)}
                _print(out, args.json, lambda o: f"principal {o['name']} revoked")
                return 0
            if command == "add":
                issued = principals.create(session, args.name, Role(args.role), by=by, at=now)
            else:
                issued = principals.rotate(session, args.name, by=by, at=now)
    except ValueError as err:
        raise CliError(str(err)) from err
    except (principals.PrincipalExists, principals.PrincipalRevoked, repo.NotFound) as err:
        raise CliError(str(err)) from err
    # Committed: only now is the token worth showing.
    print(WARNING, file=sys.stderr)
    out = {
        "name": issued.principal.name,
        "role": issued.principal.role.value,
        "token": issued.token,
        "warning": WARNING,
    }
    _print(out, args.json, lambda o: o["token"])
    return 0


def _render_list(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no principals"
    header = ("NAME", "ROLE", "CREATED", "BY", "LAST USED", "REVOKED")
    cells = [header] + [
        (
            r["name"],
            r["role"],
            r["created_at"] or "",
            r["created_by"],
            r["last_used_at"] or "never",
            r["revoked_at"] or "",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def register(add: Callable[..., argparse.ArgumentParser]) -> dict[str, Any]:
    top = add(
        "principals",
        "add, list, revoke or rotate the principals (people and apps) that may use Herald",
        json_flag=False,
    )
    sub = top.add_subparsers(dest="principals_command", required=True)
    add_p = sub.add_parser("add", help="add a principal and print its token once")
    add_p.add_argument("name", help="letters, digits, '.', '_' or '-' (at most 80)")
    add_p.add_argument(
        "--role",
        required=True,
        choices=[r.value for r in ORDER],
        help="what it may do (docs/api.md, 'Principals and roles'): app creates and reads "
        "intents, viewer reads evidence, operator acts, admin manages",
    )
    list_p = sub.add_parser("list", help="name, role, created, last used, revoked (no tokens)")
    revoke_p = sub.add_parser("revoke", help="revoke a principal: its token stops working")
    revoke_p.add_argument("name", help="the principal whose token stops working at once")
    rotate_p = sub.add_parser("rotate", help="a new token; the old one stops working at once")
    rotate_p.add_argument("name", help="the principal to give a new token (printed once)")
    for sp in (add_p, list_p, revoke_p, rotate_p):
        sp.add_argument("--json", action="store_true", help="print JSON")
    return {"principals": cmd_principals}
