"""The HTTP ingress: provider receipts and inbound SMS (signed), one-click unsubscribe,
the operator and app API (bearer token), metrics, health and the OpenAPI document.

The app factory: the routes live in their modules (the providers' ingress in
`api/ingress/`; `api/intents.py`, `api/evidence.py`, `api/principals.py`, ...,
`api/console/`) and take what they share from
`api/deps.py`; this module adds the body limit, the error handlers (`api/errors.py`),
health and metrics.
Every request body is bounded (`MAX_BODY_BYTES`), chunked ones included.

Two apps from the one factory and the one router list: the full app (`herald api`'s
private listener, and `herald dev`'s single origin) and the public ingress
(`create_app(..., public=True)`, served on HERALD_INGRESS_PORT): only what providers and
recipients call (`PUBLIC_ROUTERS`) and `/healthz`, so a proxy can expose it alone
(docs/operations.md, "What the internet reaches").
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.attachments import ATTACHMENTS_PATH, MULTIPART_ALLOWANCE, too_large
from api.attachments import router as attachment_routes
from api.auth import check_every_route_declared
from api.console import mount_console
from api.content import router as content_routes
from api.deps import MAX_BODY_BYTES, Ingress
from api.erasures import router as erasure_routes
from api.errors import install_error_answers
from api.evidence import router as evidence_routes
from api.idempotency import NOTE as RETENTION_NOTE
from api.ingress.fast_receipts import FastReceipts
from api.ingress.sendgrid import EVENTS_PATH, MAX_BATCH_BYTES
from api.ingress.sendgrid import router as sendgrid_routes
from api.ingress.telnyx import router as telnyx_routes
from api.ingress.twilio import router as twilio_routes
from api.ingress.unsubscribe import router as unsubscribe_routes
from api.intent_search import router as recipient_routes
from api.intents import router as intents_routes
from api.intents import validation_problem
from api.openapi import install_contract, operation_id
from api.principals import router as principals_routes
from api.query_params import refuse_unknown_query_parameters
from api.schemas import Health, Readiness
from api.settlements import router as settlement_routes

log = logging.getLogger("herald.api")

READY_TIMEOUT_SECONDS = 2.0

DESCRIPTION = f"""
Herald's HTTP ingress.

- **Provider webhooks** (`/v1/receipts/sms`, `/v1/inbound/sms`) are authenticated by the
  provider's signature (`X-Twilio-Signature`, computed over the public URL the provider
  called; set `HERALD_PUBLIC_BASE_URL` behind a proxy); Telnyx's events
  (`/v1/webhooks/telnyx`) by its Ed25519 signature over the timestamp and the raw body
  (`HERALD_TELNYX_PUBLIC_KEY`); email events
  (`/v1/receipts/email/sendgrid`, batches up to {MAX_BATCH_BYTES} bytes) carry an ECDSA
  signature over their timestamp and raw body (`HERALD_SENDGRID_EVENT_PUBLIC_KEY`).
- **One-click unsubscribe** (`/v1/unsubscribe/{{token}}`, RFC 8058) is authenticated by
  the signed token in the link.
- **The operator and app API** (`/v1/intents...`, `/v1/consents...`,
  `/v1/suppressions...`, `/v1/attachments`, `/v1/principals...`) needs
  `Authorization: Bearer <token>`: a principal's token (`herald principals add NAME
  --role ROLE`; `herald dev` writes its local admin's to the data folder) or
  `HERALD_OPERATOR_TOKEN` (break-glass admin). Each route names its role (app, viewer,
  operator, admin): no token or an unknown or revoked one is 401, a role that may not is
  403 naming the role needed.
- `/healthz` (liveness), `/readyz` (ledger and Temporal reachable), `/metrics`
  (Prometheus text format) and this document need nothing.

Bodies larger than {MAX_BODY_BYTES} bytes are refused with 413 (an attachment's limit is
HERALD_ATTACHMENT_MAX_BYTES, named in its 413). With the ledger (Postgres) or Temporal
unavailable, every `/v1` route answers 503 `{{"detail": ...}}` naming which, with
`Retry-After` (seconds); a fault in Herald is 500 in the same shape.

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


class BodyLimit:
    """Refuse bodies over `max_bytes` with 413, whether declared or streamed (chunked).

    The body is read here, up to the limit, and handed on; bodies are small by design,
    except an email provider's event batch and an attachment (`larger`: path -> its own
    limit).
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        larger: dict[str, int] | None = None,
        refusals: dict[str, str] | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.larger = larger or {}
        self.refusals = refusals or {}
        """A path's own words for its 413 (an attachment's names its setting)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.larger.get(scope.get("path", ""), self.max_bytes)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await self._refuse(scope, receive, send, limit)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._refuse(scope, receive, send, limit)
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

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        app = scope.get("app")
        ingress = getattr(getattr(app, "state", None), "ingress", None)
        if ingress is not None and scope.get("path", "").startswith(WEBHOOK_PREFIXES):
            # The metric counts refused webhooks; an app's or operator's 413 is theirs.
            ingress.counters.rejected.labels("too_large").inc()
        detail = self.refusals.get(scope.get("path", ""), f"body larger than {limit} bytes")
        response = JSONResponse({"detail": detail}, 413)
        await response(scope, receive, send)


WEBHOOK_PREFIXES = ("/v1/receipts/", "/v1/webhooks/", "/v1/inbound/")
"""The providers' routes, which `herald_api_webhooks_rejected_total` counts."""

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


PUBLIC_ROUTERS = (twilio_routes, sendgrid_routes, telnyx_routes, unsubscribe_routes)
"""What providers and recipients call (`api/ingress/`), each request authenticated by a
signature (the provider's, or Herald's in the unsubscribe link): the public ingress
serves only these."""
PRIVATE_ROUTERS = (
    recipient_routes,
    intents_routes,
    evidence_routes,
    attachment_routes,
    principals_routes,
    settlement_routes,
    content_routes,
    erasure_routes,
)
"""The apps' and operators' API (bearer token, role checked by the routers' route class,
before the body is even parsed); with the console, `/docs`, `/readyz` and `/metrics`,
never on the public ingress."""


def create_app(ingress: Ingress, *, public: bool = False) -> FastAPI:
    """The full app; with `public`, the provider ingress alone (`PUBLIC_ROUTERS` and
    `/healthz`: no API, console, OpenAPI document, `/readyz` or `/metrics`)."""
    app: FastAPI
    if public:
        app = FastAPI(
            title="Herald ingress",
            version="0.1.0",
            docs_url=None,
            redoc_url=None,
            openapi_url=None,
            generate_unique_id_function=operation_id,
            dependencies=[Depends(refuse_unknown_query_parameters)],
        )
    else:
        # `/docs` and `/redoc` with Swagger UI's and ReDoc's JS/CSS served by the app
        # itself (packaged by fastapi-offline), so they work with no network: never a CDN.
        app = FastAPIOffline(
            title="Herald",
            version="0.1.0",
            description=DESCRIPTION,
            # Operation ids for generated clients: `createIntent` (api/openapi.py).
            generate_unique_id_function=operation_id,
            # Every /v1/ route: a query parameter it does not declare is 422, not ignored.
            dependencies=[Depends(refuse_unknown_query_parameters)],
        )
    app.state.ingress = ingress
    app.state.authenticator = ingress.auth
    # The ordinary SMS receipt skips the rest of the stack (api.ingress.fast_receipts), inside the
    # body limit (added after, so outside it).
    app.add_middleware(FastReceipts, ingress=ingress)
    app.add_middleware(
        BodyLimit,
        max_bytes=MAX_BODY_BYTES,
        larger={
            EVENTS_PATH: MAX_BATCH_BYTES,
            ATTACHMENTS_PATH: ingress.attachment_max_bytes + MULTIPART_ALLOWANCE,
        },
        refusals={ATTACHMENTS_PATH: too_large(ingress.attachment_max_bytes)},
    )
    # Every route's 422 names the problem without echoing what was sent.
    app.add_exception_handler(RequestValidationError, validation_problem)
    app.add_exception_handler(405, method_not_allowed)
    # A dependency that is down is a 503 with Retry-After, a fault a 500, both JSON
    # (api.errors); before the console, which answers its own paths with pages.
    install_error_answers(app)

    @app.get("/healthz", response_model=Health, tags=["health"])
    async def check_liveness() -> dict[str, str]:
        """Liveness: the process answers. It touches neither the ledger nor Temporal."""
        return {"status": "ok"}

    for router in PUBLIC_ROUTERS:
        app.include_router(router)
    if public:
        check_every_route_declared(app)
        return app

    @app.get(
        "/readyz",
        response_model=Readiness,
        tags=["health"],
        responses={503: {"model": Readiness, "description": "A dependency is unreachable."}},
    )
    async def check_readiness() -> JSONResponse:
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
    async def read_metrics() -> Response:
        body = await asyncio.to_thread(generate_latest, ingress.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    for router in PRIVATE_ROUTERS:
        app.include_router(router)
    mount_console(app)
    # Tags, headers, `/openapi.json` with its `servers`, and `/openapi-3.0.json`.
    install_contract(app, max_body_bytes=MAX_BODY_BYTES)
    check_every_route_declared(app)
    return app
