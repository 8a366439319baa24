"""A recipient's page (a POST form: contact data never reaches a URL): consent and
suppressions, granted, revoked and lifted here."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from api.console import sessions
from api.console.deps import Reason, Who, checked
from api.console.rendering import page
from api.console.sessions import SignedIn
from api.deps import Ingress, IngressDep
from ledger import evidence
from ledger.read_models.recipient import recipient as read_recipient
from ledger.read_models.recipient import suppression_belongs_to

log = logging.getLogger("herald.console")
router = APIRouter(prefix="/console", include_in_schema=False)

RecipientRef = Annotated[str, Form(min_length=1, max_length=120)]


async def render_recipient(
    ingress: Ingress, request: Request, who: SignedIn, recipient_ref: str, notice: str | None = None
) -> HTMLResponse:
    data = await ingress.tx(lambda s: read_recipient(s, recipient_ref))
    return page(request, "recipient.html", who, r=data, notice=notice)


@router.post("/recipient", response_class=HTMLResponse)
async def recipient(
    request: Request,
    who: Who,
    recipient_ref: RecipientRef,
    ingress: IngressDep,
    csrf: Annotated[str | None, Form()] = None,
) -> HTMLResponse:
    checked(who, csrf, act=False)
    return await render_recipient(ingress, request, who, recipient_ref)


@router.post("/recipient/consent", response_class=HTMLResponse)
async def consent(
    request: Request,
    who: Who,
    recipient_ref: RecipientRef,
    reason: Reason,
    action: Annotated[str, Form(pattern="^(grant|revoke)$")],
    channel: Annotated[str, Form(pattern=r"^(sms|email|\*)$")],
    ingress: IngressDep,
    purpose: Annotated[str, Form(min_length=1, max_length=40)] = "service",
    csrf: Annotated[str | None, Form()] = None,
) -> HTMLResponse:
    checked(who, csrf, act=True)
    now = sessions.now()
    source = f"console:{who.principal.name}: {reason}"[:120]

    def work(session: Session) -> str:
        if action == "grant":
            evidence.record_consent_by(
                session,
                who.principal,
                recipient_ref=recipient_ref,
                channel=channel,
                purpose=purpose,
                source=source,
                at=now,
            )
            return f"Consent granted for {channel} ({purpose})."
        ended = evidence.revoke_consent_by(
            session,
            who.principal,
            recipient_ref=recipient_ref,
            channel=channel,
            purpose=purpose,
            source=source,
            at=now,
        )
        return f"Consent revoked for {channel} ({purpose}): {len(ended)} grant(s) ended."

    notice = await ingress.tx(work)
    log.info("console consent %s by %s (%s)", action, who.principal.name, channel)
    return await render_recipient(ingress, request, who, recipient_ref, notice)


@router.post("/recipient/lift", response_class=HTMLResponse)
async def lift(
    request: Request,
    who: Who,
    recipient_ref: RecipientRef,
    suppression_id: Annotated[int, Form()],
    reason: Reason,
    ingress: IngressDep,
    csrf: Annotated[str | None, Form()] = None,
) -> HTMLResponse:
    checked(who, csrf, act=True)
    now = sessions.now()

    def work(session: Session) -> str:
        if not suppression_belongs_to(session, suppression_id, recipient_ref):
            raise HTTPException(404, "no such suppression for this recipient")
        _, changed = evidence.lift_suppression_by(
            session,
            who.principal,
            suppression_id,
            source=f"operator:{who.principal.name}: {reason}"[:60],
            at=now,
        )
        return "Suppression lifted." if changed else "That suppression was already lifted."

    notice = await ingress.tx(work)
    log.info("console suppression %d lifted by %s", suppression_id, who.principal.name)
    return await render_recipient(ingress, request, who, recipient_ref, notice)
