"""The SMS status callback without FastAPI's routing and dependency stack.

Every intent brings two signed status callbacks (`sent`, `delivered`); on the receipt
path FastAPI's middleware, router and dependency resolution were about a third of the
ingress's Python time (`herald bench --profile`, docs/bench.md). This middleware serves
`POST /v1/receipts/sms` when the request is the ordinary shape: at most one `token`
query parameter of at most TOKEN_MAX_LENGTH characters and nothing else in the query. It
sits inside `api.app.BodyLimit` (which has read the body, up to the limit, already) and
outside everything else. It calls the route's own handler
(`api.ingress.twilio.receive_sms_receipt`), so verification, deduplication, recording and the
signal are the same code; an HTTPException it raises becomes the JSON `{"detail": ...}`
answer FastAPI gives. Anything else (an unknown or repeated parameter, a long token,
another path) goes on to the app unchanged, where the route,
the body limit and the unknown-parameter rule answer as documented in the OpenAPI file.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from api.deps import Ingress
from api.ingress.receiving import TOKEN_MAX_LENGTH
from api.ingress.twilio import receive_sms_receipt
from api.query_params import has_control_character

PATH = "/v1/receipts/sms"


def _token_if_ordinary(query: bytes) -> tuple[bool, str | None]:
    """(served here?, the token): only a query of at most one short `token`."""
    if not query:
        return True, None
    try:
        pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
    except ValueError:
        return False, None
    if len(pairs) != 1 or pairs[0][0] != "token" or len(pairs[0][1]) > TOKEN_MAX_LENGTH:
        return False, None
    if has_control_character(pairs[0][1]):
        return False, None  # the app's parameter check refuses it in words
    return True, pairs[0][1]


class FastReceipts:
    """ASGI middleware: the ordinary SMS receipt straight to its handler."""

    def __init__(self, app: ASGIApp, ingress: Ingress) -> None:
        self.app = app
        self.ingress = ingress

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH:
            await self.app(scope, receive, send)
            return
        served, token = _token_if_ordinary(scope.get("query_string", b""))
        if not served:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await receive_sms_receipt(request, self.ingress, token)
        except HTTPException as err:
            response = JSONResponse(
                {"detail": err.detail}, status_code=err.status_code, headers=err.headers
            )
        await response(scope, receive, send)
