"""The operator console's routes: server-rendered pages under /console.

A presentation layer only: pages read `api.console.reads` (over the ledger's read models)
and actions go through the same paths as the JSON API (`HeraldClient.cancel` and
`approve_resend`, `ledger.evidence`), so there is one set of rules. Contact data never
reaches a URL: the recipient search and the recipient's page are POST forms, and a
destination is shown only in the answer to a reveal that names its reason.
"""

import asyncio
import logging
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Form, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from fastapi.templating import Jinja2Templates
from sqlalchemy import update
from sqlalchemy.orm import Session

from api.console import reads, sessions
from api.console.sessions import SignedIn
from domain.destinations import normalized_destination
from domain.principals import BREAK_GLASS_NAME, Principal, Role
from ledger import evidence, timeline
from ledger import repository as repo
from ledger.models import ReviewItem
from ledger.principals import record_audit

if TYPE_CHECKING:
    from api.app import Ingress

log = logging.getLogger("herald.console")

HERE = Path(__file__).resolve().parent
templates = Jinja2Templates(directory=HERE / "templates")
templates.env.filters["when"] = reads.when
templates.env.globals["states"] = reads.STATES
templates.env.globals["attempt_states"] = reads.ATTEMPT_STATES
REFRESH_SECONDS = 5
HEADERS = {
    # Nothing but the app's own files; no inline script; never framed.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}
Reason = Annotated[str, Form(min_length=1, max_length=500)]


class SignInNeeded(Exception):
    """No live session: the answer is the sign-in page."""


def console_router(ingress: "Ingress") -> APIRouter:
    router = APIRouter(prefix="/console", include_in_schema=False)

    def page(
        request: Request,
        name: str,
        who: SignedIn | None,
        status_code: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        response = templates.TemplateResponse(
            request,
            name,
            {"who": who, "refresh_seconds": REFRESH_SECONDS, **context},
            status_code=status_code,
            headers=HEADERS,
        )
        return response

    async def signed_in(request: Request) -> SignedIn:
        value = request.cookies.get(sessions.COOKIE)

        def work(session: Session) -> SignedIn | None:
            return sessions.resume(
                session, value, sessions.now(), break_glass=ingress.auth.is_break_glass_digest
            )

        who = await ingress.tx(work) if value else None
        if who is None:
            raise SignInNeeded()
        return who

    Who = Annotated[SignedIn, Depends(signed_in)]

    def checked(who: SignedIn, csrf: str | None, *, act: bool) -> None:
        """Refuse a form without this session's CSRF token, and an action by a viewer
        (who sees no buttons, but could still post)."""
        if not sessions.csrf_ok(who.csrf_token, csrf):
            raise HTTPException(403, "the form's CSRF token is missing or wrong; reload the page")
        if act and not who.may_act:
            raise HTTPException(
                403,
                f"this needs the operator role (or admin); {who.principal.name} is "
                f"{who.principal.role.value}",
            )

    # --- sign in / out -------------------------------------------------------------------

    def sign_in_form(request: Request, status_code: int = 200, **context: Any) -> HTMLResponse:
        """The sign-in page with a fresh pre-session CSRF pair (cookie + hidden field)."""
        token = secrets.token_urlsafe(32)
        response = page(
            request, "sign_in.html", None, status_code=status_code, login_csrf=token, **context
        )
        response.set_cookie(
            LOGIN_COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/console",
        )
        return response

    @router.get("/sign-in", response_class=HTMLResponse)
    async def sign_in_page(request: Request) -> HTMLResponse:
        return sign_in_form(request)

    @router.post("/sign-in", response_class=HTMLResponse)
    async def sign_in(
        request: Request,
        name: Annotated[str, Form(max_length=120)] = "",
        token: Annotated[str, Form(max_length=500)] = "",
        csrf: Annotated[str | None, Form()] = None,
    ) -> Response:
        # Before sign-in the CSRF token is a double-submit pair: the form's hidden field
        # must equal the cookie this page set (a cross-site form cannot read or set it).
        if not sessions.csrf_ok(request.cookies.get(LOGIN_COOKIE, ""), csrf):
            return sign_in_form(request, 403, error="The form expired; sign in again.")
        principal = await _authenticate(ingress, name.strip(), token.strip())
        if principal is None or not sessions.may_sign_in(principal):
            log.info("console sign-in refused")
            return sign_in_form(
                request,
                401,
                error="That name and token do not match a principal who may use the console.",
                entered_name=name,
            )
        value, _ = await ingress.tx(
            lambda s: sessions.start(s, principal, token.strip(), sessions.now())
        )
        log.info("console sign-in: %s (%s)", principal.name, principal.role.value)
        response = RedirectResponse("/console", status_code=303)
        response.set_cookie(
            sessions.COOKIE,
            value,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/console",
        )
        response.delete_cookie(LOGIN_COOKIE, path="/console")
        return response

    @router.post("/sign-out")
    async def sign_out(
        request: Request, who: Who, csrf: Annotated[str | None, Form()] = None
    ) -> Response:
        checked(who, csrf, act=False)
        value = request.cookies.get(sessions.COOKIE, "")
        await ingress.tx(lambda s: sessions.end(s, value, sessions.now()))
        response = RedirectResponse("/console/sign-in", status_code=303)
        response.delete_cookie(sessions.COOKIE, path="/console")
        return response

    # --- overview ------------------------------------------------------------------------

    @router.get("", response_class=HTMLResponse)
    async def overview(request: Request, who: Who) -> HTMLResponse:
        now = sessions.now()
        data = await ingress.tx(lambda s: reads.overview(s, now))
        return page(
            request,
            "overview.html",
            who,
            data=data,
            chart=_chart(data),
            since={name: (now - span).isoformat() for name, span in reads.WINDOWS.items()},
        )

    # --- intents -------------------------------------------------------------------------

    def parse_filter(
        state: str | None,
        channel: str | None,
        event_type: str | None,
        region: str | None,
        category: str | None,
        created_from: str | None,
        created_to: str | None,
        key_prefix: str | None,
        attempt_state: str | None,
        attempt_from: str | None,
        both_channels: str | None,
    ) -> reads.IntentFilter:
        def moment(name: str, value: str | None) -> datetime | None:
            if not value:
                return None
            try:
                parsed = datetime.fromisoformat(value)
            except ValueError as err:
                raise HTTPException(
                    400, f"{name}: not a date and time (YYYY-MM-DDTHH:MM, UTC)"
                ) from err
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)

        if state and state not in reads.STATES:
            raise HTTPException(400, f"state: one of {', '.join(reads.STATES)}")
        if channel and channel not in ("sms", "email"):
            raise HTTPException(400, "channel: sms or email")
        if both_channels not in (None, "", "1"):
            raise HTTPException(400, "both channels: 1 (or leave it out)")
        if attempt_state and attempt_state not in reads.ATTEMPT_STATES:
            raise HTTPException(400, f"attempt state: one of {', '.join(reads.ATTEMPT_STATES)}")
        return reads.IntentFilter(
            state=state or None,
            channel=channel or None,
            event_type=event_type or None,
            region=region or None,
            category=category or None,
            created_from=moment("created from", created_from),
            created_to=moment("created to", created_to),
            key_prefix=key_prefix or None,
            attempt_state=attempt_state or None,
            attempt_from=moment("attempt from", attempt_from),
            both_channels=both_channels == "1",
        )

    Filter = Annotated[str | None, Query(max_length=200)]

    def intent_filter(
        state: Filter = None,
        channel: Filter = None,
        event_type: Filter = None,
        region: Filter = None,
        category: Filter = None,
        created_from: Filter = None,
        created_to: Filter = None,
        key_prefix: Filter = None,
        attempt_state: Filter = None,
        attempt_from: Filter = None,
        both_channels: Filter = None,
    ) -> reads.IntentFilter:
        return parse_filter(
            state,
            channel,
            event_type,
            region,
            category,
            created_from,
            created_to,
            key_prefix,
            attempt_state,
            attempt_from,
            both_channels,
        )

    @router.get("/intents", response_class=HTMLResponse)
    async def intents(
        request: Request,
        who: Who,
        flt: Annotated[reads.IntentFilter, Depends(intent_filter)],
        after: Filter = None,
    ) -> HTMLResponse:
        try:
            cursor = reads.decode_cursor(after) if after else None
        except ValueError as err:
            raise HTTPException(400, "after: not a page cursor from this console") from err

        def work(session: Session) -> tuple[reads.IntentList, reads.StateCounts]:
            return reads.list_page(session, flt, after=cursor), reads.counts_by_state(session, flt)

        listed, counts = await ingress.tx(work)
        return page(
            request,
            "intents.html",
            who,
            flt=flt,
            listed=listed,
            counts=counts,
            cap=reads.COUNT_CAP,
            params=flt.query_params(),
            next_url=(
                "/console/intents?" + urlencode({**flt.query_params(), "after": listed.next_cursor})
                if listed.next_cursor
                else None
            ),
            csv_url="/console/intents.csv?" + urlencode(flt.query_params()),
            state_url=lambda s: "/console/intents?" + urlencode({**flt.query_params(), "state": s}),
        )

    @router.get("/intents.csv")
    async def intents_csv(
        who: Who, flt: Annotated[reads.IntentFilter, Depends(intent_filter)]
    ) -> StreamingResponse:
        def rows() -> list[str]:
            with ingress.client.sessions() as session:
                return list(reads.csv_rows(session, flt))

        body = await asyncio.to_thread(rows)
        log.info("console CSV export by %s", who.principal.name)
        return StreamingResponse(
            iter(body),
            media_type="text/csv; charset=utf-8",
            headers={
                "Content-Disposition": 'attachment; filename="herald-intents.csv"',
                "Cache-Control": "no-store",
            },
        )

    @router.post("/search", response_class=HTMLResponse)
    async def search(
        request: Request,
        who: Who,
        destination: Annotated[str, Form(max_length=320)] = "",
        csrf: Annotated[str | None, Form()] = None,
    ) -> HTMLResponse:
        """A recipient's phone number or address, matched by the ledger's HMAC; the answer
        is rendered here (never a redirect, which would put it in a URL)."""
        checked(who, csrf, act=False)
        try:
            lookup = ingress.client.lookup_hmac(normalized_destination(destination.strip(), None))
        except ValueError as err:
            return page(
                request,
                "search.html",
                who,
                status_code=400,
                error=f"Not a phone number or an email address: {err}",
            )
        flt = reads.IntentFilter(recipient_hmac=lookup)

        def work(session: Session) -> tuple[reads.IntentList, list[str]]:
            return (
                reads.list_page(session, flt, size=100),
                reads.recipient_refs_for(session, lookup),
            )

        listed, refs = await ingress.tx(work)
        return page(request, "search.html", who, listed=listed, refs=refs, searched=True)

    @router.get("/intents/{intent_id}", response_class=HTMLResponse)
    async def intent_page(
        request: Request, who: Who, done: Annotated[str | None, Query(max_length=40)] = None
    ) -> HTMLResponse:
        return await render_intent(request, who, request.path_params["intent_id"], done=done)

    async def render_intent(
        request: Request,
        who: SignedIn,
        intent_id: str,
        *,
        done: str | None = None,
        revealed: dict[str, str] | None = None,
    ) -> HTMLResponse:
        if "\x00" in intent_id:
            raise HTTPException(404, "no such intent")

        def work(session: Session) -> tuple[dict[str, Any], list[ReviewItem]]:
            doc = timeline.timeline(session, intent_id)
            return doc, reads.review_items_of(session, doc["intent"]["id"])

        try:
            doc, review = await ingress.tx(work)
        except repo.NotFound as err:
            raise HTTPException(404, "no such intent") from err
        intent = doc["intent"]
        notice = None
        if done in ("cancel", "approve-resend") and doc["operator_actions"]:
            last = [a for a in doc["operator_actions"] if a["action"] == done]
            if last:
                notice = last[-1]
        open_states = ("pending", "scheduled", "deferred", "sending", "sent")
        return page(
            request,
            "intent.html",
            who,
            doc=doc,
            intent=intent,
            events=reads.events_of(doc),
            sentence=reads.outcome_sentence(doc),
            channels=[c for c in intent["channel_plan"]["channels"]],
            mask=reads.mask,
            revealed=revealed,
            notice=notice,
            review=review,
            refresh=revealed is None and intent["state"] in open_states,
            temporal_url=_workflow_url(ingress, intent["workflow_id"]),
        )

    @router.post("/intents/{intent_id}/cancel")
    async def cancel(
        intent_id: str, who: Who, reason: Reason, csrf: Annotated[str | None, Form()] = None
    ) -> Response:
        checked(who, csrf, act=True)
        try:
            await ingress.client.cancel(intent_id, by=who.principal, reason=reason)
        except repo.NotFound as err:
            raise HTTPException(404, "no such intent") from err
        return RedirectResponse(f"/console/intents/{quote(intent_id)}?done=cancel", 303)

    @router.post("/intents/{intent_id}/approve-resend")
    async def approve_resend(
        intent_id: str,
        who: Who,
        reason: Reason,
        channel: Annotated[str, Form(pattern="^(sms|email)$")],
        csrf: Annotated[str | None, Form()] = None,
    ) -> Response:
        checked(who, csrf, act=True)
        try:
            await ingress.client.approve_resend(
                intent_id, channel=channel, by=who.principal, reason=reason
            )
        except repo.NotFound as err:
            raise HTTPException(404, "no such intent") from err
        return RedirectResponse(f"/console/intents/{quote(intent_id)}?done=approve-resend", 303)

    @router.post("/intents/{intent_id}/reveal", response_class=HTMLResponse)
    async def reveal(
        request: Request,
        intent_id: str,
        who: Who,
        reason: Reason,
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
                    ("sms", intent.sms_destination_ct),
                    ("email", intent.email_destination_ct),
                )
                if ct
            }
            repo.record_operator_action(
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
        return await render_intent(request, who, intent_id, revealed=shown)

    # --- reconciliation ------------------------------------------------------------------

    @router.get("/reconciliation", response_class=HTMLResponse)
    async def reconciliation(request: Request, who: Who) -> HTMLResponse:
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
        item_id: int, who: Who, note: Reason, csrf: Annotated[str | None, Form()] = None
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

    # --- recipient -----------------------------------------------------------------------

    RecipientRef = Annotated[str, Form(min_length=1, max_length=120)]

    async def render_recipient(
        request: Request, who: SignedIn, recipient_ref: str, notice: str | None = None
    ) -> HTMLResponse:
        data = await ingress.tx(lambda s: reads.recipient(s, recipient_ref))
        return page(request, "recipient.html", who, r=data, notice=notice)

    @router.post("/recipient", response_class=HTMLResponse)
    async def recipient(
        request: Request,
        who: Who,
        recipient_ref: RecipientRef,
        csrf: Annotated[str | None, Form()] = None,
    ) -> HTMLResponse:
        checked(who, csrf, act=False)
        return await render_recipient(request, who, recipient_ref)

    @router.post("/recipient/consent", response_class=HTMLResponse)
    async def consent(
        request: Request,
        who: Who,
        recipient_ref: RecipientRef,
        reason: Reason,
        action: Annotated[str, Form(pattern="^(grant|revoke)$")],
        channel: Annotated[str, Form(pattern=r"^(sms|email|\*)$")],
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
        return await render_recipient(request, who, recipient_ref, notice)

    @router.post("/recipient/lift", response_class=HTMLResponse)
    async def lift(
        request: Request,
        who: Who,
        recipient_ref: RecipientRef,
        suppression_id: Annotated[int, Form()],
        reason: Reason,
        csrf: Annotated[str | None, Form()] = None,
    ) -> HTMLResponse:
        checked(who, csrf, act=True)
        now = sessions.now()

        def work(session: Session) -> str:
            if not reads.suppression_belongs_to(session, suppression_id, recipient_ref):
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
        return await render_recipient(request, who, recipient_ref, notice)

    # --- policy and templates ------------------------------------------------------------

    @router.get("/policy", response_class=HTMLResponse)
    async def policy(request: Request, who: Who) -> HTMLResponse:
        def work(session: Session) -> tuple[list[Any], list[Any]]:
            return reads.policies(session), reads.templates(session)

        policies, template_rows = await ingress.tx(work)
        return page(request, "policy.html", who, policies=policies, template_rows=template_rows)

    return router


LOGIN_COOKIE = "herald_console_login"
OPEN_PAGES = {"GET /console/sign-in", "POST /console/sign-in"}
"""The only console routes without a session."""


async def _authenticate(ingress: "Ingress", name: str, token: str) -> Principal | None:
    """A ledger principal by name and token; HERALD_OPERATOR_TOKEN signs in as the
    break-glass admin under its reserved name."""
    if name == BREAK_GLASS_NAME:
        return (
            Principal(BREAK_GLASS_NAME, Role.ADMIN) if ingress.auth.is_break_glass(token) else None
        )
    # An app's right token is refused inside the same lookup, before its last-used time
    # is written: the answer is a wrong token's, in a wrong token's time.
    return await ingress.auth.principal_of_name(name, token, allowed=sessions.may_sign_in)


def _workflow_url(ingress: "Ingress", workflow_id: str) -> str | None:
    if not ingress.temporal_ui_url:
        return None
    namespace = getattr(ingress.client.temporal, "namespace", "default")
    return (
        f"{ingress.temporal_ui_url.rstrip('/')}/namespaces/{quote(namespace, safe='')}"
        f"/workflows/{quote(workflow_id, safe='')}"
    )


CHART_COLOURS = {
    "delivered": "#2e7d32",
    "sent": "#1565c0",
    "unknown": "#ef6c00",
    "failed": "#c62828",
    "undelivered": "#ad1457",
    "cancelled": "#616161",
    "other": "#9e9e9e",
}


def _chart(data: reads.Overview) -> dict[str, Any]:
    """Stacked bars for the last 24 hours, drawn as SVG rectangles by the server."""
    width, height, bar = 720, 160, 26
    peak = max((sum(h["counts"].values()) for h in data.hours), default=0) or 1
    bars = []
    for index, hour in enumerate(data.hours):
        y = height
        window = {
            "created_from": hour["start"].isoformat(),
            "created_to": (hour["start"] + timedelta(hours=1)).isoformat(),
        }
        for outcome in reads.CHART_OUTCOMES:
            n = hour["counts"].get(outcome, 0)
            if not n:
                continue
            h = n / peak * (height - 10)
            y -= h
            # "other" is several states: its bar leads to the whole hour.
            state = {} if outcome == "other" else {"state": outcome}
            bars.append(
                {
                    "href": "/console/intents?" + urlencode({**state, **window}),
                    "x": index * (width / 24) + 2,
                    "y": round(y, 1),
                    "w": bar,
                    "h": round(h, 1),
                    "colour": CHART_COLOURS[outcome],
                    "label": f"{reads.when(hour['start'])}: {n} {outcome}",
                }
            )
    return {
        "width": width,
        "height": height,
        "bars": bars,
        "peak": peak,
        "legend": CHART_COLOURS,
        "first": reads.when(data.hours[0]["start"]),
    }
