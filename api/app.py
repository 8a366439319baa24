"""The HTTP ingress: provider receipts and inbound SMS (signed), one-click unsubscribe,
the operator and app API (bearer token), health and the OpenAPI document.

Every receipt goes through the same ledger transition as a poll, is deduplicated, and is
then signalled to the intent's workflow. A bad signature changes nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from sqlalchemy import update
from sqlalchemy.orm import Session
from twilio.request_validator import RequestValidator

from activities.contracts import ReceiptSignal
from activities.email import verify_unsubscribe_token
from domain import keywords
from domain.destinations import InvalidDestination, normalize_phone
from domain.states import normalize_provider_status
from ledger import repository as repo
from ledger.models import Suppression
from ledger.repository import ObservationFacts
from starter.client import HeraldClient

log = logging.getLogger("herald.api")

MAX_BODY_BYTES = 64 * 1024


class OperatorBody(BaseModel):
    operator: str = Field(min_length=1, max_length=120)
    reason: str = Field(min_length=1, max_length=2000)


class ResendBody(OperatorBody):
    channel: str = Field(default="sms", pattern="^(sms|email)$")


class Ingress:
    """What the routes need; built once by `create_app`."""

    def __init__(
        self,
        client: HeraldClient,
        *,
        auth_token: str,
        public_base_url: str,
        operator_token: str,
        unsubscribe_secret: str,
    ) -> None:
        self.client = client
        self.validator = RequestValidator(auth_token)
        self.public_base_url = public_base_url.rstrip("/")
        self.operator_token = operator_token
        self.unsubscribe_secret = unsubscribe_secret

    async def tx(self, work: Callable[[Session], Any]) -> Any:
        def run() -> Any:
            with self.client.sessions.begin() as session:
                return work(session)

        return await asyncio.to_thread(run)

    def public_url(self, request: Request) -> str:
        # Signatures cover the URL the provider called; behind a proxy that is the public one.
        query = f"?{request.url.query}" if request.url.query else ""
        return f"{self.public_base_url}{request.url.path}{query}"


async def signed_form(request: Request, ingress: Ingress) -> dict[str, str]:
    body = await request.body()
    try:
        params = dict(
            parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=bool(body))
        )
    except (UnicodeDecodeError, ValueError) as err:
        raise HTTPException(400, "body must be application/x-www-form-urlencoded") from err
    signature = request.headers.get("X-Twilio-Signature")
    if not signature:
        raise HTTPException(403, "missing X-Twilio-Signature")
    if not ingress.validator.validate(ingress.public_url(request), params, signature):
        raise HTTPException(403, "signature does not match")
    return params


def create_app(ingress: Ingress) -> FastAPI:
    app = FastAPI(
        title="Herald",
        version="0.1.0",
        description="Receipts, inbound SMS, unsubscribe and the operator API.",
    )
    app.state.ingress = ingress
    bearer = HTTPBearer(auto_error=False)

    @app.middleware("http")
    async def limit_body(request: Request, call_next: Callable[[Request], Awaitable[Response]]):
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return JSONResponse({"detail": f"body larger than {MAX_BODY_BYTES} bytes"}, 413)
        return await call_next(request)

    def operator(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if credentials is None or not hmac.compare_digest(
            credentials.credentials.encode(), ingress.operator_token.encode()
        ):
            raise HTTPException(
                401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
            )

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/receipts/sms", status_code=204, response_class=Response)
    async def sms_receipt(request: Request, token: str | None = None) -> Response:
        """A provider status callback: verified, deduplicated, recorded, then signalled."""
        params = await signed_form(request, ingress)
        sid = params.get("MessageSid") or params.get("SmsSid")
        raw = params.get("MessageStatus") or params.get("SmsStatus")
        if not sid or not raw:
            raise HTTPException(400, "MessageSid and MessageStatus are required")
        try:
            normalized = normalize_provider_status(raw)
        except ValueError as err:
            raise HTTPException(400, f"unknown MessageStatus {raw!r}") from err
        code = params.get("ErrorCode") or None
        idem = request.headers.get("I-Twilio-Idempotency-Token")
        dedupe = "webhook:" + (
            idem
            or hashlib.sha256(
                f"{sid}|{raw}|{code}|{params.get('RawDlrDoneDate', '')}".encode()
            ).hexdigest()
        )
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
        if result.changed and result.workflow_id and result.token and result.state:
            try:
                await ingress.client.temporal.get_workflow_handle(result.workflow_id).signal(
                    "receipt", ReceiptSignal(result.token, result.state)
                )
            except Exception as err:  # noqa: BLE001 - the ledger has it; polling will see it
                log.info(
                    "receipt recorded but the workflow was not signalled: %s", type(err).__name__
                )
        return Response(status_code=204)

    @app.post("/v1/inbound/sms")
    async def inbound_sms(request: Request) -> Response:
        """Inbound SMS: opt-out and opt-in keywords update suppression for the sender."""
        params = await signed_form(request, ingress)
        sender, body = params.get("From"), params.get("Body")
        if not sender or body is None:
            raise HTTPException(400, "From and Body are required")
        kind = keywords.classify_keyword(body)
        if kind is None:
            return Response("<Response/>", media_type="application/xml")
        try:
            e164 = normalize_phone(sender).e164
        except InvalidDestination as err:
            raise HTTPException(400, f"From: {err}") from err
        lookup = ingress.client.lookup_hmac(e164)
        now = datetime.now(UTC)

        def work(session: Session) -> None:
            if kind == "opt_out":
                session.add(
                    Suppression(
                        destination_hmac=lookup,
                        channel="sms",
                        reason="opted_out",
                        source="keyword:" + body.strip().upper()[:20],
                        at=now,
                    )
                )
            else:
                session.execute(
                    update(Suppression)
                    .where(
                        Suppression.destination_hmac == lookup,
                        Suppression.channel == "sms",
                        Suppression.lifted_at.is_(None),
                    )
                    .values(lifted_at=now)
                )

        await ingress.tx(work)
        return Response("<Response/>", media_type="application/xml")

    @app.get("/v1/unsubscribe/{value}", response_class=HTMLResponse)
    async def unsubscribe_page(value: str) -> HTMLResponse:
        if verify_unsubscribe_token(ingress.unsubscribe_secret, value) is None:
            raise HTTPException(404, "unknown unsubscribe link")
        return HTMLResponse(
            "<html><body><form method='post'><p>Stop these emails?</p>"
            "<button type='submit'>Unsubscribe</button></form></body></html>"
        )

    @app.post("/v1/unsubscribe/{value}")
    async def unsubscribe(value: str) -> dict[str, str]:
        """RFC 8058 one-click: suppress the attempt's email destination."""
        token = verify_unsubscribe_token(ingress.unsubscribe_secret, value)
        if token is None:
            raise HTTPException(404, "unknown unsubscribe link")
        now = datetime.now(UTC)

        def work(session: Session) -> None:
            attempt = repo.attempt_by_token(session, token)
            session.add(
                Suppression(
                    destination_hmac=attempt.destination_hmac,
                    channel="email",
                    reason="unsubscribed",
                    source="one-click",
                    at=now,
                )
            )

        await ingress.tx(work)
        return {"status": "unsubscribed"}

    # --- operator and app API --------------------------------------------------------

    @app.get("/v1/intents/{id_or_key}", dependencies=[Depends(operator)])
    async def get_intent(id_or_key: str) -> dict[str, Any]:
        try:
            return await asyncio.to_thread(ingress.client.timeline, id_or_key)
        except repo.NotFound as err:
            raise HTTPException(404, str(err)) from err

    @app.post("/v1/intents/{id_or_key}/cancel", dependencies=[Depends(operator)])
    async def cancel(id_or_key: str, body: OperatorBody) -> dict[str, Any]:
        try:
            result = await ingress.client.cancel(
                id_or_key, operator=body.operator, reason=body.reason
            )
        except repo.NotFound as err:
            raise HTTPException(404, str(err)) from err
        return asdict(result)

    @app.post("/v1/intents/{id_or_key}/approve-resend", dependencies=[Depends(operator)])
    async def approve_resend(id_or_key: str, body: ResendBody) -> JSONResponse:
        try:
            result = await ingress.client.approve_resend(
                id_or_key, channel=body.channel, operator=body.operator, reason=body.reason
            )
        except repo.NotFound as err:
            raise HTTPException(404, str(err)) from err
        return JSONResponse(asdict(result), status_code=200 if result.accepted else 409)

    return app
