"""One intent: its timeline, and the actions on it (cancel, approve a resend, reveal
the destinations with a recorded reason)."""

from __future__ import annotations

import logging
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from api.console import attention, reads, sessions
from api.console.deps import Reason, Who, checked
from api.console.rendering import page
from api.console.sessions import SignedIn
from api.deps import Ingress, IngressDep
from domain import channels, key_privacy
from ledger import operator_actions, review_items, timeline
from ledger import repository as repo
from ledger.models import ReviewItem, intent_destination
from ledger.read_models import intent as intent_reads

log = logging.getLogger("herald.console")
ACTIONS = ("cancel", "approve-resend", "settle", "lookup", review_items.OPEN_REVIEW)
"""Actions whose latest record the page shows as a notice after the redirect (`done=`)."""
router = APIRouter(prefix="/console", include_in_schema=False)


@router.get("/intents/{intent_id}", response_class=HTMLResponse)
async def intent_page(
    request: Request,
    who: Who,
    ingress: IngressDep,
    done: Annotated[str | None, Query(max_length=40)] = None,
) -> HTMLResponse:
    return await render_intent(ingress, request, who, request.path_params["intent_id"], done=done)


async def render_intent(
    ingress: Ingress,
    request: Request,
    who: SignedIn,
    intent_id: str,
    *,
    done: str | None = None,
    revealed: dict[str, str] | None = None,
) -> HTMLResponse:
    if "\x00" in intent_id:
        raise HTTPException(404, "no such intent")

    def work(
        session: Session,
    ) -> tuple[dict[str, Any], list[ReviewItem], attention.Actions, dict[str, str]]:
        # Destinations masked as every surface masks them (domain.destinations.masked).
        doc = timeline.timeline(session, intent_id, cipher=ingress.client.cipher)
        shown = intent_reads.masked_destinations(
            session,
            doc["intent"]["id"],
            lambda ct, context: ingress.client.decrypt_field(ct, context=context),
        )
        return (
            doc,
            intent_reads.review_items_of(session, doc["intent"]["id"]),
            attention.applicable_actions(session, doc),
            shown,
        )

    try:
        doc, review, actions, destinations = await ingress.tx(work)
    except repo.NotFound as err:
        raise HTTPException(404, "no such intent") from err
    intent = doc["intent"]
    notice = None
    if done in ACTIONS and doc["operator_actions"]:
        last = [a for a in doc["operator_actions"] if a["action"] == done]
        if last:
            notice = last[-1]
    open_states = ("pending", "scheduled", "deferred", "sending", "sent")
    # Open, or waiting for an operator: a settle or a resend from elsewhere may land.
    live = intent["state"] in open_states or intent.get("awaiting") is not None
    return page(
        request,
        "intent.html",
        who,
        doc=doc,
        intent=intent,
        events=reads.events_of(doc),
        sentence=reads.outcome_sentence(doc),
        channels=[c for c in intent["channel_plan"]["channels"]],
        destinations=destinations,
        mask=reads.mask,
        revealed=revealed,
        notice=notice,
        review=review,
        actions=actions,
        set_titles=reads.SET_TITLES,
        refresh=revealed is None and live,
        temporal_url=_workflow_url(ingress, intent["workflow_id"]),
    )


@router.post("/intents/{intent_id}/cancel")
async def cancel(
    intent_id: str,
    who: Who,
    reason: Reason,
    ingress: IngressDep,
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    checked(who, csrf, act=True)
    try:
        await ingress.client.cancel(intent_id, by=who.principal, reason=reason)
    except repo.NotFound as err:
        raise HTTPException(404, "no such intent") from err
    except key_privacy.NoteRefused as err:
        raise HTTPException(422, str(err)) from err
    return RedirectResponse(f"/console/intents/{quote(intent_id)}?done=cancel", 303)


@router.post("/intents/{intent_id}/approve-resend")
async def approve_resend(
    intent_id: str,
    who: Who,
    reason: Reason,
    channel: Annotated[str, Form(pattern="^(sms|email)$")],
    ingress: IngressDep,
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    checked(who, csrf, act=True)
    try:
        await ingress.client.approve_resend(
            intent_id, channel=channel, by=who.principal, reason=reason
        )
    except repo.NotFound as err:
        raise HTTPException(404, "no such intent") from err
    except key_privacy.NoteRefused as err:
        raise HTTPException(422, str(err)) from err
    return RedirectResponse(f"/console/intents/{quote(intent_id)}?done=approve-resend", 303)


@router.post("/intents/{intent_id}/settle")
async def settle(
    intent_id: str,
    who: Who,
    reason: Reason,
    rule: Annotated[str, Form(min_length=1, max_length=60)],
    ingress: IngressDep,
    channel: Annotated[str, Form(pattern="^(sms|email)$")] = "sms",
    reference: Annotated[str, Form(max_length=200)] = "",
    back: Annotated[str, Form(pattern="^(intent|reconciliation)$")] = "intent",
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    """Settle the channel's unknown attempt under a rule: the same path as `herald settle`
    and the API (the workflow's `settle` update, with the signed-in principal's proof)."""
    checked(who, csrf, act=True)
    try:
        result = await ingress.client.settle(
            intent_id,
            channel=channel,
            rule=rule,
            reason=reason,
            reference=reference,
            by=who.principal,
        )
    except repo.NotFound as err:
        raise HTTPException(404, "no such intent") from err
    except key_privacy.NoteRefused as err:
        raise HTTPException(422, str(err)) from err
    log.info("console settle by %s: accepted=%s", who.principal.name, result.accepted)
    if back == "reconciliation":
        # Answered on the page it was sent from, accepted and refused told apart.
        said = {
            "row": f"intent {intent_id}: {result.message}",
            "outcome": "accepted" if result.accepted else "refused",
        }
        return RedirectResponse(f"/console/reconciliation?{urlencode(said)}#unknown_outcome", 303)
    return RedirectResponse(f"/console/intents/{quote(intent_id)}?done=settle", 303)


@router.post("/intents/{intent_id}/lookup")
async def lookup(
    intent_id: str,
    who: Who,
    ingress: IngressDep,
    channel: Annotated[str, Form(pattern="^(sms|email)$")] = "sms",
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    """Ask the provider what it holds for the attempt before deciding (recorded)."""
    checked(who, csrf, act=True)
    try:
        await ingress.client.lookup(intent_id, channel=channel, by=who.principal)
    except repo.NotFound as err:
        raise HTTPException(404, "no such intent") from err
    return RedirectResponse(f"/console/intents/{quote(intent_id)}?done=lookup", 303)


@router.post("/intents/{intent_id}/review")
async def open_review(
    intent_id: str,
    who: Who,
    reason: Reason,
    channel: Annotated[str, Form(pattern="^(sms|email)$")],
    ingress: IngressDep,
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    """Open a review item for the channel's latest attempt now, rather than wait for the
    sweep (`ledger.review_items`): recorded under the signed-in principal; refused (409,
    the page says why) when one is already open for it or its outcome is final."""
    checked(who, csrf, act=True)
    now = sessions.now()

    def work(session: Session) -> review_items.Opened:
        return review_items.open_review_item(
            session, intent_id=intent_id, channel=channel, reason=reason, by=who.principal, at=now
        )

    try:
        opened = await ingress.tx(work)
    except repo.NotFound as err:
        raise HTTPException(404, "no such intent") from err
    if opened.refused:
        raise HTTPException(
            409,
            f"no review item was opened: {opened.refused} (the refused request is in the "
            "intent's timeline; nothing else changed)",
        )
    log.info("console review item %s opened by %s", opened.item_id, who.principal.name)
    return RedirectResponse(
        f"/console/intents/{quote(intent_id)}?done={review_items.OPEN_REVIEW}", 303
    )


@router.post("/intents/{intent_id}/reveal", response_class=HTMLResponse)
async def reveal(
    request: Request,
    intent_id: str,
    who: Who,
    reason: Reason,
    ingress: IngressDep,
    csrf: Annotated[str | None, Form()] = None,
) -> HTMLResponse:
    """The destinations in clear, in this answer only, with the reveal recorded."""
    checked(who, csrf, act=True)
    now = sessions.now()

    def work(session: Session) -> dict[str, str]:
        intent = repo.get_intent(session, intent_id)
        shown = {
            channel: ingress.client.decrypt_field(ct, context=intent.business_key)
            for channel, ct in (
                (name, intent_destination(intent, name)[0]) for name in channels.NAMES
            )
            if ct
        }
        operator_actions.record_operator_action(
            session,
            intent_id=intent.id,
            action="reveal",
            operator=who.principal.name,
            operator_role=who.principal.role.value,
            reason=reason,
            outcome="accepted" if shown else "refused",
            at=now,
            detail={"channels": sorted(shown)} if shown else {"why": "purged"},
        )
        return shown

    try:
        shown = await ingress.tx(work)
    except repo.NotFound as err:
        raise HTTPException(404, "no such intent") from err
    log.info("console reveal by %s on intent %s", who.principal.name, intent_id)
    return await render_intent(ingress, request, who, intent_id, revealed=shown)


def _workflow_url(ingress: Ingress, workflow_id: str) -> str | None:
    if not ingress.temporal_ui_url:
        return None
    namespace = getattr(ingress.client.temporal, "namespace", "default")
    return (
        f"{ingress.temporal_ui_url.rstrip('/')}/namespaces/{quote(namespace, safe='')}"
        f"/workflows/{quote(workflow_id, safe='')}"
    )
