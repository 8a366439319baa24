"""The reconciliation sets, and resolving a review item."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import update
from sqlalchemy.orm import Session

from api.console import reads, sessions
from api.console.deps import Reason, Who, checked
from api.console.rendering import page
from api.deps import IngressDep
from ledger.models import ReviewItem
from ledger.principals import record_audit

log = logging.getLogger("herald.console")
router = APIRouter(prefix="/console", include_in_schema=False)


@router.get("/reconciliation", response_class=HTMLResponse)
async def reconciliation(request: Request, who: Who, ingress: IngressDep) -> HTMLResponse:
    now = sessions.now()
    sets = await ingress.tx(lambda s: reads.reconciliation(s, now))
    return page(
        request,
        "reconciliation.html",
        who,
        sets=sets,
        open_total=sum(s.count for s in sets),
        shown=reads.MEMBERS_SHOWN,
    )


@router.post("/review-items/{item_id}/resolve")
async def resolve(
    item_id: int,
    who: Who,
    note: Reason,
    ingress: IngressDep,
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    checked(who, csrf, act=True)
    now = sessions.now()

    def work(session: Session) -> int:
        changed: int = session.execute(
            update(ReviewItem)
            .where(ReviewItem.id == item_id, ReviewItem.resolved_at.is_(None))
            .values(resolved_at=now, resolved_by=who.principal.name, resolution_note=note)
        ).rowcount  # type: ignore[attr-defined]
        if changed:
            record_audit(
                session,
                by=who.principal,
                action="review_item.resolved",
                subject=f"review_item:{item_id}",
                at=now,
                detail={"note": note},
            )
        return changed

    changed = await ingress.tx(work)
    log.info("review item %d resolved by %s (changed=%s)", item_id, who.principal.name, changed)
    return RedirectResponse("/console/reconciliation", 303)
