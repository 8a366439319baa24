"""The policy versions and the templates in force."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from api.console.deps import Who
from api.console.rendering import page
from api.deps import IngressDep
from ledger.read_models import versions

router = APIRouter(prefix="/console", include_in_schema=False)


@router.get("/policy", response_class=HTMLResponse)
async def policy(request: Request, who: Who, ingress: IngressDep) -> HTMLResponse:
    def work(session: Session) -> tuple[list[Any], list[Any]]:
        return versions.policies(session), versions.templates(session)

    policies, template_rows = await ingress.tx(work)
    return page(request, "policy.html", who, policies=policies, template_rows=template_rows)
