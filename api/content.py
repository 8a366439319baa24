"""Template and policy versions over HTTP: read by apps and people, imported by admins.

`GET /v1/templates/{key}` is what an app needs to call a template: each version with the
JSON Schema of the variables it takes. An import's body is the file's text, in the format
of the packaged files (docs/templates.md, docs/domain.md "Policy documents"); it records
new versions authored by the caller and activates none. Importing the same text again is
a no-op (`unchanged`), so a retry is safe without an Idempotency-Key.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request

from api.auth import GUARDED, Administering, GuardedRoute, ReadingContent
from api.deps import IngressDep
from api.intents import BAD_BODY, INVALID, NOT_FOUND
from api.schemas import (
    ImportedView,
    PolicyDocumentView,
    PolicyListView,
    PolicyVersionView,
    TemplateListView,
    TemplateVersionView,
    TemplateView,
    domain_rule,
)
from domain.templates import KEY_PATTERN
from ledger import templates
from ledger.models import PolicyVersion
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
    rows = await ingress.tx(lambda s: versions.template_versions(s, key))
    return TemplateView(
        key=key,
        versions=[
            TemplateVersionView.model_validate(
                {**_columns(row), "recorded_at": row.created_at}, from_attributes=False
            )
            for row in rows
        ],
    )


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
        "recorded_at": row.created_at,
    }
