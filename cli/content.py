"""`herald template` and `herald policy`: the versions of templates and policies in the ledger.

`list`, `versions`, `show`, `diff` and `preview` (a version rendered with sample variables,
refused as intake refuses an intent's; nothing sent, the preview audited without the
values); `import`: an adopter's own catalog or policy files (a file, or a folder of them),
recorded as new versions authored by the principal the command acts as, never activated;
`approve` and `refuse` (a second principal's verdict, never the author's) and `activate`
(a rollback is activating an older version), each recorded once, in the ledger's audit
trail, under the principal acting (an operator or an admin). Like the
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


def _policy_summary(row: Any) -> dict[str, Any]:
    return {
        "version": row.version,
        "name": row.name,
        "owner": row.owner,
        "effective_from": iso_utc(row.effective_from),
        "active": row.active,
        "sha256": row.sha256,
        "author": row.author,
        "approved_by": row.approved_by,
        "refused_by": row.refused_by,
    }


async def cmd_policy(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from sqlalchemy import select

    from ledger.models import PolicyVersion

    if args.policy_command == "list":
        with _session(cfg, write=False) as session:
            rows = session.execute(
                select(PolicyVersion).order_by(PolicyVersion.effective_from, PolicyVersion.version)
            ).scalars()
            out: Any = [_policy_summary(r) for r in rows]
        _emit(
            out,
            args.json,
            lambda o: _timed(
                args,
                o,
                ["version", "name", "owner", "effective_from", "active", "approved_by"],
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
            out = {**_policy_summary(row), "document": row.document}
        _emit(out, args.json, lambda o: o["document"].rstrip())
        return 0
    if args.policy_command == "diff":
        from ledger.version_review import policy_diff

        with _session(cfg, write=False) as session:
            text = _refusing(policy_diff, session, args.old, args.new, see="herald policy list")
        _emit(
            {"from": args.old, "to": args.new, "diff": text},
            args.json,
            lambda o: o["diff"] or f"policy {args.old} and {args.new}: the same document",
        )
        return 0
    return _policy_review(args, cfg)


def _policy_review(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    """`herald policy approve | refuse | activate VERSION`, as the principal acting."""
    from domain.principals import Access
    from ledger import templates, version_review
    from ledger.models import PolicyVersion

    _reason_given(args)
    by = acting(cfg, Access.REVIEW_CONTENT)
    at = datetime.now(UTC)
    with _session(cfg, write=True) as session:
        if args.policy_command == "activate":
            _refusing(templates.activate_policy, session, args.version, by=by, at=at)
            done = "is now active"
        elif args.policy_command == "approve":
            _refusing(version_review.approve_policy_version, session, args.version, by=by, at=at)
            done = f"is approved by {by.name}"
        else:
            _refusing(
                version_review.refuse_policy_version, session, args.version, by=by, at=at,
                reason=args.reason,
            )  # fmt: skip
            done = f"is refused by {by.name}: it never becomes active"
        session.flush()
        row = session.get(PolicyVersion, args.version)
        assert row is not None
        session.refresh(row)
        out = _policy_summary(row)
    _emit(out, args.json, lambda o: f"policy {o['version']} ({o['name']}) {done}")
    return 0


def _reason_given(args: argparse.Namespace) -> None:
    """A refusal's reason says why and names no one (every role reads the audit trail)."""
    from domain.key_privacy import NoteRefused, refuse_unfit_notes

    if getattr(args, "reason", None) is not None:
        try:
            refuse_unfit_notes({"reason": args.reason}, country=None)
        except NoteRefused as err:
            raise CliError(f"--{err}") from None


def _refusing(call: Any, *args: Any, see: str = "", **kwargs: Any) -> Any:
    """`call`, with a review rule's refusal and a missing version each one line.

    `see`: the command that lists what exists, named after a missing version.
    """
    from ledger.version_review import ReviewRefused

    try:
        return call(*args, **kwargs)
    except ReviewRefused as err:
        raise CliError(str(err)) from None
    except LookupError as err:  # NotFound, and activation's own LookupError
        raise CliError(str(err.args[0]) + (f" (see `{see}`)" if see else "")) from None


# --- template -----------------------------------------------------------------------------


def _template_summary(row: Any) -> dict[str, Any]:
    return {
        "key": row.key,
        "channel": row.channel,
        "locale": row.locale,
        "version": row.version,
        "active": row.active,
        "sha256": row.sha256,
        "created_at": iso_utc(row.created_at),
        "author": row.author,
        "approved_by": row.approved_by,
        "refused_by": row.refused_by,
    }


_COLUMNS = ["key", "channel", "locale", "version", "active", "created_at"]
_REVIEW_COLUMNS = [
    "channel", "locale", "version", "active", "author", "approved_by", "refused_by", "created_at"
]  # fmt: skip


async def cmd_template(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from sqlalchemy import select

    from ledger.models import TemplateVersionRow

    order = (
        TemplateVersionRow.key,
        TemplateVersionRow.channel,
        TemplateVersionRow.locale,
        TemplateVersionRow.version,
    )
    if args.template_command in ("list", "versions"):
        key = args.key
        with _session(cfg, write=False) as session:
            query = select(TemplateVersionRow).order_by(*order)
            if key:
                query = query.where(TemplateVersionRow.key == key)
            out = [_template_summary(r) for r in session.execute(query).scalars()]
        if args.template_command == "versions" and not out:
            raise CliError(f"no template {key!r} (see `herald template list`)")
        columns = _COLUMNS if args.template_command == "list" else _REVIEW_COLUMNS
        _emit(out, args.json, lambda o: _timed(args, o, columns, ("created_at",)))
        return 0
    if args.template_command == "show":
        return _template_show(args, cfg)
    if args.template_command == "import":
        return _import(args, cfg, "template")
    if args.template_command == "diff":
        return _template_diff(args, cfg)
    if args.template_command == "preview":
        return _template_preview(args, cfg)
    if args.template_command == "activate":
        return _template_activate(args, cfg)
    return _template_review(args, cfg)


def _template_activate(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    """Make a version active where it exists in scope; an earlier version is a rollback."""
    from sqlalchemy import select

    from domain.principals import Access
    from ledger.models import TemplateVersionRow
    from ledger.templates import activate_template

    version = args.version if args.version is not None else args.version_flag
    if version is None or args.version_flag not in (None, version):
        raise CliError("name the version once: `herald template activate KEY N`")
    by = acting(cfg, Access.REVIEW_CONTENT)
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
        having = {(r.channel, r.locale) for r in rows if r.version == version}
        missing = sorted(identities - having)
        if not having:
            known = sorted({r.version for r in rows})
            raise CliError(
                f"template {args.key!r} has no version {version} "
                f"(known versions: {', '.join(map(str, known))})"
            )
        if missing:
            raise CliError(
                f"template {args.key!r} version {version} does not exist for "
                + ", ".join(f"{c}/{loc}" for c, loc in missing)
                + "; pass --channel and --locale to activate it where it exists"
            )
        # The activation records its own audit event (`template.activate`, or
        # `template.rollback`) under the principal acting.
        _refusing(
            activate_template, session, args.key, version, channel=args.channel,
            locale=args.locale, by=by, at=datetime.now(UTC),
        )  # fmt: skip
        session.flush()
        out = [
            _template_summary(r)
            for r in session.execute(
                select(TemplateVersionRow)
                .where(*scope, TemplateVersionRow.active.is_(True))
                .order_by(TemplateVersionRow.channel, TemplateVersionRow.locale)
                .execution_options(populate_existing=True)
            ).scalars()
        ]
    _emit(
        out,
        args.json,
        lambda o: "active now:\n" + _timed(args, o, _COLUMNS, ("created_at",)),
    )
    return 0


def _template_review(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    """`herald template approve | refuse KEY N`: a second principal's verdict, audited."""
    from domain.principals import Access
    from ledger import version_review

    _reason_given(args)
    by = acting(cfg, Access.REVIEW_CONTENT)
    scope = {"channel": args.channel, "locale": args.locale}
    see = f"herald template versions {args.key}"
    at = datetime.now(UTC)
    with _session(cfg, write=True) as session:
        if args.template_command == "approve":
            rows = _refusing(
                version_review.approve_template_version, session, args.key, args.version,
                by=by, at=at, see=see, **scope,
            )  # fmt: skip
            done = f"approved by {by.name}"
        else:
            rows = _refusing(
                version_review.refuse_template_version, session, args.key, args.version,
                by=by, at=at, reason=args.reason, see=see, **scope,
            )  # fmt: skip
            done = f"refused by {by.name}: it never becomes active"
        out = [_template_summary(r) for r in rows]
    where = ", ".join(f"{r['channel']}/{r['locale']}" for r in out)
    _emit(out, args.json, lambda o: f"template {args.key!r} v{args.version} ({where}) {done}")
    return 0


def _template_diff(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from ledger.version_review import template_diff

    with _session(cfg, write=False) as session:
        found = _refusing(
            template_diff, session, args.key, args.old, args.new,
            see=f"herald template versions {args.key}",
        )  # fmt: skip
    out = {
        "key": args.key,
        "from": args.old,
        "to": args.new,
        "diffs": [
            {"channel": channel, "locale": locale, "diff": text}
            for (channel, locale), text in found.items()
        ],
    }
    _emit(
        out,
        args.json,
        lambda o: (
            "\n".join(d["diff"] for d in o["diffs"])
            or f"template {args.key!r} v{args.old} and v{args.new}: the same text"
        ),
    )
    return 0


def _sample_variables(args: argparse.Namespace) -> dict[str, Any]:
    """The preview's sample variables: `--vars-file`'s object, then each `--var` over it.

    A `--var` value that reads as JSON other than a string (a number, a list, an object)
    is taken as that, anything else as text: `--var qty=2`, `--var lines='["a", "b"]'`,
    `--var first_name=Ada`.
    """
    import json

    variables: dict[str, Any] = {}
    if args.vars_file:
        path = Path(args.vars_file).expanduser()
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except OSError as err:
            raise CliError(f"--vars-file {path}: cannot read it: {err.strerror or err}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise CliError(f"--vars-file {path}: not a JSON file ({err})") from None
        if not isinstance(loaded, dict):
            raise CliError(f"--vars-file {path}: must hold a JSON object of variables")
        variables.update(loaded)
    for given in args.var or []:
        name, sep, text = given.partition("=")
        if not sep or not name:
            raise CliError(f"--var {given!r}: write it as name=value")
        try:
            value: Any = json.loads(text)
        except json.JSONDecodeError:
            value = text
        variables[name] = text if isinstance(value, str) else value
    return variables


def _template_preview(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    """Render a version with sample variables, as an attempt would; nothing is sent."""
    from sqlalchemy import select

    from domain.policy import InvalidPolicyRequest
    from domain.principals import Access
    from domain.templates import TemplateError
    from ledger.models import TemplateVersionRow
    from ledger.version_review import preview_template

    variables = _sample_variables(args)
    by = acting(cfg, Access.READ_CONTENT)
    with _session(cfg, write=True) as session:
        scope = [TemplateVersionRow.key == args.key]
        if args.version is None:
            scope.append(TemplateVersionRow.active.is_(True))
        else:
            scope.append(TemplateVersionRow.version == args.version)
        if args.channel:
            scope.append(TemplateVersionRow.channel == args.channel)
        if args.locale:
            scope.append(TemplateVersionRow.locale == args.locale)
        rows = list(
            session.execute(
                select(TemplateVersionRow)
                .where(*scope)
                .order_by(TemplateVersionRow.channel, TemplateVersionRow.locale)
            ).scalars()
        )
        which = "an active version" if args.version is None else f"a version {args.version}"
        if not rows:
            raise CliError(
                f"template {args.key!r} has no {which.partition(' ')[2]}"
                + (f" for channel {args.channel!r}" if args.channel else "")
                + (f" in locale {args.locale!r}" if args.locale else "")
                + f" (see `herald template versions {args.key}`)"
            )
        if len(rows) > 1:
            choices = ", ".join(f"{r.channel}/{r.locale}" for r in rows)
            raise CliError(
                f"template {args.key!r} has {which} in {choices}: name one with --channel "
                "and --locale"
            )
        row = rows[0]
        try:
            shown = preview_template(
                session, args.key, row.version, channel=row.channel, locale=row.locale,
                variables=variables, region=args.region, category=args.category, by=by,
                at=datetime.now(UTC),
            )  # fmt: skip
        except (TemplateError, InvalidPolicyRequest) as err:
            raise CliError(" ".join(str(err).split())) from None
    out = {
        "key": shown.template_key,
        "version": shown.template_version,
        "channel": shown.channel,
        "locale": shown.locale,
        "subject": shown.subject,
        "text": shown.text,
        "sha256": shown.sha256,
        "encoding": shown.encoding,
        "segments": shown.segments,
        "links_added": [
            {"name": link.name, "where": link.where, "value": link.value} for link in shown.links
        ],
    }

    def render(o: dict[str, Any]) -> str:
        lines = [
            f"template {o['key']!r} v{o['version']} ({o['channel']}/{o['locale']}), "
            "rendered with the sample variables; nothing sent",
            f"encoding: {o['encoding']}"
            + (f", {o['segments']} segment(s)" if o["segments"] else ""),  # 0: email
            f"content hash: {o['sha256']}",
        ]
        lines += [
            f"added by Herald at send (no variable): {a['name']} ({a['where']}): {a['value']}"
            for a in o["links_added"]
        ]
        if o["subject"] is not None:
            lines.append(f"subject: {o['subject']}")
        return "\n".join(lines + ["| " + line for line in o["text"].splitlines()])

    _emit(out, args.json, render)
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
        "list, show, diff, import, approve, refuse or activate policy versions",
        json_flag=False,
        example="herald policy activate 2026-12-07.1",
    )
    pol_sub = pol.add_subparsers(dest="policy_command", required=True, metavar="ACTION")
    action(
        pol_sub,
        "list",
        "every version with name, owner, dates and who approved it",
        example="herald policy list",
    )
    pol_show = action(
        pol_sub,
        "show",
        "print one version's document",
        example="herald policy show 2026-12-01.1",
    )
    pol_show.add_argument("version", help="the policy version (`herald policy list`)")
    pol_diff = action(
        pol_sub,
        "diff",
        "what changes from policy version OLD to NEW (a unified diff of the documents)",
        example="herald policy diff 2026-12-01.1 2026-12-07.1",
    )
    pol_diff.add_argument("old", metavar="OLD", help="the version compared against")
    pol_diff.add_argument("new", metavar="NEW", help="the version read")
    pol_imp = action(
        pol_sub,
        "import",
        "record the policy files at PATH (a file or a folder) as new versions, not activated",
        example="herald policy import policies/",
    )
    pol_imp.add_argument("path", metavar="PATH", help="a policy file (.toml) or a folder of them")
    for name, help_text, example in (
        ("approve", "approve a version under review (never one you imported)", ""),
        (
            "refuse",
            "refuse a version under review, with a reason: it never becomes active",
            " --reason 'too strict'",
        ),
        ("activate", "make a version the active one (an earlier one: a rollback)", ""),
    ):
        review = action(
            pol_sub, name, help_text, example=f"herald policy {name} 2026-12-07.1{example}"
        )
        review.add_argument("version", help="the policy version (`herald policy list`)")
        if name == "refuse":
            review.add_argument("--reason", required=True, help="why, for the author to read")

    tpl = add(
        "template",
        "list, show, diff, preview or import template versions; approve, refuse or activate "
        "one (rollback)",
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
    tpl_versions = action(
        tpl_sub,
        "versions",
        "every version of one template: active, author, who approved or refused it",
        example="herald template versions order-created",
    )
    tpl_versions.add_argument("key", help="template key, e.g. order-created")
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
    tpl_diff = action(
        tpl_sub,
        "diff",
        "what changes from version OLD to NEW, per channel and locale (a unified diff)",
        example="herald template diff order-created 1 2",
    )
    tpl_diff.add_argument("key", help="template key, e.g. order-created")
    tpl_diff.add_argument("old", type=int, metavar="OLD", help="the version compared against")
    tpl_diff.add_argument("new", type=int, metavar="NEW", help="the version read")
    tpl_pre = action(
        tpl_sub,
        "preview",
        "render a version with sample variables as it would be sent; nothing is sent",
        example="herald template preview order-created --channel sms --vars-file sample.json",
    )
    tpl_pre.add_argument("key", help="template key, e.g. order-created")
    tpl_pre.add_argument(
        "--version", type=int, metavar="N", help="this version (default: the active one)"
    )
    tpl_pre.add_argument("--channel", choices=CHANNEL_NAMES, help="which channel's text")
    tpl_pre.add_argument("--locale", help="which locale's text")
    tpl_pre.add_argument(
        "--var",
        action="append",
        metavar="NAME=VALUE",
        help="a sample variable (repeat it); a value that reads as a JSON number, list or "
        "object is taken as one, anything else as text",
    )
    tpl_pre.add_argument(
        "--vars-file", metavar="FILE.json", help="sample variables as a JSON object"
    )
    tpl_pre.add_argument(
        "--region", default="default", help="the policy region whose footer the text gets"
    )
    tpl_pre.add_argument(
        "--category",
        default="transactional",
        choices=["transactional", "operational", "promotional"],
        help="message category (an email's unsubscribe link, the footer)",
    )
    for name, help_text, example in (
        ("approve", "approve a version under review (never one you imported)", ""),
        (
            "refuse",
            "refuse a version under review, with a reason: it never becomes active",
            " --reason 'typo in the subject'",
        ),
    ):
        review = action(
            tpl_sub, name, help_text, example=f"herald template {name} welcome 2{example}"
        )
        review.add_argument("key", help="template key, e.g. welcome")
        review.add_argument("version", type=int, metavar="N", help="the version")
        review.add_argument("--channel", choices=CHANNEL_NAMES, help="only this channel")
        review.add_argument("--locale", help="only this locale")
        if name == "refuse":
            review.add_argument("--reason", required=True, help="why, for the author to read")
    tpl_act = action(
        tpl_sub,
        "activate",
        "make a version active; activating an older one is a rollback",
        example="herald template activate order-created 1",
    )
    tpl_act.add_argument("key", help="template key, e.g. class-opening")
    tpl_act.add_argument("version", type=int, nargs="?", metavar="N", help="the version")
    tpl_act.add_argument(
        "--version",
        dest="version_flag",
        type=int,
        metavar="N",
        help="the version, as a flag (as before N could be given alone)",
    )
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
