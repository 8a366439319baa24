"""Template versions and policy versions as ledger rows.

Seeded from the packaged data files,
activated (or rolled back) by operators, never edited in place.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import Select, bindparam, select, update
from sqlalchemy.orm import Session

from domain import policy as domain_policy
from domain.templates import TemplateVersion
from ledger.models import PolicyVersion, TemplateVersionRow
from ledger.transactions import rows_changed


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
    query = select(c.key, c.version, c.channel, c.locale, c.body, c.subject)
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


def seed_templates(session: Session, versions: list[TemplateVersion]) -> int:
    """Insert packaged versions not yet known; the newest of each identity starts active."""
    known = {
        (r.key, r.channel, r.locale, r.version)
        for r in session.execute(select(TemplateVersionRow)).scalars()
    }
    added = 0
    for tv in versions:
        if (tv.key, tv.channel, tv.locale, tv.version) in known:
            continue
        session.add(
            TemplateVersionRow(
                key=tv.key,
                channel=tv.channel,
                locale=tv.locale,
                version=tv.version,
                subject=tv.subject,
                body=tv.body,
                sha256=hashlib.sha256(f"{tv.subject}\n{tv.body}".encode()).hexdigest(),
            )
        )
        added += 1
    session.flush()
    if added:
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
                activate_template(session, key, newest, channel=channel, locale=locale)
    return added


def activate_template(
    session: Session,
    key: str,
    version: int,
    *,
    channel: str | None = None,
    locale: str | None = None,
) -> int:
    """Make `version` the active one (a rollback is activating an older version)."""
    scope = [TemplateVersionRow.key == key]
    if channel:
        scope.append(TemplateVersionRow.channel == channel)
    if locale:
        scope.append(TemplateVersionRow.locale == locale)
    identities = session.execute(
        select(TemplateVersionRow.channel, TemplateVersionRow.locale).where(
            *scope, TemplateVersionRow.version == version
        )
    ).all()
    if not identities:
        raise LookupError(f"template {key!r} has no version {version}")
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


def seed_policy(session: Session, document: str, *, name: str, activate: bool) -> str:
    """Record a policy document as an immutable version; optionally make it the active one."""
    parsed = domain_policy.load_policy(document)
    row = session.get(PolicyVersion, parsed.version)
    if row is None:
        session.add(
            PolicyVersion(
                version=parsed.version,
                name=name,
                document=document,
                sha256=hashlib.sha256(document.encode()).hexdigest(),
                owner=parsed.owner,
                effective_from=parsed.effective_from,
            )
        )
        session.flush()
    elif row.document != document:
        raise ValueError(
            f"policy version {parsed.version} exists with a different document; "
            "policy versions are immutable, give the new one a new version"
        )
    if activate:
        activate_policy(session, parsed.version)
    return parsed.version


def activate_policy(session: Session, version: str) -> None:
    """Make `version` the active policy; raise NotFound if it is not in the ledger."""
    if session.get(PolicyVersion, version) is None:
        raise LookupError(f"no policy version {version!r}")
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
