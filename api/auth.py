"""Who is calling, and may they: bearer tokens to principals, and every route's role.

A guarded route declares what it does with `Depends(require(Access.X))` (which also hands
the handler the authenticated :class:`Principal`). Its route class, :class:`GuardedRoute`,
authenticates before anything else, body parsing included, so a caller without a valid
token learns nothing (not even that its JSON was malformed): 401 for no, an unknown or a
revoked token; 403, naming the role needed, for a valid token whose role lacks the right.
A route that is not guarded must be listed in :data:`PUBLIC_ROUTES` with what protects it
instead; `create_app` refuses to build an app with a route that is neither.

The token is looked up by its SHA-256 on every request (no cache), so a revoke or a
rotation takes effect on the next request, in every API process. No token, hash or
Authorization header is logged here or anywhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker
from starlette.routing import BaseRoute

from api import idempotency
from api.schemas import Forbidden, Problem
from domain.principals import BREAK_GLASS_NAME, Access, Principal, Role, roles_for
from ledger import principals
from ledger.transactions import in_transaction

BEARER_SCHEME = HTTPBearer(
    auto_error=False,
    description="A principal's token (`herald principals add`), or HERALD_OPERATOR_TOKEN "
    "(break-glass admin).",
)

PUBLIC_ROUTES: dict[str, str] = {
    "GET /healthz": "liveness; says nothing",
    "GET /readyz": "readiness; names a failing dependency, never a secret",
    "GET /metrics": "aggregates only; no PII in labels",
    "POST /v1/receipts/sms": "the provider's signature (X-Twilio-Signature)",
    "POST /v1/inbound/sms": "the provider's signature (X-Twilio-Signature)",
    "POST /v1/receipts/email/sendgrid": (
        "the provider's ECDSA signature (X-Twilio-Email-Event-Webhook-Signature)"
    ),
    "POST /v1/webhooks/telnyx": "Telnyx's Ed25519 signature (telnyx-signature-ed25519)",
    "GET /v1/unsubscribe/{value}": "the signed token in the link",
    "POST /v1/unsubscribe/{value}": "the signed token in the link",
    "GET /openapi.json": "the API's description",
    "HEAD /openapi.json": "the API's description",
    "GET /openapi-3.0.json": "the API's description (OpenAPI 3.0)",
    "HEAD /openapi-3.0.json": "the API's description (OpenAPI 3.0)",
    "GET /docs": "the API's description",
    "HEAD /docs": "the API's description",
    "GET /docs/oauth2-redirect": "the API's description",
    "HEAD /docs/oauth2-redirect": "the API's description",
    "GET /redoc": "the API's description",
    "HEAD /redoc": "the API's description",
}
"""Routes that take no principal's token, each with what protects it instead."""


GUARDED: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "No token, or an unknown or revoked one."},
    403: {"model": Forbidden, "description": "The token's role may not do this."},
}
"""The responses every guarded route adds to its own."""


class Authenticator:
    """Tokens to principals: HERALD_OPERATOR_TOKEN (break-glass admin) or the ledger."""

    def __init__(self, sessions: sessionmaker[Session], *, break_glass_token: str | None) -> None:
        self._sessions = sessions
        self._break_glass_sha256 = (
            principals.token_hash(break_glass_token) if break_glass_token else None
        )

    def is_break_glass(self, token: str) -> bool:
        return self.is_break_glass_digest(principals.token_hash(token))

    def is_break_glass_digest(self, token_sha256: str) -> bool:
        """Whether a stored SHA-256 (hex) is that of today's break-glass token: a console
        session opened with an earlier one ends when the token is changed."""
        return principals.hashes_to(token_sha256, self._break_glass_sha256)

    async def principal_of(self, authorization: str | None) -> Principal | None:
        """The principal an `Authorization` header authenticates, or None."""
        scheme, _, credentials = (authorization or "").partition(" ")
        token = credentials.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        return await self.principal_of_token(token)

    async def principal_of_token(self, token: str) -> Principal | None:
        if self.is_break_glass(token):
            return Principal(BREAK_GLASS_NAME, Role.ADMIN)
        now = datetime.now(UTC)
        return await in_transaction(
            self._sessions, lambda s: principals.authenticate(s, token, at=now)
        )

    async def principal_of_name(
        self, name: str, token: str, *, allowed: Callable[[Principal], bool] = lambda _: True
    ) -> Principal | None:
        """A sign-in form's name and token, checked against the ledger (constant-time); a
        principal `allowed` refuses is refused before anything is written."""
        now = datetime.now(UTC)
        return await in_transaction(
            self._sessions,
            lambda s: principals.authenticate_name(s, name, token, at=now, allowed=allowed),
        )


class Requirement:
    """A route's declared access, used as a dependency: it returns the principal that
    :class:`GuardedRoute` authenticated and checked (the check is the route class's)."""

    def __init__(self, access: Access) -> None:
        self.access = access

    async def __call__(
        self,
        request: Request,
        # Declared so the OpenAPI document shows the bearer scheme; read by GuardedRoute.
        _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER_SCHEME)],
    ) -> Principal:
        principal = getattr(request.state, "principal", None)
        if not isinstance(principal, Principal):
            raise RuntimeError("a guarded route must use GuardedRoute as its route class")
        return principal

    def __repr__(self) -> str:
        return f"require({self.access.name})"


_REQUIREMENTS = {access: Requirement(access) for access in Access}


def require(access: Access) -> Requirement:
    """The dependency a route declares its access with (one instance per access)."""
    return _REQUIREMENTS[access]


# A handler's parameter of one of these types declares the route's access and receives
# the authenticated principal.
CreatingIntents = Annotated[Principal, Depends(require(Access.CREATE_INTENTS))]
ReadingIntents = Annotated[Principal, Depends(require(Access.READ_INTENTS))]
ReadingEvidence = Annotated[Principal, Depends(require(Access.READ_EVIDENCE))]
FindingByRecipient = Annotated[Principal, Depends(require(Access.FIND_BY_RECIPIENT))]
RecordingConsent = Annotated[Principal, Depends(require(Access.RECORD_CONSENT))]
CancellingIntents = Annotated[Principal, Depends(require(Access.CANCEL_INTENTS))]
UploadingAttachments = Annotated[Principal, Depends(require(Access.UPLOAD_ATTACHMENTS))]
Operating = Annotated[Principal, Depends(require(Access.OPERATE))]
ReadingContent = Annotated[Principal, Depends(require(Access.READ_CONTENT))]
ReviewingContent = Annotated[Principal, Depends(require(Access.REVIEW_CONTENT))]
Administering = Annotated[Principal, Depends(require(Access.ADMINISTER))]


def _requirements(dependant: Dependant) -> set[Access]:
    found: set[Access] = set()
    if isinstance(dependant.call, Requirement):
        found.add(dependant.call.access)
    for sub in dependant.dependencies:
        found |= _requirements(sub)
    return found


def route_access(route: BaseRoute) -> Access | None:
    """The access a route declares (its one Requirement), or None."""
    if not isinstance(route, APIRoute):
        return None
    declared = _requirements(route.dependant)
    if len(declared) > 1:
        raise RuntimeError(f"{route.path} declares more than one access: {sorted(declared)}")
    return next(iter(declared), None)


def app_routes(app: FastAPI) -> Iterator[tuple[str, str, BaseRoute]]:
    """(method, full path, the route as declared) for every route the app serves,
    included routers' routes too (FastAPI keeps those nested)."""
    for context in iter_route_contexts(app.routes):
        path = context.path
        if path is None:
            continue
        for method in sorted(context.methods or ()):
            yield method, path, context.original_route


def undeclared_routes(app: FastAPI) -> list[str]:
    """`METHOD path` of routes that neither declare an access through GuardedRoute nor
    are public."""
    return [
        f"{method} {path}"
        for method, path, route in app_routes(app)
        if not (isinstance(route, GuardedRoute) and route_access(route) is not None)
        and f"{method} {path}" not in PUBLIC_ROUTES
    ]


def check_every_route_declared(app: FastAPI) -> None:
    missing = undeclared_routes(app)
    if missing:
        raise RuntimeError(
            "routes without a declared role (Depends(require(...)) on a GuardedRoute, or "
            f"an entry in api.auth.PUBLIC_ROUTES): {', '.join(missing)}"
        )


def unauthorized() -> JSONResponse:
    return JSONResponse(
        {"detail": "a valid bearer token is required"},
        status_code=401,
        headers={"WWW-Authenticate": "Bearer"},
    )


def forbidden(access: Access) -> JSONResponse:
    """403 naming the role needed (and the others that would do), never the caller's token."""
    allowed = roles_for(access)
    needed, others = allowed[0], allowed[1:]
    detail = f"{access.value} needs the {needed.value} role"
    if others:
        detail += f" (or {', '.join(r.value for r in others)})"
    return JSONResponse(
        {
            "detail": detail,
            "needed_role": needed.value,
            "allowed_roles": [r.value for r in allowed],
        },
        status_code=403,
    )


class GuardedRoute(APIRoute):
    """Authenticates and checks the route's declared access before anything else.

    A subclass may find the principal elsewhere (a session cookie) and answer a refusal
    otherwise (a redirect to a sign-in page) by overriding the three methods below.

    A route that takes an `api.idempotency.Idempotent` parameter answers through
    `api.idempotency.answer`, under the authenticated principal, and its document says so.
    """

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        self.idempotent = idempotency.opted_in(endpoint)
        if self.idempotent:
            kwargs["responses"] = idempotency.documented(
                kwargs.get("responses") or {}, kwargs.get("status_code"), Problem
            )
        super().__init__(path, endpoint, **kwargs)

    async def principal_of(self, request: Request) -> Principal | None:
        authenticator: Authenticator = request.app.state.authenticator
        return await authenticator.principal_of(request.headers.get("Authorization"))

    def unauthenticated(self, request: Request) -> Response:
        return unauthorized()

    def not_allowed(self, request: Request, access: Access) -> Response:
        return forbidden(access)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        access = route_access(self)
        if access is None:
            raise RuntimeError(f"{self.path}: a GuardedRoute must declare Depends(require(...))")

        async def checked(request: Request) -> Response:
            principal = await self.principal_of(request)
            if principal is None:
                return self.unauthenticated(request)
            if not principal.may(access):
                return self.not_allowed(request, access)
            request.state.principal = principal
            if self.idempotent:
                return await idempotency.answer(request, principal.name, handler)
            return await handler(request)

        return checked
