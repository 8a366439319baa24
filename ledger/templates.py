"""Template versions and policy versions as ledger rows.

Imported from files (the packaged ones first, on a fresh ledger; an adopter's own with
`herald template import` or `POST /v1/templates/import`), activated (or rolled back) by
operators, never edited in place: a version recorded again with the same content is a
no-op, with other content a refusal. Where the active policy says so, a version becomes
active only once a second principal has approved it (ledger/version_review.py,
domain.review).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, bindparam, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from domain import policy as domain_policy
from domain import review
from domain.principals import Principal
from domain.templates import TemplateError, TemplateVersion, parse_catalog
from domain.toml_lines import line_of
from ledger.models import PolicyVersion, TemplateVersionRow
from ledger.principals import record_audit
from ledger.transactions import rows_changed
from ledger.version_review import check_policy_activation, check_template_activation


def _recorded_by(author: str | None) -> dict[str, Any]:
    """The review columns of a new version.

    `author`'s, waiting for a reviewer; or, with no author (Herald's own seed), approved
    by the system principal.
    """
    if author is not None:
        return {"author": author}
    return {"approved_by": review.SYSTEM, "approved_at": datetime.now(UTC)}


class ImportRefused(ValueError):
    """A file refused, as ``FILE:LINE: reason``; nothing of the import is recorded."""


@dataclass(frozen=True)
class ContentFile:
    """One file to import: its name (how errors point at it) and its text."""

    name: str
    text: str


@dataclass
class Imported:
    """What an import did: the versions it recorded and those already recorded as they are."""

    recorded: list[str] = field(default_factory=list)
    """``order-created v3 (sms/en)`` or ``2026-12-09.1``."""
    unchanged: list[str] = field(default_factory=list)


def active_templates(
    session: Session, *, pinned: int | None = None, key: str | None = None
) -> list[TemplateVersion]:
    """Template versions, active or every one.

    Active versions, or every version when a pinned one is asked for; only `key`'s
    versions when a key is given.
    """
    # Read on every intent recorded and every attempt prepared: plain rows (Core), not
    # ORM entities, from statements built once.
    query = _TEMPLATE_QUERIES[(pinned is None, key is not None)]
    rows = session.execute(query, {"key": key} if key is not None else {})
    return [TemplateVersion(**row._asdict()) for row in rows]


def _template_query(active_only: bool, by_key: bool) -> Select[Any]:
    c = TemplateVersionRow.__table__.c
    query = select(
        c.key, c.version, c.channel, c.locale, c.body, c.subject, c.variables_schema.label("schema")
    )
    if active_only:
        query = query.where(c.active.is_(True))
    if by_key:
        query = query.where(c.key == bindparam("key"))
    return query


_TEMPLATE_QUERIES = {
    (active_only, by_key): _template_query(active_only, by_key)
    for active_only in (True, False)
    for by_key in (True, False)
}


def _template_name(tv: TemplateVersion) -> str:
    return f"{tv.key} v{tv.version} ({tv.channel}/{tv.locale})"


def _record_templates(
    session: Session,
    versions: list[tuple[TemplateVersion, str]],
    *,
    by: Principal | None,
    at: datetime,
    author: str | None = None,
) -> Imported:
    """Record each (version, where) not yet known; refuse one known with other content.

    The new versions' author is `by` (an import, audited) or `author`; with neither
    (Herald's own seed) they are recorded approved by the system principal.

    `where` is how a refusal points at the version (``catalog.toml:53``). A version known
    with the same text but no declared variables (recorded before versions declared them)
    gets its declarations: that is no change of what it sends.
    """
    rows = {
        (r.key, r.channel, r.locale, r.version): r
        for r in session.execute(select(TemplateVersionRow)).scalars()
    }
    done = Imported()
    new: list[TemplateVersion] = []
    # Every version is checked before any is added: a refusal leaves the session as it was.
    for tv, where in versions:
        row = rows.get((tv.key, tv.channel, tv.locale, tv.version))
        if row is None:
            new.append(tv)
            continue
        if (row.subject, row.body) != (tv.subject, tv.body) or (
            row.variables_schema is not None and row.variables_schema != tv.schema
        ):
            raise ImportRefused(
                f"{where}: template {_template_name(tv)} is already recorded with other "
                "content; a version is never edited: give the new one a new version number"
            )
        done.unchanged.append(_template_name(tv))
    for tv, _ in versions:
        row = rows.get((tv.key, tv.channel, tv.locale, tv.version))
        if row is not None and row.variables_schema is None and tv.schema is not None:
            row.variables_schema = dict(tv.schema)
    for tv in new:
        session.add(
            TemplateVersionRow(
                key=tv.key,
                channel=tv.channel,
                locale=tv.locale,
                version=tv.version,
                subject=tv.subject,
                body=tv.body,
                sha256=hashlib.sha256(f"{tv.subject}\n{tv.body}".encode()).hexdigest(),
                variables_schema=None if tv.schema is None else dict(tv.schema),
                **_recorded_by(by.name if by else author),
            )
        )
        done.recorded.append(_template_name(tv))
        if by is not None:
            record_audit(
                session,
                by=by,
                action="template.import",
                subject=f"{tv.key}@v{tv.version}",
                at=at,
                detail={"channel": tv.channel, "locale": tv.locale},
            )
    session.flush()
    return done


def seed_templates(
    session: Session, versions: list[TemplateVersion], *, author: str | None = None
) -> int:
    """Record versions not yet known; the newest of a new identity starts active.

    With no `author` (the packaged versions) they are recorded approved by the system
    principal; with one, they wait for review, and a new identity's version starts active
    only where no review applies to it (domain.review).

    Raises:
        ImportRefused: A packaged version is recorded with other content (a packaged
            version was edited in place instead of given a new number).
    """
    done = _record_templates(
        session,
        [(tv, "templates/catalog.toml") for tv in versions],
        by=None,
        at=_now(),
        author=author,
    )
    if done.recorded:
        for key, channel, locale in {(t.key, t.channel, t.locale) for t in versions}:
            if not session.execute(
                select(TemplateVersionRow.id).where(
                    TemplateVersionRow.key == key,
                    TemplateVersionRow.channel == channel,
                    TemplateVersionRow.locale == locale,
                    TemplateVersionRow.active.is_(True),
                )
            ).first():
                newest = max(
                    t.version
                    for t in versions
                    if (t.key, t.channel, t.locale) == (key, channel, locale)
                )
                try:
                    activate_template(session, key, newest, channel=channel, locale=locale)
                except review.ReviewRefused:
                    pass  # waits for a second principal's approval; then it is activated
    return len(done.recorded)


def _now() -> datetime:
    return datetime.now(UTC)


def import_templates(session: Session, files: list[ContentFile], *, by: Principal) -> Imported:
    """Record the template versions in an adopter's catalog files, authored by `by`.

    Every file is parsed and checked before anything is recorded, and a refusal raises out
    of the caller's transaction: an import is recorded whole or not at all. Versions are
    recorded, not activated (`activate_template`, after any review).

    Raises:
        ImportRefused: ``FILE:LINE: reason`` for a file that does not parse or check
            (`domain.templates.parse_catalog`), a version twice in one import, or a
            version already recorded with other content.
    """
    versions: list[tuple[TemplateVersion, str]] = []
    seen: dict[tuple[str, str, str, int], str] = {}
    for file in files:
        try:
            parsed = parse_catalog(file.text)
        except TemplateError as err:
            raise ImportRefused(f"{_at(file.name, err.line)}: {err}") from None
        for index, tv in enumerate(parsed):
            where = _at(file.name, line_of(file.text, ["template", index]))
            identity = (tv.key, tv.channel, tv.locale, tv.version)
            if identity in seen:
                raise ImportRefused(
                    f"{where}: template {_template_name(tv)} is also in {seen[identity]}"
                )
            seen[identity] = where
            versions.append((tv, where))
    if not versions:
        raise ImportRefused(f"{', '.join(f.name for f in files)}: no [[template]] in it")
    try:
        return _record_templates(session, versions, by=by, at=_now())
    except IntegrityError:
        raise _raced(files) from None


def import_policies(session: Session, files: list[ContentFile], *, by: Principal) -> Imported:
    """Record the policy versions in an adopter's policy files, authored by `by`.

    One version per file, named for the file's stem (as `HERALD_POLICY_NAME` names a
    file's); all or nothing, like `import_templates`. Versions are recorded, not
    activated.

    Raises:
        ImportRefused: ``FILE:LINE: reason`` for a file that does not parse or check
            (an unknown key, a broken rule), a version twice in one import, or a version
            already recorded with another document.
    """
    done = Imported()
    seen: dict[str, str] = {}
    new: list[tuple[domain_policy.Policy, ContentFile]] = []
    # Every file is checked before any version is added: a refusal leaves nothing behind.
    for file in files:
        try:
            parsed = domain_policy.load_policy(file.text)
        except domain_policy.PolicyError as err:
            line = _policy_line(file.text, str(err))
            raise ImportRefused(f"{_at(file.name, line)}: {err}") from None
        where = _at(file.name, line_of(file.text, ["version"]))
        if parsed.version in seen:
            raise ImportRefused(
                f"{where}: policy {parsed.version} is also in {seen[parsed.version]}"
            )
        seen[parsed.version] = where
        row = session.get(PolicyVersion, parsed.version)
        if row is None:
            new.append((parsed, file))
        elif row.document != file.text:
            raise ImportRefused(
                f"{where}: policy version {parsed.version} is already recorded with "
                "another document; a version is never edited: give the new one a new version"
            )
        else:
            done.unchanged.append(parsed.version)
    at = _now()
    for parsed, file in new:
        name = re.sub(r"\.toml$", "", file.name.replace("\\", "/").rsplit("/", 1)[-1])
        try:
            _add_policy(session, parsed, file.text, name=name[:60], author=by.name)
        except IntegrityError:
            raise _raced(files) from None
        record_audit(session, by=by, action="policy.import", subject=parsed.version, at=at)
        done.recorded.append(parsed.version)
    return done


def _raced(files: list[ContentFile]) -> ImportRefused:
    """Another import recorded one of the versions between our check and our insert."""
    return ImportRefused(
        f"{', '.join(f.name for f in files)}: another import recorded the same version at "
        "the same moment; nothing of this one was recorded: import again (a version now "
        "recorded as it is will be unchanged)"
    )


def _at(name: str, line: int | None) -> str:
    return name if line is None else f"{name}:{line}"


_TOML_LINE = re.compile(r"at line (\d+)")
_FIELD_PATH = re.compile(r"^([A-Za-z0-9_.*-]+): (?:unknown field '([^']+)')?")


def _policy_line(text: str, message: str) -> int | None:
    """The line a `PolicyError` is about: TOML's own, or where the field it names is."""
    if found := _TOML_LINE.search(message):
        return int(found[1])
    found = _FIELD_PATH.match(message)
    if found is None:
        return None
    path = [p for p in found[1].split(".") if p]
    if path[:1] == ["policy"]:
        path = path[1:]
    if found[2]:
        path.append(found[2])
    return line_of(text, path) if path else None


def _add_policy(
    session: Session, parsed: domain_policy.Policy, document: str, *, name: str, author: str | None
) -> None:
    session.add(
        PolicyVersion(
            version=parsed.version,
            name=name,
            document=document,
            sha256=hashlib.sha256(document.encode()).hexdigest(),
            owner=parsed.owner,
            effective_from=parsed.effective_from,
            **_recorded_by(author),
        )
    )
    session.flush()


def activate_template(
    session: Session,
    key: str,
    version: int,
    *,
    channel: str | None = None,
    locale: str | None = None,
    by: Principal | None = None,
    at: datetime | None = None,
) -> int:
    """Make `version` the active one (a rollback is activating an older version).

    `by` is the principal acting, recorded in an audit event (`template.activate`, or
    `template.rollback` when an identity had a later version active); None: Herald
    itself (the seed), or a surface that records its own.

    Raises:
        LookupError: No such version in the scope.
        ReviewRefused: The active policy's review covers the key and the version is not
            approved, or it was refused (the message says which and by whom).
    """
    scope = [TemplateVersionRow.key == key]
    if channel:
        scope.append(TemplateVersionRow.channel == channel)
    if locale:
        scope.append(TemplateVersionRow.locale == locale)
    rows = list(
        session.execute(
            select(TemplateVersionRow).where(*scope, TemplateVersionRow.version == version)
        ).scalars()
    )
    if not rows:
        raise LookupError(f"template {key!r} has no version {version}")
    check_template_activation(session, rows)
    identities = [(row.channel, row.locale) for row in rows]
    if by is not None:
        active_before = session.execute(
            select(TemplateVersionRow.version).where(*scope, TemplateVersionRow.active.is_(True))
        ).scalars()
        rolled_back = any(before > version for before in active_before)
        record_audit(
            session,
            by=by,
            action="template.rollback" if rolled_back else "template.activate",
            subject=f"{key}@v{version}",
            at=at or datetime.now(UTC),
            detail={"channels": sorted(f"{c}/{loc}" for c, loc in identities)},
        )
    # Only identities (channel, locale) that have this version switch; the others keep
    # their active version rather than being left with none.
    changed = 0
    for channel_, locale_ in identities:
        same = (
            TemplateVersionRow.key == key,
            TemplateVersionRow.channel == channel_,
            TemplateVersionRow.locale == locale_,
        )
        session.execute(update(TemplateVersionRow).where(*same).values(active=False))
        changed += rows_changed(
            session.execute(
                update(TemplateVersionRow)
                .where(*same, TemplateVersionRow.version == version)
                .values(active=True)
            )
        )
    return changed


def seed_policy(
    session: Session, document: str, *, name: str, activate: bool, author: str | None = None
) -> str:
    """Record a policy document as an immutable version; optionally make it the active one.

    With no `author` (Herald's packaged documents, a file `herald dev` is given, a
    scenario's) it is recorded approved by the system principal; with one, it waits for a
    second principal's review where the active policy asks for one.
    """
    parsed = domain_policy.load_policy(document)
    row = session.get(PolicyVersion, parsed.version)
    if row is None:
        _add_policy(session, parsed, document, name=name, author=author)
    elif row.document != document:
        raise ValueError(
            f"policy version {parsed.version} exists with a different document; "
            "policy versions are immutable, give the new one a new version"
        )
    if activate:
        activate_policy(session, parsed.version)
    return parsed.version


def activate_policy(
    session: Session, version: str, *, by: Principal | None = None, at: datetime | None = None
) -> None:
    """Make `version` the active policy (a rollback is activating an earlier one).

    `by` is recorded as `template.activate` is (`policy.activate`, or
    `policy.rollback` for a version recorded before the active one).

    Raises:
        LookupError: No such version in the ledger.
        ReviewRefused: The active policy's review covers policies and this version is not
            approved, or it was refused.
    """
    row = session.get(PolicyVersion, version)
    if row is None:
        raise LookupError(f"no policy version {version!r}")
    check_policy_activation(session, row)
    if by is not None:
        active = session.execute(
            select(PolicyVersion).where(PolicyVersion.active.is_(True))
        ).scalar_one_or_none()
        rolled_back = active is not None and active.created_at > row.created_at
        record_audit(
            session,
            by=by,
            action="policy.rollback" if rolled_back else "policy.activate",
            subject=version,
            at=at or datetime.now(UTC),
            detail={"from": active.version if active is not None else None},
        )
    session.execute(update(PolicyVersion).values(active=False))
    session.execute(
        update(PolicyVersion).where(PolicyVersion.version == version).values(active=True)
    )


def seed_packaged(session: Session, policy_name: str, *, switch: bool = False) -> None:
    """Load the packaged policies and templates; activate `policy_name` if none is active.

    `policy_name` is a packaged name or a policy file's path; a file is recorded too.
    With `switch`, also replace an active policy of another name, or of another version of
    a policy file (how the embedded stack moves between `default` and `demo` timings,
    or onto an edited file). `herald migrate` never switches: an operator's `herald policy
    activate` choice stands.

    Raises:
        FileNotFoundError: `policy_name` is neither packaged nor a readable file.
    """
    import policies
    import templates as packaged_templates

    seed_templates(session, packaged_templates.load_packaged())
    active = session.execute(
        select(PolicyVersion).where(PolicyVersion.active.is_(True))
    ).scalar_one_or_none()
    versions = {
        name: seed_policy(session, policies.load_packaged(name), name=name, activate=False)
        for name in policies.packaged_names()
    }
    from_file = policies.is_file(policy_name)
    chosen_name, chosen = policies.load(policy_name)
    version = (
        seed_policy(session, chosen, name=chosen_name, activate=False)
        if from_file
        else versions[chosen_name]
    )
    moved = active is not None and (
        active.name != chosen_name or (from_file and active.version != version)
    )
    if active is None or (switch and moved):
        activate_policy(session, version)
