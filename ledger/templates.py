"""Template versions and policy versions as ledger rows.

Seeded from the packaged data files,
activated (or rolled back) by operators, never edited in place. Where the active policy
says so, a version becomes active only once a second principal has approved it
(ledger/version_review.py, domain.review).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, bindparam, select, update
from sqlalchemy.orm import Session

from domain import policy as domain_policy
from domain import review
from domain.principals import Principal
from domain.templates import TemplateVersion
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


def seed_templates(
    session: Session, versions: list[TemplateVersion], *, author: str | None = None
) -> int:
    """Insert versions not yet known; the newest of a new identity starts active.

    With no `author` (the packaged versions) they are recorded approved by the system
    principal; with one, they wait for review, and a new identity's version starts active
    only where no review applies to it (domain.review).
    """
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
                **_recorded_by(author),
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
                try:
                    activate_template(session, key, newest, channel=channel, locale=locale)
                except review.ReviewRefused:
                    pass  # waits for a second principal's approval; then it is activated
    return added


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
