"""The Templates and Policies pages: every version, its review, a diff, a preview, and the
forms that approve, refuse and activate one (docs/console.md, "Templates and policies").

The pages call the ledger's own paths (`ledger.version_review`, `ledger.templates`) as the
JSON API and the CLI do, so the review rules are the same everywhere: the author is
refused by the rule, not by a missing button, and the refusal's words are shown on the page.
Approving and refusing need the operator role (a second principal reads what it approves),
activating needs an admin (as `herald template activate` does). A preview's sample
variables may be a real person's data: they are posted, never put in a URL, and only the
fact of the preview (who, which version, the text's hash) is recorded.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from api.console import sessions
from api.console.deps import Reason, Who, checked
from api.console.rendering import page
from api.console.sessions import SignedIn
from api.deps import Ingress, IngressDep
from domain import review as rules
from domain.policy import CATEGORIES, REGIONS, InvalidPolicyRequest
from domain.preview import Preview
from domain.principals import Access
from domain.review import ReviewRefused, ReviewRule
from domain.template_variables import declared, sample
from domain.templates import TemplateError
from ledger import templates, version_review
from ledger.errors import NotFound
from ledger.models import PolicyVersion, TemplateVersionRow
from ledger.read_models import versions

log = logging.getLogger("herald.console")
router = APIRouter(prefix="/console", include_in_schema=False)


# --------------------------------------------------------------------------- words


def review_state(row: TemplateVersionRow | PolicyVersion, *, required: bool) -> str:
    """A version's review in words, as the pages show it."""
    if row.refused_by:
        return f"refused by {row.refused_by}"
    if row.approved_by == rules.SYSTEM:
        return "on record before review (approved by Herald)"
    if row.approved_by:
        return f"approved by {row.approved_by}"
    if required:
        return "waiting for review by a principal other than its author"
    return "not reviewed (the active policy does not require it)"


@dataclass(frozen=True)
class TemplateLine:
    """One template version in one channel and locale, as the pages list it."""

    row: TemplateVersionRow
    review: str
    variables: list[tuple[str, str]]
    """Each declared variable and its shape in words; empty for a version without a schema."""


def _line(row: TemplateVersionRow, rule: ReviewRule | None) -> TemplateLine:
    schema = row.variables_schema or {}
    shapes = [
        (name, str(schema["properties"][name].get("description", ""))) for name in declared(schema)
    ]
    required = rule is not None and rule.covers_template(row.key)
    return TemplateLine(row, review_state(row, required=required), shapes)


def _rule(session: Session) -> ReviewRule | None:
    ruling = version_review.active_rule(session)
    return ruling[0] if ruling else None


def _back(path: str, *, done: str = "", refused: str = "") -> RedirectResponse:
    """POST-redirect-GET: the page again, saying what happened (or why not)."""
    said = {"done": done} if done else {"refused": refused}
    return RedirectResponse(f"{path}?{urlencode(said)}", 303)


def _notices(request: Request) -> dict[str, Any]:
    return {
        "done": request.query_params.get("done"),
        "refused": request.query_params.get("refused"),
    }


def _may_review(who: SignedIn) -> bool:
    # As the API's and the CLI's approve, refuse and activate (docs/templates.md,
    # "Review and activation").
    return who.principal.may(Access.REVIEW_CONTENT)


# --------------------------------------------------------------------------- templates


@router.get("/policy")
async def policy(who: Who) -> Response:
    """The page this one grew out of: its address leads to the Policies page."""
    return RedirectResponse("/console/policies", 303)


@router.get("/templates", response_class=HTMLResponse)
async def template_list(request: Request, who: Who, ingress: IngressDep) -> HTMLResponse:
    def work(session: Session) -> dict[str, list[TemplateLine]]:
        rule = _rule(session)
        by_key: dict[str, list[TemplateLine]] = {}
        for row in versions.templates(session):
            by_key.setdefault(row.key, []).append(_line(row, rule))
        return by_key

    return page(request, "templates.html", who, by_key=await ingress.tx(work))


def _template_path(key: str, version: int) -> str:
    return f"/console/templates/{quote(key, safe='')}/versions/{version}"


async def _version_page(
    request: Request,
    who: SignedIn,
    ingress: Ingress,
    key: str,
    version: int,
    *,
    against: int | None = None,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    def work(session: Session) -> dict[str, Any]:
        rule = _rule(session)
        try:
            every = versions.template_versions(session, key)
        except NotFound as err:
            raise HTTPException(404, str(err)) from None
        lines = [_line(row, rule) for row in every if row.version == version]
        if not lines:
            raise HTTPException(404, f"template {key!r} has no version {version}")
        others = sorted({row.version for row in every if row.version != version})
        active = {(row.channel, row.locale): row.version for row in every if row.active}
        diff = None
        if against is not None:
            if against not in others:
                raise HTTPException(404, f"template {key!r} has no version {against} to compare")
            diff = version_review.template_diff(session, key, against, version)
        return {"lines": lines, "others": others, "diff": diff, "active": active}

    found = await ingress.tx(work)
    first = found["lines"][0].row
    return page(
        request,
        "template_version.html",
        who,
        status_code=status_code,
        key=key,
        version=version,
        against=against,
        path=_template_path(key, version),
        may_review=_may_review(who),
        authored=any(line.row.author == who.principal.name for line in found["lines"]),
        regions=REGIONS,
        categories=CATEGORIES,
        sample=json.dumps(sample(first.variables_schema or {}), indent=2, ensure_ascii=False),
        **found,
        **_notices(request),
        **context,
    )


@router.get("/templates/{key}/versions/{version}", response_class=HTMLResponse)
async def template_version(
    request: Request,
    key: str,
    version: int,
    who: Who,
    ingress: IngressDep,
    against: Annotated[int | None, Query()] = None,
) -> HTMLResponse:
    return await _version_page(request, who, ingress, key, version, against=against)


def _sample_variables(text: str) -> dict[str, object]:
    try:
        given = json.loads(text or "{}")
    except json.JSONDecodeError as err:
        raise TemplateError(
            f"the sample variables are not JSON: {err.msg} (line {err.lineno})"
        ) from None
    if not isinstance(given, dict):
        raise TemplateError('the sample variables must be a JSON object: {"name": value, ...}')
    return given


@router.post("/templates/{key}/versions/{version}/preview", response_class=HTMLResponse)
async def template_preview(
    request: Request,
    key: str,
    version: int,
    who: Who,
    ingress: IngressDep,
    identity: Annotated[str, Form(pattern=r"^[a-z]+/[A-Za-z0-9-]+$")],
    region: Annotated[str, Form(max_length=20)],
    category: Annotated[str, Form(max_length=40)],
    variables: Annotated[str, Form(max_length=20_000)] = "{}",
    against: Annotated[int | None, Form()] = None,
    csrf: Annotated[str | None, Form()] = None,
) -> HTMLResponse:
    """The version rendered with the posted sample variables, in this answer only (never a
    URL): nothing sent, the preview audited without the variables. The diff the page
    showed (`against`) stays beside it."""
    checked(who, csrf, act=True)
    channel, locale = identity.split("/", 1)
    now = sessions.now()

    def work(session: Session) -> Preview:
        return version_review.preview_template(
            session, key, version, channel=channel, locale=locale,
            variables=_sample_variables(variables), region=region, category=category,
            by=who.principal, at=now,
        )  # fmt: skip

    shown, refusal = None, None
    try:
        shown = await ingress.tx(work)
    except NotFound as err:
        raise HTTPException(404, str(err)) from None
    except (TemplateError, InvalidPolicyRequest) as err:
        refusal = str(err)
    log.info("console preview of %s v%d by %s", key, version, who.principal.name)
    return await _version_page(
        request, who, ingress, key, version, against=against,
        status_code=200 if shown else 422, preview=shown, preview_refused=refusal,
        posted={"identity": identity, "region": region, "category": category,
                "variables": variables},
    )  # fmt: skip


async def _decide(
    who: SignedIn, ingress: Ingress, path: str, act: Callable[[Session], Any], done: str
) -> Response:
    try:
        await ingress.tx(act)
    except (ReviewRefused, LookupError) as err:
        log.info("console review refused for %s: %s", who.principal.name, err)
        return _back(path, refused=str(err))
    log.info("console %s by %s", done, who.principal.name)
    return _back(path, done=done)


@router.post("/templates/{key}/versions/{version}/approve")
async def template_approve(
    key: str,
    version: int,
    who: Who,
    ingress: IngressDep,
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    _reviewing(who, csrf)
    now = sessions.now()
    return await _decide(
        who, ingress, _template_path(key, version),
        lambda s: version_review.approve_template_version(
            s, key, version, by=who.principal, at=now
        ),
        f"approved {key} v{version} as {who.principal.name}",
    )  # fmt: skip


@router.post("/templates/{key}/versions/{version}/refuse")
async def template_refuse(
    key: str,
    version: int,
    who: Who,
    reason: Reason,
    ingress: IngressDep,
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    _reviewing(who, csrf)
    now = sessions.now()
    return await _decide(
        who, ingress, _template_path(key, version),
        lambda s: version_review.refuse_template_version(
            s, key, version, by=who.principal, at=now, reason=reason
        ),
        f"refused {key} v{version} as {who.principal.name}: it never becomes active",
    )  # fmt: skip


def _reviewing(who: SignedIn, csrf: str | None) -> None:
    checked(who, csrf, act=False)
    if not _may_review(who):
        raise HTTPException(
            403,
            f"this needs an operator or an admin; {who.principal.name} is "
            f"{who.principal.role.value}",
        )


@router.post("/templates/{key}/versions/{version}/activate")
async def template_activate(
    key: str,
    version: int,
    who: Who,
    ingress: IngressDep,
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    _reviewing(who, csrf)
    now = sessions.now()
    return await _decide(
        who, ingress, _template_path(key, version),
        lambda s: templates.activate_template(s, key, version, by=who.principal, at=now),
        f"{key} v{version} is active where it exists (every channel and locale it has)",
    )  # fmt: skip


# --------------------------------------------------------------------------- policies


@dataclass(frozen=True)
class PolicyLine:
    row: PolicyVersion
    review: str


@router.get("/policies", response_class=HTMLResponse)
async def policy_list(
    request: Request,
    who: Who,
    ingress: IngressDep,
    old: Annotated[str | None, Query(max_length=60)] = None,
    new: Annotated[str | None, Query(max_length=60)] = None,
) -> HTMLResponse:
    def work(session: Session) -> tuple[list[PolicyLine], str | None]:
        ruling = version_review.active_rule(session)
        lines = [
            PolicyLine(
                row,
                review_state(
                    row, required=ruling is not None and ruling[0].policies and not row.active
                ),
            )
            for row in versions.policies(session)
        ]
        diff = None
        if old and new:
            try:
                diff = version_review.policy_diff(session, old, new)
            except NotFound as err:
                raise HTTPException(404, str(err)) from None
        return lines, diff

    lines, diff = await ingress.tx(work)
    return page(
        request, "policies.html", who, lines=lines, diff=diff, old=old, new=new,
        may_review=_may_review(who), **_notices(request),
    )  # fmt: skip


@router.post("/policies/{version}/approve")
async def policy_approve(
    version: str, who: Who, ingress: IngressDep, csrf: Annotated[str | None, Form()] = None
) -> Response:
    _reviewing(who, csrf)
    now = sessions.now()
    return await _decide(
        who, ingress, "/console/policies",
        lambda s: version_review.approve_policy_version(s, version, by=who.principal, at=now),
        f"approved policy {version} as {who.principal.name}",
    )  # fmt: skip


@router.post("/policies/{version}/refuse")
async def policy_refuse(
    version: str,
    who: Who,
    reason: Reason,
    ingress: IngressDep,
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    _reviewing(who, csrf)
    now = sessions.now()
    return await _decide(
        who, ingress, "/console/policies",
        lambda s: version_review.refuse_policy_version(
            s, version, by=who.principal, at=now, reason=reason
        ),
        f"refused policy {version} as {who.principal.name}: it never becomes active",
    )  # fmt: skip


@router.post("/policies/{version}/activate")
async def policy_activate(
    version: str, who: Who, ingress: IngressDep, csrf: Annotated[str | None, Form()] = None
) -> Response:
    _reviewing(who, csrf)
    now = sessions.now()
    return await _decide(
        who, ingress, "/console/policies",
        lambda s: templates.activate_policy(s, version, by=who.principal, at=now),
        f"policy {version} is active",
    )  # fmt: skip
