"""`herald` commands for what happens to evidence and contact data over time: the archive
and the erasure of one recipient (docs/ledger.md, "Archive" and "Erasure").

    herald archive run [--now ISO] [--batch N] [--dry-run]   archive what is due now
    herald archive verify [FILE]                            check the chain (and an export)
    herald archive export --out FILE [--drop]               the documents as JSON Lines
    herald erase --phone P | --email E | --recipient REF | --lookup KIND:HMAC --reason WHY

`herald purge` and `herald legal-hold` are in cli/ledger.py; the archive schedule runs
`archive run`'s work daily (runtime/schedules.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import settings as settings_module
from cli.context import CliError, acting
from cli.ledger import _emit, _session, _when
from cli.output import action
from ledger.errors import ErasureRefused

if TYPE_CHECKING:
    from cli.main import Command


# --- archive ------------------------------------------------------------------------------


async def cmd_archive(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    if args.archive_command == "run":
        return _archive_run(args, cfg)
    if args.archive_command == "verify":
        return _archive_verify(args, cfg)
    return _archive_export(args, cfg)


def _archive_run(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from domain.principals import Access
    from ledger import archive, principals

    problems = [] if args.batch >= 1 else ["--batch must be at least 1"]
    try:
        now = _when(args.now, "--now") or datetime.now(UTC)
    except CliError as err:
        problems.insert(0, str(err))
    if problems:
        raise CliError("; ".join(problems))
    by = acting(cfg, Access.ADMINISTER)
    if args.dry_run:
        # The same statements in one transaction that is rolled back: the same answer.
        with _session(cfg, write=False) as session:
            report = archive.archive(session, now=now)
            report.batches = 1
    else:
        report = archive.archive_in_batches(
            lambda: _session(cfg, write=True), now=now, batch=args.batch
        )
        with _session(cfg, write=True) as session:
            principals.record_audit(
                session,
                by=by,
                action="archive.run",
                subject="evidence",
                at=datetime.now(UTC),
                detail={k: v for k, v in report.as_dict().items() if k != "business_keys"},
            )
    out = {**report.as_dict(), "dry_run": args.dry_run}

    def render(r: dict[str, Any]) -> str:
        verb = "would archive" if r["dry_run"] else "archived"
        text = (
            f"{verb} {r['archived']} closed intent(s) last active before {r['cutoff']} "
            f"(policy {r['policy_version']}: evidence kept {r['evidence_days']} days); "
            f"{r['held']} on legal hold"
        )
        if r["dry_run"]:
            text += "".join(f"\n  {key}" for key in r["business_keys"])
            text += "\n(dry run: nothing was moved)"
        return text

    _emit(out, args.json, render)
    return 0


def _archive_verify(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from ledger import archive

    lines: list[str] | None = None
    if args.file is not None:
        try:
            lines = Path(args.file).read_text(encoding="utf-8").splitlines()
        except OSError as err:
            raise CliError(f"cannot read {args.file}: {err.strerror}") from err
    with _session(cfg, write=False) as session:
        report = archive.verify(session, lines).as_dict()

    def render(r: dict[str, Any]) -> str:
        head = f"{r['tombstones']} tombstone(s), {r['documents_checked']} document(s) checked: " + (
            "the chain and every document match" if r["ok"] else "PROBLEMS"
        )
        return head + "".join(f"\n  {p}" for p in r["problems"])

    _emit(report, args.json, render)
    return 0 if report["ok"] else 1


def _archive_export(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from domain.principals import Access
    from ledger import archive, principals

    out = Path(args.out)
    if out.exists():
        raise CliError(f"{out} exists: give a new file (an export is never overwritten)")
    written = 0
    try:
        with out.open("x", encoding="utf-8") as sink, _session(cfg, write=False) as session:
            for stone in archive.tombstones(session):
                if stone.document is not None:
                    sink.write(stone.document + "\n")
                    written += 1
    except OSError as err:
        raise CliError(f"cannot write {out}: {err.strerror}") from err
    report: dict[str, Any] = {"file": str(out), "documents": written, "dropped": 0}
    if args.drop:
        # Read back what reached the disk: only a line that verifies lets its document go.
        by = acting(cfg, Access.ADMINISTER)
        lines = out.read_text(encoding="utf-8").splitlines()
        with _session(cfg, write=True) as session:
            report["dropped"] = archive.drop_documents(session, lines)
            principals.record_audit(
                session,
                by=by,
                action="archive.documents_dropped",
                subject=out.name,
                at=datetime.now(UTC),
                detail={
                    "documents": report["dropped"],
                    "file_sha256": archive.sha256("\n".join(lines)),
                },
            )

    def render(r: dict[str, Any]) -> str:
        text = f"wrote {r['documents']} archived intent(s) to {r['file']}"
        if args.drop:
            text += f"; {r['dropped']} document(s) dropped from the ledger (tombstones kept)"
        return text + f" (check it: herald archive verify {r['file']})"

    _emit(report, args.json, render)
    return 0


# --- erase --------------------------------------------------------------------------------


def _lookup(cfg: settings_module.Settings) -> Callable[[str], str]:
    from ledger.crypto import FieldCipher

    try:
        return FieldCipher(cfg.resolved_data_keys()).lookup_hmac
    except (RuntimeError, ValueError) as err:
        raise CliError(f"HERALD_DATA_KEY: {err}") from err


async def cmd_erase(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from domain.principals import Access
    from domain.recipients import RecipientKind
    from ledger import erasure

    named = [
        (kind, value)
        for kind, value in (
            (RecipientKind.PHONE, args.phone),
            (RecipientKind.EMAIL, args.email),
            (RecipientKind.RECIPIENT_REF, args.recipient),
            (None, args.lookup),
        )
        if value is not None
    ]
    problems = []
    if len(named) != 1:
        problems.append("name the recipient once: --phone, --email, --recipient or --lookup")
    if not args.reason.strip():
        problems.append("--reason must say why (it is recorded)")
    if problems:
        raise CliError("; ".join(problems))
    by = acting(cfg, Access.ADMINISTER)
    try:
        kind, value = named[0]
        who = (
            erasure.recipient_by_lookup(value)
            if kind is None
            else erasure.recipient(kind, value, _lookup(cfg))
        )
    except ValueError as err:
        raise CliError(str(err)) from err
    with _session(cfg, write=not args.dry_run) as session:
        try:
            report = erasure.erase(
                session,
                who,
                by=by,
                reason=args.reason,
                at=datetime.now(UTC),
                dry_run=args.dry_run,
            )
        except (ErasureRefused, ValueError) as err:  # a hold, an open intent, a note
            raise CliError(str(err)) from err
    out = report.as_dict()

    def render(r: dict[str, Any]) -> str:
        verb = "would erase" if r["dry_run"] else "erased"
        erased = ", ".join(f"{n} {t}" for t, n in r["rows_erased"].items())
        kept = ", ".join(f"{n} {t}" for t, n in r["evidence_kept"].items())
        text = (
            f"{verb} the contact data of {r['kind']} {r['lookup'][:12]}...: "
            f"{r['intents']} intent(s); rows {erased}; kept as evidence: {kept}"
        )
        if r["dry_run"]:
            text += "\n(dry run: nothing was erased)"
        else:
            text += f"\nrecorded as audit event {r['audit_event_id']}"
        return text

    _emit(out, args.json, render)
    return 0


# --- registration -------------------------------------------------------------------------


def register(add: Callable[..., argparse.ArgumentParser]) -> dict[str, Command]:
    arch = add(
        "archive",
        "move closed intents past the policy's evidence retention to the archive; "
        "verify or export it",
        json_flag=False,
        example="herald archive run --dry-run",
    )
    sub = arch.add_subparsers(dest="archive_command", required=True, metavar="ACTION")
    run = action(
        sub,
        "run",
        "archive what is due (admin), in batches, recorded as an audit event",
        example="herald archive run --dry-run",
    )
    run.add_argument(
        "--now",
        metavar="TIME",
        help="judge the retention at this ISO 8601 time with its zone (default: now)",
    )
    run.add_argument("--batch", type=int, default=200, help="intents per transaction (default 200)")
    run.add_argument(
        "--dry-run", action="store_true", help="say what would be archived, move nothing"
    )
    verify = action(
        sub,
        "verify",
        "check the hash chain of the tombstones and each archived document (exit 1 on a mismatch)",
        example="herald archive verify archive-2026.jsonl",
    )
    verify.add_argument("file", nargs="?", help="an export (JSON Lines) to check line by line, too")
    export = action(
        sub,
        "export",
        "write every archived document as JSON Lines, for cold storage",
        example="herald archive export --out archive-2026.jsonl",
    )
    export.add_argument("--out", required=True, metavar="FILE", help="a new file to write")
    export.add_argument(
        "--drop",
        action="store_true",
        help="then drop from the ledger each document the file holds intact (admin); the "
        "tombstones stay, to verify the file against",
    )

    erase = add(
        "erase",
        "erase one recipient's contact data everywhere in the ledger (admin); the evidence "
        "stays as hashes",
        example="herald erase --phone +447400000100 --reason 'GDPR request 2026-118'",
    )
    erase.add_argument("--phone", help="the recipient's phone number")
    erase.add_argument("--email", help="the recipient's email address (any letter case)")
    erase.add_argument("--recipient", metavar="REF", help="the app's recipient_ref")
    erase.add_argument(
        "--lookup",
        metavar="KIND:HMAC",
        help="a recorded erasure's subject (phone:<HMAC>, email:<HMAC>), to apply it again "
        "after a restore",
    )
    erase.add_argument("--reason", required=True, help="why (recorded with the erasure)")
    erase.add_argument(
        "--dry-run", action="store_true", help="say what would be erased, erase nothing"
    )
    return {"archive": cmd_archive, "erase": cmd_erase}
