"""The reconciliation sets, and resolving a review item."""

from __future__ import annotations

import logging
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from api.console import reads, sessions
from api.console.deps import Reason, Who, checked
from api.console.rendering import page
from api.deps import IngressDep
from domain import key_privacy
from ledger import reconcile, review_items, settlements
from ledger.read_models.reconciliation import MEMBERS_SHOWN, ReviewSet, review_sets

log = logging.getLogger("herald.console")
router = APIRouter(prefix="/console", include_in_schema=False)


@router.get("/reconciliation", response_class=HTMLResponse)
async def reconciliation(request: Request, who: Who, ingress: IngressDep) -> HTMLResponse:
    now = sessions.now()

    def work(session: Session) -> tuple[list[ReviewSet], list[dict[str, Any]], int]:
        _, policy = settlements.active_settlement_policy(session)
        return (
            review_sets(session),
            [r.as_dict() for r in policy.rules],
            len(settlements.unknown_members(session)),
        )

    found, rules, settleable = await ingress.tx(work)
    sets = reads.reconciliation(found, now)
    return page(
        request,
        "reconciliation.html",
        who,
        sets=sets,
        open_total=sum(s.count for s in sets),
        shown=MEMBERS_SHOWN,
        rules=rules,
        settleable=settleable,
        bulk=request.query_params.get("bulk"),
        row=request.query_params.get("row"),
        row_outcome=(
            "accepted" if request.query_params.get("outcome") == "accepted" else "refused"
        ),
    )


@router.post("/reconciliation/sweep")
async def sweep_now(
    who: Who, ingress: IngressDep, csrf: Annotated[str | None, Form()] = None
) -> Response:
    """Run the reconcile sweep now, on demand (the schedule runs it every 5 minutes):
    file what it finds, close the items a later observation settled."""
    checked(who, csrf, act=True)
    now = sessions.now()

    def work(session: Session) -> str:
        rows = reconcile.find(session, now=now)
        filed = review_items.record_review_items(session, rows, now)
        closed = review_items.close_settled_items(session, at=now)
        return f"the sweep found {len(rows)}, filed {filed} new and closed {len(closed)} settled"

    outcome = await ingress.tx(work)
    log.info("console sweep by %s: %s", who.principal.name, outcome)
    return RedirectResponse(f"/console/reconciliation?{urlencode({'bulk': outcome})}", 303)


@router.post("/reconciliation/unknown_outcome/settle")
async def settle_set(
    who: Who,
    reason: Reason,
    rule: Annotated[str, Form(min_length=1, max_length=60)],
    confirm: Annotated[int, Form(ge=0)],
    ingress: IngressDep,
    reference: Annotated[str, Form(max_length=200)] = "",
    lookup: Annotated[bool, Form()] = False,
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    """Settle every member of the unknown-outcome set under one rule, each through its
    workflow; `confirm` is the count the operator saw (a changed set settles nothing)."""
    checked(who, csrf, act=True)
    try:
        done = await ingress.client.settle_set(
            rule=rule,
            reason=reason,
            reference=reference,
            by=who.principal,
            confirm=confirm,
            lookup=lookup,
        )
    except key_privacy.NoteRefused as err:
        raise HTTPException(422, str(err)) from err
    if done.refused_all:
        outcome = done.refused_all
    else:
        outcome = f"settled {len(done.settled)} of {done.members} under {rule}" + (
            f"; {len(done.refused)} refused (each intent's timeline says why)"
            if done.refused
            else ""
        )
    log.info("console bulk settle by %s: %s", who.principal.name, outcome)
    return RedirectResponse(
        f"/console/reconciliation?{urlencode({'bulk': outcome})}#unknown_outcome", 303
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
    changed = await ingress.tx(
        lambda s: review_items.resolve(s, item_id, by=who.principal, note=note, at=now)
    )
    if not changed:
        # No such item, or already closed: say so rather than pretend it was resolved.
        raise HTTPException(404, f"no open review item {item_id}")
    log.info("review item %d resolved by %s (changed=1)", item_id, who.principal.name)
    return RedirectResponse("/console/reconciliation", 303)
