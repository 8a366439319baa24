"""`herald template` and `herald policy`: the versions of templates and policies in the ledger.

`list`, `show` and `activate` (a rollback is activating an older version), and `import`: an
adopter's own catalog or policy files (a file, or a folder of them), recorded as new versions
authored by the principal the command acts as, never activated by the import. Like the
other ledger commands they talk to Postgres only (cli/ledger.py's session), so they work
while the workers are down.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import settings as settings_module
from cli.context import CliError, acting
from cli.ledger import _emit, _session, _timed
from cli.output import action
from domain.channels import NAMES as CHANNEL_NAMES
from domain.clocks import iso_utc
from runtime.tables import table

if TYPE_CHECKING:
    from cli.main import Command
    from ledger.templates import ContentFile


# --- policy -------------------------------------------------------------------------------


async def cmd_policy(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from sqlalchemy import select

    from domain.principals import Access
    from ledger import principals
    from ledger.models import PolicyVersion
    from ledger.templates import activate_policy

    def summary(row: PolicyVersion) -> dict[str, Any]:
        return {
            "version": row.version,
            "name": row.name,
            "owner": row.owner,
            "effective_from": iso_utc(row.effective_from),
            "active": row.active,
            "sha256": row.sha256,
            "author": row.author,
        }

    if args.policy_command == "list":
        with _session(cfg, write=False) as session:
            rows = session.execute(
                select(PolicyVersion).order_by(PolicyVersion.effective_from, PolicyVersion.version)
            ).scalars()
            out: Any = [summary(r) for r in rows]
        _emit(
            out,
            args.json,
            lambda o: _timed(
                args,
                o,
                ["version", "name", "owner", "effective_from", "active"],
                ("effective_from",),
            ),
        )
        return 0
    if args.policy_command == "import":
        return _import(args, cfg, "policy")
    if args.policy_command == "show":
        with _session(cfg, write=False) as session:
            row = session.get(PolicyVersion, args.version)
            if row is None:
                raise CliError(f"no policy version {args.version!r} (see `herald policy list`)")
            out = {**summary(row), "document": row.document}
        _emit(out, args.json, lambda o: o["document"].rstrip())
        return 0
    by = acting(cfg, Access.ADMINISTER)
    with _session(cfg, write=True) as session:
        try:
            activate_policy(session, args.version)
        except LookupError as err:
            raise CliError(f"{err.args[0]} (see `herald policy list`)") from err
        principals.record_audit(
            session, by=by, action="policy.activate", subject=args.version, at=datetime.now(UTC)
        )
        row = session.get(PolicyVersion, args.version)
        assert row is not None
        session.refresh(row)
        out = summary(row)
    _emit(out, args.json, lambda o: f"policy {o['version']} ({o['name']}) is now active")
    return 0


# --- template -----------------------------------------------------------------------------


async def cmd_template(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from sqlalchemy import select

    from domain.principals import Access
    from ledger import principals
    from ledger.models import TemplateVersionRow
    from ledger.templates import activate_template

    def summary(row: TemplateVersionRow) -> dict[str, Any]:
        return {
            "key": row.key,
            "channel": row.channel,
            "locale": row.locale,
            "version": row.version,
            "active": row.active,
            "sha256": row.sha256,
            "created_at": iso_utc(row.created_at),
            "author": row.author,
        }

    columns = ["key", "channel", "locale", "version", "active", "created_at"]
    order = (
        TemplateVersionRow.key,
        TemplateVersionRow.channel,
        TemplateVersionRow.locale,
        TemplateVersionRow.version,
    )
    if args.template_command == "list":
        with _session(cfg, write=False) as session:
            query = select(TemplateVersionRow).order_by(*order)
            if args.key:
                query = query.where(TemplateVersionRow.key == args.key)
            out = [summary(r) for r in session.execute(query).scalars()]
        _emit(out, args.json, lambda o: _timed(args, o, columns, ("created_at",)))
        return 0
    if args.template_command == "show":
        return _template_show(args, cfg)
    if args.template_command == "import":
        return _import(args, cfg, "template")
    by = acting(cfg, Access.ADMINISTER)
    with _session(cfg, write=True) as session:
        scope = [TemplateVersionRow.key == args.key]
        if args.channel:
            scope.append(TemplateVersionRow.channel == args.channel)
        if args.locale:
            scope.append(TemplateVersionRow.locale == args.locale)
        rows = list(session.execute(select(TemplateVersionRow).where(*scope)).scalars())
        if not rows:
            raise CliError(
                f"no template {args.key!r}"
                + (f" for channel {args.channel!r}" if args.channel else "")
                + (f" in locale {args.locale!r}" if args.locale else "")
                + " (see `herald template list`)"
            )
        # Activation deactivates every version in scope: refuse when some channel/locale in
        # scope has no such version, or it would be left with no active version at all.
        identities = {(r.channel, r.locale) for r in rows}
        having = {(r.channel, r.locale) for r in rows if r.version == args.version}
        missing = sorted(identities - having)
        if not having:
            known = sorted({r.version for r in rows})
            raise CliError(
                f"template {args.key!r} has no version {args.version} "
                f"(known versions: {', '.join(map(str, known))})"
            )
        if missing:
            raise CliError(
                f"template {args.key!r} version {args.version} does not exist for "
                + ", ".join(f"{c}/{loc}" for c, loc in missing)
                + "; pass --channel and --locale to activate it where it exists"
            )
        try:
            activate_template(
                session, args.key, args.version, channel=args.channel, locale=args.locale
            )
        except LookupError as err:
            raise CliError(str(err)) from err
        principals.record_audit(
            session,
            by=by,
            action="template.activate",
            subject=f"{args.key}@v{args.version}",
            at=datetime.now(UTC),
            detail={"channel": args.channel or "*", "locale": args.locale or "*"},
        )
        session.flush()
        out = [
            summary(r)
            for r in session.execute(
                select(TemplateVersionRow)
                .where(*scope, TemplateVersionRow.active.is_(True))
                .order_by(*order)
                .execution_options(populate_existing=True)
            ).scalars()
        ]
    _emit(
        out,
        args.json,
        lambda o: "active now:\n" + _timed(args, o, columns, ("created_at",)),
    )
    return 0


def _template_show(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    """Each channel and locale of a template (one version, or the active ones): the
    variables it needs, those it can do without, and its text."""
    from sqlalchemy import select

    from domain.templates import TemplateVersion, missing_variables, variables_of
    from ledger.models import TemplateVersionRow

    with _session(cfg, write=False) as session:
        query = select(TemplateVersionRow).where(TemplateVersionRow.key == args.key)
        if args.version is None:
            query = query.where(TemplateVersionRow.active.is_(True))
        else:
            query = query.where(TemplateVersionRow.version == args.version)
        rows = [
            (
                TemplateVersion(
                    key=row.key,
                    version=row.version,
                    channel=row.channel,
                    locale=row.locale,
                    body=row.body,
                    subject=row.subject,
                    schema=row.variables_schema,
                ),
                row.active,
            )
            for row in session.execute(
                query.order_by(TemplateVersionRow.channel, TemplateVersionRow.locale)
            ).scalars()
        ]
        if not rows:
            known = sorted(
                set(
                    session.execute(
                        select(TemplateVersionRow.version).where(TemplateVersionRow.key == args.key)
                    ).scalars()
                )
            )
            listed = ", ".join(map(str, known))
            raise CliError(
                f"no template {args.key!r} (see `herald template list`)"
                if not known
                else f"template {args.key!r} has no active version yet (known versions: "
                f"{listed}; show one with --version N, make it live with `herald template "
                "activate`)"
                if args.version is None
                else f"template {args.key!r} has no version {args.version} "
                f"(known versions: {listed})"
            )
    out = []
    for version, active in rows:
        if version.schema is not None:
            # What the version declares: the shapes an app must send (docs/templates.md).
            shapes = {
                name: prop["description"] for name, prop in version.schema["properties"].items()
            }
            required = list(version.schema["required"])
            optional = [name for name in shapes if name not in required]
        else:  # recorded before versions declared their variables: what rendering needs
            shapes = {}
            required = missing_variables(version, {})
            optional = [v for v in variables_of(version) if v not in required]
        out.append(
            {
                "key": version.key,
                "channel": version.channel,
                "locale": version.locale,
                "version": version.version,
                "active": active,
                "required": required,
                "optional": optional,
                "variables": shapes,
                "subject": version.subject,
                "body": version.body,
            }
        )

    def render(shown: list[dict[str, Any]]) -> str:
        lines = [
            table(shown, ["channel", "locale", "version", "active", "required", "optional"]),
        ]
        for t in shown:
            lines.append(f"\n{t['channel']}/{t['locale']} v{t['version']}:")
            lines += [f"  variable {name}: {shape}" for name, shape in t["variables"].items()]
            if t["subject"] is not None:
                lines.append(f"  subject: {t['subject']}")
            lines += ["  | " + line for line in t["body"].rstrip().splitlines()]
        return "\n".join(lines)

    _emit(out, args.json, render)
    return 0


# --- import -------------------------------------------------------------------------------


def _files(spec: str) -> list[ContentFile]:
    """The `.toml` files at `spec` (a file, or a folder and its subfolders), read as text."""
    from ledger.templates import ContentFile

    path = Path(spec).expanduser()
    if path.is_dir():
        found = sorted(p for p in path.rglob("*.toml") if p.is_file())
        if not found:
            raise CliError(f"{spec}: the folder holds no .toml file")
    elif path.exists():
        found = [path]
    else:
        raise CliError(f"{spec}: no such file or folder")
    files = []
    for file in found:
        try:
            files.append(ContentFile(str(file), file.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as err:
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            raise CliError(f"{file}: cannot read it: {why}") from None
    return files


def _import(args: argparse.Namespace, cfg: settings_module.Settings, what: str) -> int:
    """Import `args.path`'s files as template (`what` = "template") or policy versions."""
    from domain.principals import Access
    from ledger.templates import ImportRefused, import_policies, import_templates

    files = _files(args.path)
    by = acting(cfg, Access.ADMINISTER)
    record = import_templates if what == "template" else import_policies
    with _session(cfg, write=True) as session:
        try:
            done = record(session, files, by=by)
        except ImportRefused as err:
            # One line, whatever a parser's message held: FILE:LINE: reason.
            raise CliError(" ".join(str(err).split())) from None
    _emit(
        {"recorded": done.recorded, "unchanged": done.unchanged},
        args.json,
        lambda o: _imported(o, what),
    )
    return 0


def _imported(done: dict[str, list[str]], what: str) -> str:
    lines = [f"recorded {len(done['recorded'])} new {what} version(s), not activated"]
    lines += [f"  {name}" for name in done["recorded"]]
    if done["unchanged"]:
        lines.append(f"already recorded as they are (nothing to do): {len(done['unchanged'])}")
        lines += [f"  {name}" for name in done["unchanged"]]
    return "\n".join(lines)


# --- parsers ------------------------------------------------------------------------------


def register(add: Any) -> dict[str, Command]:
    """Add `template` and `policy` to the parser; return their commands by name."""
    pol = add(
        "policy",
        "list, show, import or activate policy versions",
        json_flag=False,
        example="herald policy activate 2026-12-07.1",
    )
    pol_sub = pol.add_subparsers(dest="policy_command", required=True, metavar="ACTION")
    action(
        pol_sub, "list", "every version with name, owner and dates", example="herald policy list"
    )
    pol_show = action(
        pol_sub,
        "show",
        "print one version's document",
        example="herald policy show 2026-12-01.1",
    )
    pol_show.add_argument("version", help="the policy version (`herald policy list`)")
    pol_act = action(
        pol_sub,
        "activate",
        "make a version the active one",
        example="herald policy activate 2026-12-01.1",
    )
    pol_act.add_argument("version", help="the policy version (`herald policy list`)")
    pol_imp = action(
        pol_sub,
        "import",
        "record the policy files at PATH (a file or a folder) as new versions, not activated",
        example="herald policy import policies/",
    )
    pol_imp.add_argument("path", metavar="PATH", help="a policy file (.toml) or a folder of them")

    tpl = add(
        "template",
        "list, show or import template versions, or activate one (rollback)",
        json_flag=False,
        example="herald template show class-opening",
    )
    tpl_sub = tpl.add_subparsers(dest="template_command", required=True, metavar="ACTION")
    tpl_list = action(
        tpl_sub,
        "list",
        "every version, with the active ones marked",
        example="herald template list --key order-created",
    )
    tpl_list.add_argument("--key", help="only this template key")
    tpl_show = action(
        tpl_sub,
        "show",
        "the variables a template needs (and may use), and its text",
        example="herald template show class-opening",
    )
    tpl_show.add_argument("key", help="template key, e.g. class-opening")
    tpl_show.add_argument(
        "--version", type=int, metavar="N", help="this version (default: the active ones)"
    )
    tpl_act = action(
        tpl_sub,
        "activate",
        "make a version active; activating an older one is a rollback",
        example="herald template activate order-created --version 1",
    )
    tpl_act.add_argument("key", help="template key, e.g. class-opening")
    tpl_act.add_argument("--version", type=int, required=True, metavar="N", help="the version")
    tpl_act.add_argument(
        "--channel", choices=CHANNEL_NAMES, help="only this channel (default: every channel)"
    )
    tpl_act.add_argument("--locale", help="only this locale (default: every locale)")

    tpl_imp = action(
        tpl_sub,
        "import",
        "record the catalog files at PATH (a file or a folder) as new versions, not activated",
        example="herald template import templates/",
    )
    tpl_imp.add_argument(
        "path", metavar="PATH", help="a template catalog (.toml) or a folder of them"
    )

    return {"policy": cmd_policy, "template": cmd_template}
