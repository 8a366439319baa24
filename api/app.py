"""The HTTP ingress: provider receipts and inbound SMS (signed), one-click unsubscribe,
the operator and app API (bearer token), metrics, health and the OpenAPI document.

Every receipt goes through the same ledger transition as a poll, is deduplicated, and is
then signalled to the intent's workflow. A bad signature changes nothing. Every request
body is bounded (:data:`MAX_BODY_BYTES`), chunked ones included.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, FastAPI, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text, update
from sqlalchemy.orm import Session
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from twilio.request_validator import RequestValidator

from activities.contracts import ReceiptSignal
from activities.email import verify_unsubscribe_token
from api.auth import Authenticator, check_every_route_declared
from api.console import mount_console
from api.evidence import evidence_router
from api.intents import INVALID, RETENTION_NOTE, intents_router, validation_problem
from api.metrics import build_registry
from api.principals import principals_router
from api.schemas import Health, Problem, Readiness, Unsubscribed
from api.telnyx_webhooks import TelnyxVerifier, telnyx_router
from domain import channels, keywords
from domain.destinations import phone_e164
from domain.states import (
    PROVIDER_STATUSES,
    AttemptState,
    is_terminal,
    normalize_provider_status,
)
from ledger import evidence
from ledger import repository as repo
from ledger.models import Suppression
from ledger.repository import ObservationFacts
from ledger.transactions import in_transaction
from starter.client import HeraldClient

log = logging.getLogger("herald.api")

MAX_BODY_BYTES = 64 * 1024
READY_TIMEOUT_SECONDS = 2.0
SIGNAL_TIMEOUT_SECONDS = 5.0
_MESSAGE_SID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_ERROR_CODE = re.compile(r"^[A-Za-z0-9_-]{1,20}$")

DESCRIPTION = f"""
Herald's HTTP ingress.

- **Provider webhooks** (`/v1/receipts/sms`, `/v1/inbound/sms`) are authenticated by the
  provider's signature (`X-Twilio-Signature`, computed over the public URL the provider
  called; set `HERALD_PUBLIC_BASE_URL` behind a proxy); Telnyx's events
  (`/v1/webhooks/telnyx`) by its Ed25519 signature over the timestamp and the raw body
  (`HERALD_TELNYX_PUBLIC_KEY`).
- **One-click unsubscribe** (`/v1/unsubscribe/{{token}}`, RFC 8058) is authenticated by
  the signed token in the link.
- **The operator and app API** (`/v1/intents...`, `/v1/consents...`,
  `/v1/suppressions...`, `/v1/principals...`) needs `Authorization: Bearer <token>`: a
  principal's token (`herald principals add NAME --role ROLE`; `herald dev` writes its
  local admin's to the data folder) or `HERALD_OPERATOR_TOKEN` (break-glass admin). Each
  route names its role (app, viewer, operator, admin): no token or an unknown or revoked
  one is 401, a role that may not is 403 naming the role needed.
- `/healthz` (liveness), `/readyz` (ledger and Temporal reachable), `/metrics`
  (Prometheus text format) and this document need nothing.

Bodies larger than {MAX_BODY_BYTES} bytes are refused with 413.

{RETENTION_NOTE}
"""


async def _check(probe: Any) -> str:
    """ "ok", or the class of what went wrong (no message: it may carry a URL or a secret)."""
    try:
        result = await asyncio.wait_for(probe, timeout=READY_TIMEOUT_SECONDS)
    except TimeoutError:
        return f"no answer within {READY_TIMEOUT_SECONDS:g} s"
    except Exception as err:  # noqa: BLE001 - any failure means "not ready"
        return f"unavailable ({type(err).__name__})"
    return "ok" if result is not False else "unavailable (reported unhealthy)"


class Ingress:
    """What the routes need; built once by `create_app`."""

    def __init__(
        self,
        client: HeraldClient,
        *,
        auth_token: str,
        public_base_url: str,
        operator_token: str | None,
        unsubscribe_secret: str,
        temporal_ui_url: str | None = None,
        telnyx_public_key: str | None = None,
    ) -> None:
        self.client = client
        self.telnyx_verifier = TelnyxVerifier(telnyx_public_key) if telnyx_public_key else None
        """Checks Telnyx's Ed25519 webhooks; without a key its route refuses every event."""
        self.temporal_ui_url = temporal_ui_url
        """The Temporal Web UI's base URL, for the console's link to a workflow."""
        self.validator = RequestValidator(auth_token)
        self.public_base_url = public_base_url.rstrip("/")
        # HERALD_OPERATOR_TOKEN: the break-glass admin (optional in dev).
        self.auth = Authenticator(client.sessions, break_glass_token=operator_token)
        self.unsubscribe_secret = unsubscribe_secret
        self.registry, self.counters = build_registry(client.sessions)
        self._probes: dict[str, asyncio.Future[Any]] = {}

    async def tx(self, work):  # type: ignore[no-untyped-def]
        return await in_transaction(self.client.sessions, work)

    def probe(self, name: str, start: Callable[[], Awaitable[Any]]) -> Awaitable[Any]:
        """The readiness probe `name`, shared: while one is still running (a database that
        hangs keeps a thread until its own timeouts), later requests wait on the same one
        instead of starting another, so probes never fill the thread pool."""
        running = self._probes.get(name)
        if running is None or running.done():
            running = self._probes[name] = asyncio.ensure_future(start())
            # Its outcome may reach no request (all timed out): retrieve it, no warning.
            running.add_done_callback(lambda f: f.cancelled() or f.exception())
        return asyncio.shield(running)

    def public_url(self, request: Request) -> str:
        """The URL the provider called and signed: the public origin, then the path and
        query exactly as they arrived. The path is taken undecoded (`raw_path`): a provider
        that called `/v1/receipts/%73ms` signed those bytes, not the `/v1/receipts/sms` the
        router matched, and the official validator compares it so."""
        raw_path = request.scope.get("raw_path")
        if raw_path:
            # Some servers (and httpx's ASGI transport) include the query in raw_path.
            path = raw_path.partition(b"?")[0].decode("latin-1")
        else:
            path = request.url.path
        query = request.scope.get("query_string", b"").decode("latin-1")
        return f"{self.public_base_url}{path}{'?' + query if query else ''}"


class BodyLimit:
    """Refuse bodies over `max_bytes` with 413, whether declared or streamed (chunked).

    The body is read here, up to the limit, and handed on; bodies are small by design.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = scope.get("app")
        ingress = getattr(getattr(app, "state", None), "ingress", None)
        if ingress is not None:
            ingress.counters.rejected.labels("too_large").inc()
        response = JSONResponse({"detail": f"body larger than {self.max_bytes} bytes"}, 413)
        await response(scope, receive, send)


def _bad(ingress: Ingress, detail: str) -> HTTPException:
    ingress.counters.rejected.labels("malformed").inc()
    return HTTPException(400, detail)


@dataclass(frozen=True)
class SignedForm:
    """A verified webhook: its parameters and the URL the signature covers."""

    params: dict[str, str]
    signed_url: str

    def digest(self) -> str:
        """SHA-256 of exactly what the signature covers (the URL and every parameter),
        so the same signed callback has one digest whatever its unsigned headers say."""
        covered = json.dumps([self.signed_url, sorted(self.params.items())], ensure_ascii=False)
        return hashlib.sha256(covered.encode("utf-8", "surrogatepass")).hexdigest()


FORM = "application/x-www-form-urlencoded"


def _media_type(request: Request) -> str:
    return request.headers.get("Content-Type", "").partition(";")[0].strip().lower()


async def signed_form(request: Request, ingress: Ingress) -> SignedForm:
    """The form parameters of a provider webhook, once its signature is verified.

    Only a form is a form: a body sent as `text/plain`, JSON or with no Content-Type is
    400 before its signature is even looked at, whatever it contains."""
    if _media_type(request) != FORM:
        raise _bad(ingress, f"Content-Type must be {FORM}")
    body = await request.body()
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=bool(body))
    except (UnicodeDecodeError, ValueError) as err:
        raise _bad(ingress, "body must be application/x-www-form-urlencoded") from err
    params = dict(pairs)
    if len(params) != len(pairs):
        # The signature covers every value of a repeated name; providers never repeat one.
        raise _bad(ingress, "a form parameter is repeated")
    signature = request.headers.get("X-Twilio-Signature")
    if not signature:
        ingress.counters.rejected.labels("signature").inc()
        raise HTTPException(403, "missing X-Twilio-Signature")
    signed_url = ingress.public_url(request)
    if not ingress.validator.validate(signed_url, params, signature):
        ingress.counters.rejected.labels("signature").inc()
        raise HTTPException(403, "signature does not match")
    for name, value in params.items():
        if "\x00" in name or "\x00" in value:
            raise _bad(ingress, f"form parameter {name[:40]!r} contains a NUL character")
    return SignedForm(params, signed_url)


def _sender_e164(sender: str) -> str:
    """The sender in E.164. An opt-out is honoured even from a number Herald would not text."""
    try:
        return phone_e164(sender)
    except ValueError as err:
        raise ValueError(f"From: {err}") from err


def _suppress(session: Session, lookup: str, channel: str, reason: str, source: str) -> bool:
    """Add a suppression unless an active one exists for the destination (redeliveries)."""
    _, created = evidence.suppress(
        session,
        destination_hmac=lookup,
        channel=channel,
        reason=reason,
        source=source,
        at=datetime.now(UTC),
    )
    return created


PROBLEMS: dict[int | str, dict[str, Any]] = {
    400: {
        "model": Problem,
        "description": f"Not `{FORM}`, not UTF-8, or a malformed form; `detail` says why.",
    },
    403: {"model": Problem, "description": "Missing or wrong X-Twilio-Signature."},
    413: {"model": Problem, "description": f"Body larger than {MAX_BODY_BYTES} bytes."},
}
_SIGNATURE_HEADER = {
    "name": "X-Twilio-Signature",
    "in": "header",
    "required": True,
    "description": "The provider's signature over the URL it called and the form fields.",
    "schema": {"type": "string", "minLength": 1},
}


def signed_form_body(fields: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """The OpenAPI of a provider webhook: a signed form (read by `signed_form`, not by a
    FastAPI parameter, since the signature covers the raw fields)."""
    text = {"type": "string", "pattern": r"^[^\x00]*$"}
    return {
        "parameters": [_SIGNATURE_HEADER],
        "requestBody": {
            "required": True,
            "content": {
                FORM: {
                    "schema": {
                        "type": "object",
                        "properties": {name: {**text, **spec} for name, spec in fields.items()},
                        "required": required,
                        # Providers add fields without notice; all are signed and kept.
                        "additionalProperties": text,
                    }
                }
            },
        },
    }


RECEIPT_FORM = signed_form_body(
    {
        "MessageSid": {"pattern": _MESSAGE_SID.pattern},
        "SmsSid": {"pattern": _MESSAGE_SID.pattern},
        "MessageStatus": {"enum": sorted(PROVIDER_STATUSES)},
        "SmsStatus": {"enum": sorted(PROVIDER_STATUSES)},
        "ErrorCode": {"pattern": r"^$|" + _ERROR_CODE.pattern},
    },
    ["MessageSid", "MessageStatus"],
)
INBOUND_FORM = signed_form_body({"From": {"minLength": 1}, "Body": {}}, ["From", "Body"])

TWIML: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/xml": {}}, "description": "An empty TwiML answer."}
}


async def wake_workflow(ingress: Ingress, result: repo.ObservationResult, code: str | None) -> None:
    """Signal the intent's workflow after a receipt that settled its attempt.

    Only a settling receipt wakes the workflow (it waits for a terminal state); an
    intermediate `sent` is in the ledger and would cost a signal and a task for nothing.
    """
    if not (
        result.changed
        and result.workflow_id
        and result.token
        and result.state
        and is_terminal(AttemptState(result.state))
    ):
        return
    try:
        handle = ingress.client.temporal.get_workflow_handle(result.workflow_id)
        await asyncio.wait_for(
            handle.signal("receipt", ReceiptSignal(result.token, result.state, code)),
            SIGNAL_TIMEOUT_SECONDS,
        )
    except Exception as err:  # noqa: BLE001 - the ledger has it; polling will see it
        log.info("receipt recorded but the workflow was not signalled: %s", type(err).__name__)


async def record_keyword(ingress: Ingress, sender: str, body: str) -> None:
    """An inbound SMS through any provider: STOP words suppress SMS to the sender, START
    words lift an opt-out, anything else is ignored. The suppression is per destination
    and channel, never per provider, so an opt-out received through one provider holds
    for every provider (failover never bypasses it)."""
    kind = keywords.classify_keyword(body)
    if kind is None:
        return
    try:
        e164 = _sender_e164(sender)
    except ValueError as err:
        raise _bad(ingress, str(err)) from err
    lookup = ingress.client.lookup_hmac(e164)
    word = body.strip().rstrip(".!?;,").strip().upper()

    def work(session: Session) -> None:
        if kind == "opt_out":
            _suppress(session, lookup, channels.SMS.name, "opted_out", f"keyword:{word}")
        else:
            session.execute(
                update(Suppression)
                .where(
                    Suppression.destination_hmac == lookup,
                    Suppression.channel == channels.SMS.name,
                    Suppression.reason == "opted_out",
                    Suppression.lifted_at.is_(None),
                )
                .values(lifted_at=datetime.now(UTC), lifted_source=f"keyword:{word}"[:60])
            )

    await ingress.tx(work)
    log.info("inbound keyword %s recorded (%s)", word, kind)


def provider_router(ingress: Ingress) -> APIRouter:
    router = APIRouter(tags=["provider webhooks"])

    @router.post(
        "/v1/receipts/sms",
        status_code=204,
        response_class=Response,
        responses={**PROBLEMS, **INVALID},
        summary="An SMS status callback (signed)",
        openapi_extra=RECEIPT_FORM,
    )
    async def sms_receipt(
        request: Request,
        token: Annotated[
            str | None, Query(max_length=240, description="The attempt token we sent.")
        ] = None,
    ) -> Response:
        """Verified, deduplicated, recorded through the one transition, then signalled.

        A receipt for a message id nobody knows is kept as orphan evidence (204).
        """
        form = await signed_form(request, ingress)
        params = form.params
        if token is not None and "\x00" in token:
            raise _bad(ingress, "token contains a NUL character")
        sid = params.get("MessageSid") or params.get("SmsSid")
        raw = (params.get("MessageStatus") or params.get("SmsStatus") or "").strip()
        if not sid or not raw:
            raise _bad(ingress, "MessageSid and MessageStatus are required")
        if not _MESSAGE_SID.match(sid):
            raise _bad(ingress, "MessageSid is not a message id (letters and digits, <= 80)")
        try:
            normalized = normalize_provider_status(raw)
        except ValueError as err:
            raise _bad(ingress, f"unknown MessageStatus {raw[:40]!r}") from err
        code = params.get("ErrorCode") or None
        if code is not None and not _ERROR_CODE.match(code):
            raise _bad(ingress, "ErrorCode is not an error code (letters and digits, <= 20)")
        # Deduplicated on what the signature covers: the provider's retries of one
        # callback repeat it exactly, and a replay with a fresh (unsigned)
        # I-Twilio-Idempotency-Token is the same callback, not a new observation.
        dedupe = "webhook:" + form.digest()
        facts = ObservationFacts(
            source="webhook",
            raw_status=raw,
            normalized=normalized,
            observed_at=datetime.now(UTC),
            dedupe_key=dedupe,
            provider_code=code,
            remote_id=sid,
        )
        result = await ingress.tx(lambda s: repo.record_observation(s, facts, token=token))
        ingress.counters.receipts.labels(result.verdict).inc()
        if result.verdict == "duplicate":
            ingress.counters.duplicates.labels("webhook_redelivery").inc()
        await wake_workflow(ingress, result, code)
        return Response(status_code=204)

    @router.post(
        "/v1/inbound/sms",
        response_class=Response,
        responses={**PROBLEMS, **TWIML},
        summary="An inbound SMS (signed): opt-out and opt-in keywords",
        openapi_extra=INBOUND_FORM,
    )
    async def inbound_sms(request: Request) -> Response:
        """STOP, STOPALL, UNSUBSCRIBE, CANCEL, END, QUIT suppress SMS to the sender;
        START, YES, UNSTOP lift it. Anything else is acknowledged and ignored."""
        params = (await signed_form(request, ingress)).params
        sender, body = params.get("From"), params.get("Body")
        if not sender or body is None:
            raise _bad(ingress, "From and Body are required")
        await record_keyword(ingress, sender, body)
        return Response("<Response/>", media_type="application/xml")

    return router


def unsubscribe_router(ingress: Ingress) -> APIRouter:
    router = APIRouter(tags=["unsubscribe"])
    unknown = {404: {"model": Problem, "description": "Not a link Herald signed."}, **INVALID}

    def verified(value: str) -> str:
        # A link Herald signed is ASCII; anything else is not one (and hmac refuses it).
        token = (
            verify_unsubscribe_token(ingress.unsubscribe_secret, value)
            if (value.isascii() and "\x00" not in value)
            else None
        )
        if token is None:
            raise HTTPException(404, "unknown unsubscribe link")
        return token

    @router.get(
        "/v1/unsubscribe/{value}",
        # The page is HTML; its 404 and 422 are JSON like every other error. A plain
        # Response class lets the document file each under the type it really has.
        response_class=Response,
        responses={
            200: {
                "content": {"text/html": {"schema": {"type": "string"}}},
                "description": "The page.",
            },
            **unknown,
        },
        summary="The confirmation page (changes nothing: link scanners fetch it)",
    )
    async def unsubscribe_page(value: str) -> HTMLResponse:
        verified(value)
        return HTMLResponse(
            "<!doctype html><html><head><meta charset='utf-8'><title>Unsubscribe</title>"
            "</head><body><form method='post'><p>Stop these emails?</p>"
            "<input type='hidden' name='List-Unsubscribe' value='One-Click'>"
            "<button type='submit'>Unsubscribe</button></form></body></html>"
        )

    @router.post(
        "/v1/unsubscribe/{value}",
        response_model=Unsubscribed,
        responses=unknown,
        summary="RFC 8058 one-click unsubscribe",
    )
    async def unsubscribe(value: str) -> dict[str, str]:
        """Suppress email to the attempt's destination (idempotent)."""
        token = verified(value)

        def work(session: Session) -> None:
            attempt = repo.attempt_by_token(session, token)
            # RFC 8058 one-click unsubscribe is an email header: it suppresses email.
            _suppress(
                session, attempt.destination_hmac, channels.EMAIL.name, "unsubscribed", "one-click"
            )

        try:
            await ingress.tx(work)
        except repo.NotFound as err:
            raise HTTPException(404, "unknown unsubscribe link") from err
        return {"status": "unsubscribed"}

    return router


HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


async def method_not_allowed(request: Request, exc: Exception) -> JSONResponse:
    """405 with an `Allow` header naming every method of the path. Starlette names only
    those of the first route that matched the path, and GET and POST of one path (the
    unsubscribe link) are two routes: each method is asked of every route instead."""
    routes = request.app.router.routes
    allowed = [
        method
        for method in HTTP_METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes
        )
    ]
    return JSONResponse(
        {"detail": "Method Not Allowed"}, status_code=405, headers={"Allow": ", ".join(allowed)}
    )


def create_app(ingress: Ingress) -> FastAPI:
    # `/docs` and `/redoc` with Swagger UI's and ReDoc's JS/CSS served by the app itself
    # (packaged by fastapi-offline), so they work with no network: never a CDN.
    app = FastAPIOffline(title="Herald", version="0.1.0", description=DESCRIPTION)
    app.state.ingress = ingress
    app.state.authenticator = ingress.auth
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    # Every route's 422 names the problem without echoing what was sent.
    app.add_exception_handler(RequestValidationError, validation_problem)
    app.add_exception_handler(405, method_not_allowed)

    @app.get("/healthz", response_model=Health, tags=["health"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers. It touches neither the ledger nor Temporal."""
        return {"status": "ok"}

    @app.get(
        "/readyz",
        response_model=Readiness,
        tags=["health"],
        responses={503: {"model": Readiness, "description": "A dependency is unreachable."}},
    )
    async def readyz() -> JSONResponse:
        """Readiness: the ledger answers a query and the Temporal frontend reports healthy,
        each within READY_TIMEOUT_SECONDS. 503 names the one that did not."""
        checks = {
            "ledger": await _check(
                ingress.probe("ledger", lambda: ingress.tx(lambda s: s.execute(text("SELECT 1"))))
            ),
            "temporal": await _check(
                ingress.probe("temporal", ingress.client.temporal.service_client.check_health)
            ),
        }
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse(
            {"status": "ready" if ready else "not ready", "checks": checks},
            status_code=200 if ready else 503,
        )

    @app.get(
        "/metrics",
        response_class=Response,
        tags=["health"],
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text."}},
        summary="Herald's own metrics (Prometheus text format)",
    )
    async def metrics() -> Response:
        body = await asyncio.to_thread(generate_latest, ingress.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    app.include_router(provider_router(ingress))
    app.include_router(telnyx_router(ingress))
    app.include_router(unsubscribe_router(ingress))
    # Token and role checked by the routers' route class, before the body is even parsed.
    app.include_router(intents_router(ingress))
    app.include_router(evidence_router(ingress))
    app.include_router(principals_router(ingress))
    mount_console(app, ingress)
    check_every_route_declared(app)
    return app
