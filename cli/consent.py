"""`herald consent`: a recipient's consent evidence, recorded, revoked or listed, as
`/v1/consents` does."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import settings as settings_module
from cli.context import CliError, acting, ledger_sessions
from cli.output import print_json
from domain.channels import NAMES_AND_ALL
from runtime.tables import Clock, table

if TYPE_CHECKING:
    from cli.main import Command


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
        print_json(doc)
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


def register(add: Callable[..., argparse.ArgumentParser]) -> dict[str, Command]:
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
    return {"consent": cmd_consent}
