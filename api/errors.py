"""What an app reads when a request fails for a reason that is not its own: a dependency
that is down (503, with Retry-After) or a fault in Herald (500), both in the API's one
error shape (`api.schemas.Problem`, `{"detail": "..."}`), never a traceback.

The ledger's "not found" is answered here too, once for every route: a `NotFound` that
carries an `answer` (what a caller may be told: `ledger.errors.NotFound`) is a 404 with
that `detail`, answered as `HTTPException(404, answer)` would be (so the console's pages
answer their own paths); one without is a fault like any other.

`install_error_answers(app)` puts this on any FastAPI app in one call (the full ingress
of `api.app.create_app`, or an app that serves only part of it). Call it before
`api.console.mount_console`: the console wraps the handler installed here so that its
own pages answer its paths (an HTML error page, not JSON).

Why a middleware as well as a handler: Starlette answers an unhandled exception through
its outermost layer (`ServerErrorMiddleware`) and then raises it again, so the server
logs a traceback, and SQLAlchemy's and Temporal's messages carry statements, parameters
and addresses. `ErrorAnswers` catches it just inside that layer, answers through the
app's handler and logs one line (the class, the route template and where it was raised).
"""

from __future__ import annotations

import copy
import logging
import traceback
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, Response
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from api.schemas import Problem
from ledger.errors import NotFound

log = logging.getLogger("herald.api")

RETRY_AFTER_SECONDS = 5
"""What a 503 asks the caller to wait before trying again (`Retry-After`): long enough
for a Postgres restart or a Temporal frontend's failover, short enough for an app."""

LEDGER_DOWN = (
    sa_exc.OperationalError,  # connection refused, server closed the connection, timeouts
    sa_exc.InterfaceError,
    sa_exc.DisconnectionError,
    sa_exc.TimeoutError,  # no pooled connection came free in time
)
"""SQLAlchemy's errors that mean "the ledger's Postgres cannot be reached or answer"."""

TEMPORAL_DOWN_STATUSES = frozenset({RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED})
"""The gRPC statuses that mean "Temporal's frontend cannot be reached or did not answer"."""


def unavailable_dependency(exc: BaseException) -> str | None:
    """ "the ledger" or "Temporal" when `exc` (or what caused it) is that dependency being
    unreachable, else None (a fault to answer 500)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, LEDGER_DOWN):
            return "the ledger"
        if isinstance(current, RPCError) and current.status in TEMPORAL_DOWN_STATUSES:
            return "Temporal"
        if isinstance(current, WorkflowUpdateRPCTimeoutOrCancelledError):
            return "Temporal"
        if isinstance(current, RuntimeError) and "client connect" in str(current).lower():
            return "Temporal"  # a lazy client's first call ("Failed client connect: ...")
        current = current.__cause__ or current.__context__
    return None


def status_of(exc: BaseException) -> int:
    """503 for a dependency that is down, 500 for anything else."""
    return 503 if unavailable_dependency(exc) else 500


def _raised_at(exc: BaseException) -> str:
    """`file:line` of the innermost frame: enough to find the fault, nothing it held."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{'/'.join(PurePath(last.filename).parts[-2:])}:{last.lineno}"


def _route_of(request: Request) -> str:
    """The route's template (`/v1/intents/{id_or_key}`), never the path as sent: a path
    carries business keys and tokens (the access log keeps parameter names only)."""
    route = request.scope.get("route")
    return getattr(route, "path", None) or "(no route)"


async def answer_error(request: Request, exc: Exception) -> JSONResponse:
    """The app's handler for an exception nothing else answered: 503 naming the
    dependency, with Retry-After, or 500; `{"detail": ...}` either way."""
    dependency = unavailable_dependency(exc)
    if dependency is not None:
        log.warning(
            "%s %s answered 503: %s is unavailable (%s)",
            request.method,
            _route_of(request),
            dependency,
            type(exc).__name__,
        )
        return JSONResponse(
            {"detail": f"{dependency} is unavailable; retry in {RETRY_AFTER_SECONDS} s"},
            status_code=503,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    log.error(
        "%s %s answered 500: %s at %s",
        request.method,
        _route_of(request),
        type(exc).__name__,
        _raised_at(exc),
    )
    return JSONResponse({"detail": "internal error; the API's log names it"}, status_code=500)


async def answer_not_found(request: Request, exc: Exception) -> Response:
    """404 with the `answer` of a `NotFound` that has one, through the app's own handler
    for HTTP errors; any other is raised on, to be answered as the fault it is."""
    if not isinstance(exc, NotFound) or exc.answer is None:
        raise exc
    handler = request.app.exception_handlers.get(StarletteHTTPException, http_exception_handler)
    response: Response = await handler(request, HTTPException(404, exc.answer))
    return response


class ErrorAnswers:
    """ASGI middleware: an exception from inside becomes the app's answer for it (the
    handler registered for `Exception`), instead of reaching the server's traceback."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            if started:
                raise  # half an answer is out: only the server can end it
            handler = scope["app"].exception_handlers.get(Exception, answer_error)
            response = await handler(Request(scope, receive), exc)
            await response(scope, receive, send)


PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}

ERROR_RESPONSES: dict[str, dict[str, Any]] = {
    "500": {
        "description": "A fault in Herald; `detail` says so, no more.",
        "content": {"application/json": {"schema": PROBLEM_REF}},
    },
    "503": {
        "description": "The ledger (Postgres) or Temporal is unavailable; retry after "
        "`Retry-After` seconds. `detail` names which.",
        "headers": {
            "Retry-After": {
                "description": "Seconds to wait before trying again.",
                "schema": {"type": "integer", "example": RETRY_AFTER_SECONDS},
            }
        },
        "content": {"application/json": {"schema": PROBLEM_REF}},
    },
}
"""What every /v1 operation may answer besides its own responses."""

HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


def declare_error_answers(doc: dict[str, Any]) -> dict[str, Any]:
    """Add 500 and 503 (with Retry-After) to every /v1 operation of an OpenAPI document;
    a 503 an operation declares itself keeps its words and gains the header. Done on the
    document, not the routes: it is the same for every route, however routers nest."""
    for path, operations in doc.get("paths", {}).items():
        if not path.startswith("/v1/"):
            continue
        for method, operation in operations.items():
            if method not in HTTP_METHODS:
                continue
            responses = operation.setdefault("responses", {})
            for status, declared in ERROR_RESPONSES.items():
                own = responses.get(status)
                if own is None:
                    responses[status] = copy.deepcopy(declared)
                elif "headers" in declared:
                    own.setdefault("headers", {}).update(copy.deepcopy(declared["headers"]))
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("Problem", Problem.model_json_schema())
    return doc


def install_error_answers(app: FastAPI) -> None:
    """Answer every unhandled exception as above, and say so in the OpenAPI document."""
    app.add_exception_handler(Exception, answer_error)
    app.add_exception_handler(NotFound, answer_not_found)
    app.add_middleware(ErrorAnswers)
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = declare_error_answers(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
