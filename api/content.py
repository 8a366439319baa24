"""Template and policy versions over HTTP: read by apps and people, imported by admins,
approved, refused and activated by operators.

`GET /v1/templates/{key}` is what an app needs to call a template: each version with the
JSON Schema of the variables it takes. An import's body is the file's text, in the format
of the packaged files (docs/templates.md, docs/domain.md "Policy documents"); it records
new versions authored by the caller and activates none. Importing the same text again is
a no-op (`unchanged`), so a retry is safe without an Idempotency-Key.

A preview renders a version with sample variables, refused as intake refuses an intent's
(422 on `variables`, naming the variable and its shape); nothing is sent, and the audit
event names the version and the text's hash, never the variables. Review follows the
active policy's `[review]` rules (ledger.version_review): a refusal of the rule (the
author approving their own version, a version under review activated) is a 409 with the
rule's words, not a 403, which says the caller's role may not call the route at all.
Approving or activating again is a no-op, so these too are safe to retry.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request
from sqlalchemy.orm import Session

from api.auth import GUARDED, Administering, GuardedRoute, ReadingContent, ReviewingContent
from api.deps import IngressDep
from api.intents import BAD_BODY, INVALID, NOT_FOUND
from api.schemas import (
    AddedLinkView,
    ChannelDiff,
    ImportedView,
    PolicyDiffView,
    PolicyDocumentView,
    PolicyListView,
    PolicyRefusalBody,
    PolicyVersionView,
    PreviewBody,
    PreviewView,
    Problem,
    RefusalBody,
    ReviewBody,
    TemplateDiffView,
    TemplateListView,
    TemplateVersionView,
    TemplateView,
    domain_rule,
)
from domain.policy import InvalidPolicyRequest
from domain.templates import KEY_PATTERN, TemplateError
from ledger import templates, version_review
from ledger.errors import NotFound
from ledger.models import PolicyVersion, TemplateVersionRow
from ledger.read_models import versions

router = APIRouter(
    prefix="/v1", tags=["templates"], route_class=GuardedRoute, responses={**GUARDED, **INVALID}
)

Key = Annotated[
    str, Path(pattern=KEY_PATTERN, description="The template's key, e.g. order-created.")
]
Version = Annotated[
    str,
    Path(pattern=KEY_PATTERN, description="The policy version, e.g. 2026-12-07.1."),
]
VERSION_MAX = 2**31 - 1
"""The ledger's integer: a larger version names nothing (and is a 422, not a fault)."""
Number = Annotated[int, Path(ge=1, le=VERSION_MAX, description="The template version, e.g. 2.")]
MISSING: dict[int | str, dict[str, Any]] = {
    404: {
        "model": Problem,
        "description": "No such template or version (in that channel or locale).",
    }
}
REVIEW_REFUSED: dict[int | str, dict[str, Any]] = {
    409: {
        "model": Problem,
        "description": "Refused by the review rules, `detail` in their words: the author "
        "may not approve their own version; a version approved or refused by someone else "
        "takes no other verdict; a version under review is not activated before its "
        'approval, nor a refused one ever (docs/templates.md, "Review and activation").',
    }
}

TOML_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The file's text (TOML, UTF-8), in the packaged files' format. "
        + domain_rule(
            "file.accepted",
            "the file parses and checks (templates compile in the sandbox and declare every "
            "variable they use; channels, locales and policy keys are known; rules are "
            "well formed) and no version in it is recorded with other content; refused "
            "as `body:LINE: reason`.",
        ),
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
}
REFUSED = (
    "The file was refused, nothing recorded: `msg` is `body:LINE: reason` (a template that "
    "does not compile, uses an undeclared variable, an unknown channel, locale or policy "
    "key, a broken rule, or a version already recorded with other content)."
)


@router.get("/templates", response_model=TemplateListView, summary="Every template key")
async def list_templates(_by: ReadingContent, ingress: IngressDep) -> TemplateListView:
    """Its channels, locales and the version active in each."""
    found = await ingress.tx(versions.template_summaries)
    return TemplateListView.model_validate({"items": found}, from_attributes=True)


@router.get(
    "/templates/{key}",
    response_model=TemplateView,
    summary="A template's versions, with the variables each takes (a JSON Schema)",
    responses=NOT_FOUND,
)
async def show_template(key: Key, _by: ReadingContent, ingress: IngressDep) -> TemplateView:
    return _template_view(key, await ingress.tx(lambda s: versions.template_versions(s, key)))


@router.post(
    "/templates/import",
    response_model=ImportedView,
    summary="Record the template versions of a catalog file (not activated)",
    responses={**BAD_BODY, 422: {**INVALID[422], "description": REFUSED}},
    openapi_extra=TOML_BODY,
)
async def import_templates(
    request: Request, by: Administering, ingress: IngressDep
) -> ImportedView:
    return await _import(request, ingress, lambda s, f: templates.import_templates(s, f, by=by))


@router.get(
    "/templates/{key}/versions/{version}",
    response_model=TemplateView,
    summary="One version of a template: each channel and locale's text and variables",
    responses=MISSING,
)
async def show_template_version(
    key: Key, version: Number, _by: ReadingContent, ingress: IngressDep
) -> TemplateView:
    rows = await ingress.tx(lambda s: _version_rows(s, key, version, None, None))
    return _template_view(key, rows)


@router.get(
    "/templates/{key}/versions/{version}/diff",
    response_model=TemplateDiffView,
    summary="What changes from another version to this one (a unified diff per channel)",
    responses=MISSING,
)
async def diff_template(
    key: Key,
    version: Number,
    _by: ReadingContent,
    ingress: IngressDep,
    since: Annotated[
        int, Query(alias="from", ge=1, le=VERSION_MAX, description="The version compared against.")
    ],
) -> TemplateDiffView:
    found = await ingress.tx(
        lambda s: _answer(version_review.template_diff, s, key, since, version)
    )
    return TemplateDiffView(
        key=key,
        from_version=since,
        to_version=version,
        diffs=[ChannelDiff(channel=c, locale=loc, diff=text) for (c, loc), text in found.items()],
    )


@router.post(
    "/templates/{key}/versions/{version}/preview",
    response_model=PreviewView,
    summary="Render a version with sample variables, as sent; nothing is sent",
    responses={**MISSING, **BAD_BODY},
)
async def preview_template(
    key: Key, version: Number, body: PreviewBody, by: ReadingContent, ingress: IngressDep
) -> PreviewView:
    def render(session: Session) -> Any:
        row = _one_row(_version_rows(session, key, version, body.channel, body.locale))
        return version_review.preview_template(
            session, key, version, channel=row.channel, locale=row.locale,
            variables=body.variables, region=body.region, category=body.category.value,
            by=by, at=datetime.now(UTC),
        )  # fmt: skip

    try:
        shown = await ingress.tx(render)
    except TemplateError as err:
        raise _invalid("variables", str(err)) from None
    except InvalidPolicyRequest as err:
        raise _invalid("region", str(err)) from None
    return PreviewView(
        key=shown.template_key,
        version=shown.template_version,
        channel=shown.channel,
        locale=shown.locale,
        subject=shown.subject,
        text=shown.text,
        sha256=shown.sha256,
        encoding=shown.encoding,
        segments=shown.segments,
        links_added=[AddedLinkView(name=a.name, where=a.where, value=a.value) for a in shown.links],
    )


@router.post(
    "/templates/{key}/versions/{version}/approve",
    response_model=TemplateView,
    summary="Approve a version under review (every channel and locale, or those named)",
    responses={**MISSING, **BAD_BODY, **REVIEW_REFUSED},
)
async def approve_template(
    key: Key,
    version: Number,
    by: ReviewingContent,
    ingress: IngressDep,
    body: ReviewBody | None = None,
) -> TemplateView:
    scope = body or ReviewBody()
    rows = await ingress.tx(
        lambda s: _answer(
            version_review.approve_template_version, s, key, version, by=by,
            at=datetime.now(UTC), channel=scope.channel, locale=scope.locale,
        )
    )  # fmt: skip
    return _template_view(key, rows)


@router.post(
    "/templates/{key}/versions/{version}/refuse",
    response_model=TemplateView,
    summary="Refuse a version under review, with a reason: it never becomes active",
    responses={**MISSING, **BAD_BODY, **REVIEW_REFUSED},
)
async def refuse_template(
    key: Key, version: Number, body: RefusalBody, by: ReviewingContent, ingress: IngressDep
) -> TemplateView:
    rows = await ingress.tx(
        lambda s: _answer(
            version_review.refuse_template_version, s, key, version, by=by,
            at=datetime.now(UTC), reason=body.reason, channel=body.channel, locale=body.locale,
        )
    )  # fmt: skip
    return _template_view(key, rows)


@router.post(
    "/templates/{key}/versions/{version}/activate",
    response_model=TemplateView,
    summary="Make a version active (every channel and locale, or those named); an earlier "
    "version is a rollback",
    responses={**MISSING, **BAD_BODY, **REVIEW_REFUSED},
)
async def activate_template(
    key: Key,
    version: Number,
    by: ReviewingContent,
    ingress: IngressDep,
    body: ReviewBody | None = None,
) -> TemplateView:
    scope = body or ReviewBody()

    def activate(session: Session) -> list[TemplateVersionRow]:
        _version_rows(session, key, version, scope.channel, scope.locale)  # 404 first
        _answer(
            templates.activate_template, session, key, version, channel=scope.channel,
            locale=scope.locale, by=by, at=datetime.now(UTC),
        )  # fmt: skip
        session.flush()
        return _version_rows(session, key, version, scope.channel, scope.locale)

    return _template_view(key, await ingress.tx(activate))


@router.get("/policies", response_model=PolicyListView, summary="Every policy version")
async def list_policies(_by: ReadingContent, ingress: IngressDep) -> PolicyListView:
    rows = await ingress.tx(versions.policy_versions)
    return PolicyListView(items=[PolicyVersionView.model_validate(_policy(r)) for r in rows])


@router.get(
    "/policies/{version}",
    response_model=PolicyDocumentView,
    summary="One policy version and its document",
    responses=NOT_FOUND,
)
async def show_policy(
    version: Version, _by: ReadingContent, ingress: IngressDep
) -> PolicyDocumentView:
    row = await ingress.tx(lambda s: versions.policy_version(s, version))
    return PolicyDocumentView.model_validate({**_policy(row), "document": row.document})


@router.get(
    "/policies/{version}/diff",
    response_model=PolicyDiffView,
    summary="What changes from another policy version to this one (a unified diff)",
    responses=NOT_FOUND,
)
async def diff_policy(
    version: Version,
    _by: ReadingContent,
    ingress: IngressDep,
    since: Annotated[
        str,
        Query(alias="from", pattern=KEY_PATTERN, description="The version compared against."),
    ],
) -> PolicyDiffView:
    text = await ingress.tx(lambda s: _answer(version_review.policy_diff, s, since, version))
    return PolicyDiffView(from_version=since, to_version=version, diff=text)


@router.post(
    "/policies/{version}/approve",
    response_model=PolicyVersionView,
    summary="Approve a policy version under review",
    responses={**NOT_FOUND, **REVIEW_REFUSED},
)
async def approve_policy(
    version: Version, by: ReviewingContent, ingress: IngressDep
) -> PolicyVersionView:
    row = await ingress.tx(
        lambda s: _answer(
            version_review.approve_policy_version, s, version, by=by, at=datetime.now(UTC)
        )
    )
    return PolicyVersionView.model_validate(_policy(row))


@router.post(
    "/policies/{version}/refuse",
    response_model=PolicyVersionView,
    summary="Refuse a policy version under review, with a reason: it never becomes active",
    responses={**NOT_FOUND, **BAD_BODY, **REVIEW_REFUSED},
)
async def refuse_policy(
    version: Version, body: PolicyRefusalBody, by: ReviewingContent, ingress: IngressDep
) -> PolicyVersionView:
    row = await ingress.tx(
        lambda s: _answer(
            version_review.refuse_policy_version, s, version, by=by, at=datetime.now(UTC),
            reason=body.reason,
        )
    )  # fmt: skip
    return PolicyVersionView.model_validate(_policy(row))


@router.post(
    "/policies/{version}/activate",
    response_model=PolicyVersionView,
    summary="Make a policy version the active one (an earlier one: a rollback)",
    responses={**NOT_FOUND, **REVIEW_REFUSED},
)
async def activate_policy(
    version: Version, by: ReviewingContent, ingress: IngressDep
) -> PolicyVersionView:
    def activate(session: Session) -> PolicyVersion:
        _answer(templates.activate_policy, session, version, by=by, at=datetime.now(UTC))
        session.flush()
        row = versions.policy_version(session, version)
        session.refresh(row)
        return row

    return PolicyVersionView.model_validate(_policy(await ingress.tx(activate)))


@router.post(
    "/policies/import",
    response_model=ImportedView,
    summary="Record the policy version of a policy file (not activated)",
    responses={**BAD_BODY, 422: {**INVALID[422], "description": REFUSED}},
    openapi_extra=TOML_BODY,
)
async def import_policies(request: Request, by: Administering, ingress: IngressDep) -> ImportedView:
    return await _import(request, ingress, lambda s, f: templates.import_policies(s, f, by=by))


async def _import(request: Request, ingress: IngressDep, record: Any) -> ImportedView:
    """Decode the body, import it as one file named `body`, and answer what was recorded."""
    try:
        text = (await request.body()).decode("utf-8")
    except UnicodeDecodeError:
        raise HTTPException(400, "the body is not UTF-8 text") from None
    file = templates.ContentFile("body", text)
    try:
        done = await ingress.tx(lambda s: record(s, [file]))
    except templates.ImportRefused as err:
        raise HTTPException(
            422, [{"loc": ["body"], "msg": str(err), "type": "invalid_request"}]
        ) from None
    return ImportedView(recorded=done.recorded, unchanged=done.unchanged)


def _answer(call: Any, *args: Any, **kwargs: Any) -> Any:
    """`call`, its refusals answered: a review rule's as 409, a missing version as 404.

    A template key and a policy version are no one's contact data: the 404 names them.
    """
    try:
        return call(*args, **kwargs)
    except version_review.ReviewRefused as err:
        raise HTTPException(409, str(err)) from None
    except LookupError as err:  # NotFound, and the activation's own LookupError
        raise HTTPException(404, str(err.args[0])) from None


def _version_rows(
    session: Session, key: str, version: int, channel: str | None, locale: str | None
) -> list[TemplateVersionRow]:
    """The rows of `key` version `version` in scope (channel, locale order); 404 if none."""
    rows = [
        row
        for row in versions.template_versions(session, key)
        if row.version == version
        and (channel is None or row.channel == channel)
        and (locale is None or row.locale == locale)
    ]
    if not rows:
        where = "".join(
            f" {name} {value!r}" for name, value in (("for", channel), ("in", locale)) if value
        )
        raise NotFound(
            f"template {key!r} has no version {version}{where}",
            answer=f"template {key!r} has no version {version}{where}",
        )
    return rows


def _one_row(rows: list[TemplateVersionRow]) -> TemplateVersionRow:
    """The one channel and locale a preview renders; 422 naming the choices if several."""
    if len(rows) > 1:
        choices = ", ".join(f"{row.channel}/{row.locale}" for row in rows)
        raise _invalid(
            "channel", f"the version has several channels or locales ({choices}): name one"
        )
    return rows[0]


def _invalid(field: str, msg: str) -> HTTPException:
    return HTTPException(422, [{"loc": ["body", field], "msg": msg, "type": "invalid_request"}])


def _template_view(key: str, rows: list[TemplateVersionRow]) -> TemplateView:
    return TemplateView(
        key=key,
        versions=[
            TemplateVersionView.model_validate(
                {**_columns(row), "recorded_at": row.created_at}, from_attributes=False
            )
            for row in rows
        ],
    )


def _columns(row: Any) -> dict[str, Any]:
    return {
        name: getattr(row, name)
        for name in (
            "version",
            "channel",
            "locale",
            "active",
            "subject",
            "body",
            "variables_schema",
            "sha256",
            "author",
            "approved_by",
            "refused_by",
        )
    }


def _policy(row: PolicyVersion) -> dict[str, Any]:
    return {
        "version": row.version,
        "name": row.name,
        "owner": row.owner,
        "effective_from": row.effective_from,
        "active": row.active,
        "sha256": row.sha256,
        "author": row.author,
        "approved_by": row.approved_by,
        "refused_by": row.refused_by,
        "recorded_at": row.created_at,
    }
