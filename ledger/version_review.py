"""Review of template and policy versions: approve, refuse, preview, diff, check activation.

The rules are domain.review's; this module reads the facts (the version rows, the active
policy's ``[review]`` table), writes the verdict onto the rows, and appends an audit event
for every step (`template.approve`, `policy.refuse`, `template.preview`, ...), naming
the principal and its role. An audit event holds no variable values: a preview's sample
variables may be real people's data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from domain import policy as domain_policy
from domain import preview as previews
from domain import review as rules
from domain.principals import Principal
from domain.review import ReviewRefused, ReviewRule, Verdict, VersionReview
from domain.templates import TemplateError, TemplateVersion
from ledger import repository as repo
from ledger.errors import NotFound
from ledger.models import PolicyVersion, TemplateVersionRow
from ledger.principals import record_audit

__all__ = [
    "ReviewRefused",
    "active_rule",
    "approve_policy_version",
    "approve_template_version",
    "check_policy_activation",
    "check_template_activation",
    "policy_diff",
    "preview_template",
    "record_preview",
    "refuse_policy_version",
    "refuse_template_version",
    "template_diff",
]


_ACTION = {Verdict.APPROVED: "approve", Verdict.REFUSED: "refuse"}
"""The audit event's verb, as the CLI's `policy.activate` and `template.activate` read."""


def active_rule(session: Session) -> tuple[ReviewRule, str] | None:
    """The active policy's review rule and its version; None while no policy is active.

    The rule in force when a version is activated decides, not the rule of the version
    being activated: a new policy cannot waive its own review.
    """
    try:
        version = repo.active_policy_version(session)
    except NotFound:
        return None  # a fresh ledger's first policy: nothing to review it against
    return domain_policy.load_policy(repo.policy_document(session, version)).review, version


def _what(row: TemplateVersionRow) -> str:
    return f"template {row.key!r} v{row.version} ({row.channel}/{row.locale})"


def _review_of(row: TemplateVersionRow | PolicyVersion, what: str) -> VersionReview:
    return VersionReview(what, row.author, row.approved_by, row.refused_by)


def _template_rows(
    session: Session,
    key: str,
    version: int,
    channel: str | None,
    locale: str | None,
    *,
    lock: bool = False,
) -> list[TemplateVersionRow]:
    """The version's rows in scope; NotFound if none.

    Locked when a verdict will be written on them: two reviewers at once give one
    verdict, and the second is told who gave it.
    """
    scope = [TemplateVersionRow.key == key, TemplateVersionRow.version == version]
    if channel:
        scope.append(TemplateVersionRow.channel == channel)
    if locale:
        scope.append(TemplateVersionRow.locale == locale)
    query = (
        select(TemplateVersionRow)
        .where(*scope)
        .order_by(TemplateVersionRow.channel, TemplateVersionRow.locale)
    )
    rows = list(session.execute(query.with_for_update() if lock else query).scalars())
    if not rows:
        where = "".join(f" {name} {value!r}" for name, value in (("for", channel), ("in", locale)))
        raise NotFound(f"template {key!r} has no version {version}{where.rstrip()}")
    return rows


def _policy_row(session: Session, version: str, *, lock: bool = False) -> PolicyVersion:
    row = session.get(PolicyVersion, version, with_for_update=lock)
    if row is None:
        raise NotFound(f"no policy version {version!r}")
    return row


def _give(
    rows: Sequence[TemplateVersionRow | PolicyVersion],
    whats: Sequence[str],
    verdict: Verdict,
    by: Principal,
    at: datetime,
) -> bool:
    """Write `verdict` onto every row, all or none; whether any row changed."""
    before = [_review_of(row, what) for row, what in zip(rows, whats, strict=True)]
    # Every row is judged before any is written: one refused, none changes.
    after = [rules.review(current, verdict, by.name) for current in before]
    changed = False
    for row, was, now in zip(rows, before, after, strict=True):
        if now == was:
            continue  # the same verdict again, by the same principal: nothing to write
        changed = True
        if verdict is Verdict.APPROVED:
            row.approved_by, row.approved_at = by.name, at
        else:
            row.refused_by, row.refused_at = by.name, at
    return changed


def _review_template(
    session: Session,
    key: str,
    version: int,
    verdict: Verdict,
    *,
    by: Principal,
    at: datetime,
    channel: str | None,
    locale: str | None,
    reason: str,
) -> list[TemplateVersionRow]:
    rows = _template_rows(session, key, version, channel, locale, lock=True)
    if _give(rows, [_what(row) for row in rows], verdict, by, at):
        detail: dict[str, Any] = {
            "channels": sorted({f"{row.channel}/{row.locale}" for row in rows}),
            "authors": sorted({row.author or rules.SYSTEM for row in rows}),
        }
        if reason:
            detail["reason"] = reason
        record_audit(
            session, by=by, action=f"template.{_ACTION[verdict]}", subject=f"{key}@v{version}",
            at=at, detail=detail,
        )  # fmt: skip
    session.flush()
    return rows


def approve_template_version(
    session: Session,
    key: str,
    version: int,
    *,
    by: Principal,
    at: datetime,
    channel: str | None = None,
    locale: str | None = None,
) -> list[TemplateVersionRow]:
    """Approve a template version (every channel and locale it has, or those named).

    Raises:
        NotFound: No such version (in that channel or locale).
        ReviewRefused: `by` is its author, or it was already approved or refused by
            someone else. Approving again by the same principal changes nothing.
    """
    return _review_template(
        session, key, version, Verdict.APPROVED, by=by, at=at, channel=channel, locale=locale,
        reason="",
    )  # fmt: skip


def refuse_template_version(
    session: Session,
    key: str,
    version: int,
    *,
    by: Principal,
    at: datetime,
    reason: str,
    channel: str | None = None,
    locale: str | None = None,
) -> list[TemplateVersionRow]:
    """Refuse a template version: it never becomes active. Raises as the approval does."""
    return _review_template(
        session, key, version, Verdict.REFUSED, by=by, at=at, channel=channel, locale=locale,
        reason=reason,
    )  # fmt: skip


def _review_policy(
    session: Session, version: str, verdict: Verdict, *, by: Principal, at: datetime, reason: str
) -> PolicyVersion:
    row = _policy_row(session, version, lock=True)
    if _give([row], [f"policy {version!r}"], verdict, by, at):
        detail: dict[str, Any] = {"author": row.author or rules.SYSTEM, "sha256": row.sha256}
        if reason:
            detail["reason"] = reason
        record_audit(
            session,
            by=by,
            action=f"policy.{_ACTION[verdict]}",
            subject=version,
            at=at,
            detail=detail,
        )
    session.flush()
    return row


def approve_policy_version(
    session: Session, version: str, *, by: Principal, at: datetime
) -> PolicyVersion:
    """Approve a policy version.

    Raises:
        NotFound: No such version.
        ReviewRefused: `by` is its author, or it was already approved or refused by
            someone else. Approving again by the same principal changes nothing.
    """
    return _review_policy(session, version, Verdict.APPROVED, by=by, at=at, reason="")


def refuse_policy_version(
    session: Session, version: str, *, by: Principal, at: datetime, reason: str
) -> PolicyVersion:
    """Refuse a policy version: it never becomes active. Raises as the approval does."""
    return _review_policy(session, version, Verdict.REFUSED, by=by, at=at, reason=reason)


def check_template_activation(session: Session, rows: Sequence[TemplateVersionRow]) -> None:
    """Raise ReviewRefused, naming what is missing, if any of `rows` may not become active."""
    ruling = active_rule(session)
    # In a fixed order, so the refusal names the same identity every time.
    for row in sorted(rows, key=lambda r: (r.channel, r.locale)):
        required = ruling is not None and ruling[0].covers_template(row.key)
        where = f"[review] templates of policy {ruling[1]}" if ruling else ""
        refusal = rules.activation_refusal(
            _review_of(row, _what(row)), required=required, rule=where
        )
        if refusal:
            raise ReviewRefused(refusal)


def check_policy_activation(session: Session, row: PolicyVersion) -> None:
    """Raise ReviewRefused, naming what is missing, if policy `row` may not become active."""
    ruling = active_rule(session)
    required = ruling is not None and ruling[0].policies and ruling[1] != row.version
    where = f"[review] policies of policy {ruling[1]}" if ruling else ""
    refusal = rules.activation_refusal(
        _review_of(row, f"policy {row.version!r}"), required=required, rule=where
    )
    if refusal:
        raise ReviewRefused(refusal)


def record_preview(
    session: Session,
    *,
    by: Principal,
    at: datetime,
    key: str,
    version: int,
    channel: str,
    locale: str,
    content_sha256: str,
) -> None:
    """Append the audit event of a preview: who looked at which version, nothing sent.

    The sample variables are not recorded, nor the rendered text: either may hold a real
    person's data. The content hash says which text was seen without repeating it.
    """
    record_audit(
        session,
        by=by,
        action="template.preview",
        subject=f"{key}@v{version}",
        at=at,
        detail={"channel": channel, "locale": locale, "sha256": content_sha256},
    )


def _as_version(row: TemplateVersionRow) -> TemplateVersion:
    return TemplateVersion(
        row.key, row.version, row.channel, row.locale, row.body, row.subject,
        row.variables_schema,
    )  # fmt: skip


def preview_template(
    session: Session,
    key: str,
    version: int,
    *,
    channel: str,
    locale: str,
    variables: Mapping[str, object],
    region: str,
    category: str,
    by: Principal,
    at: datetime,
) -> previews.Preview:
    """Render one version with sample variables, and record who looked.

    As an intent in `region` and `category` would get it: the active policy's footer for
    them included. Nothing is sent. The audit event names the version and the rendered text's hash,
    never the variables (they may be a real person's).

    Raises:
        NotFound: No such version in that channel and locale.
        TemplateError: Sample variables missing (all named) or of the wrong shape (each
            named with the shape its declaration asks for, as intake names them).
        domain.policy.InvalidPolicyRequest: No rule for that region and category.
    """
    row = _template_rows(session, key, version, channel, locale)[0]
    footer = None
    ruling = active_rule(session)
    if ruling is not None:
        active = domain_policy.load_policy(repo.policy_document(session, ruling[1]))
        footer = active.rule_for(region, channel, category).footer
    shown = previews.preview(_as_version(row), variables, category=category, footer=footer)
    record_preview(
        session, by=by, at=at, key=key, version=version, channel=row.channel, locale=row.locale,
        content_sha256=shown.sha256,
    )  # fmt: skip
    return shown


def template_diff(session: Session, key: str, old: int, new: int) -> dict[tuple[str, str], str]:
    """The unified diff of template `key` from version `old` to `new`, per (channel, locale).

    Raises:
        NotFound: The key has neither version.
    """
    rows = session.execute(
        select(TemplateVersionRow).where(
            TemplateVersionRow.key == key, TemplateVersionRow.version.in_((old, new))
        )
    ).scalars()
    try:
        return previews.diff_template_versions([_as_version(r) for r in rows], key, old, new)
    except TemplateError as err:
        raise NotFound(str(err)) from None


def policy_diff(session: Session, old: str, new: str) -> str:
    """The unified diff of policy document `old` to `new`; NotFound names a missing one."""
    return previews.diff_policies(
        old, _policy_row(session, old).document, new, _policy_row(session, new).document
    )
