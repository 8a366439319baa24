"""Signing in to the console and out of it."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.console import sessions, sign_in_answer
from api.console.deps import Who, checked
from api.console.rendering import page
from api.deps import IngressDep
from ledger.sign_in_throttle import FORM_LIFETIME

log = logging.getLogger("herald.console")
router = APIRouter(prefix="/console", include_in_schema=False)

LOGIN_COOKIE = "herald_console_login"

OPEN_PAGES = {"GET /console/sign-in", "POST /console/sign-in"}
"""The only console routes without a session."""


def sign_in_form(request: Request, status_code: int = 200, **context: Any) -> HTMLResponse:
    """The sign-in page with a fresh pre-session CSRF pair (cookie + hidden field), good
    for one post (api.console.sign_in_answer)."""
    token = sign_in_answer.form_token(sessions.now())
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
        max_age=int(FORM_LIFETIME.total_seconds()),
    )
    return response


@router.get("/sign-in", response_class=HTMLResponse)
async def sign_in_page(request: Request) -> HTMLResponse:
    return sign_in_form(request)


@router.post("/sign-in", response_class=HTMLResponse)
async def sign_in(
    request: Request,
    ingress: IngressDep,
    name: Annotated[str, Form(max_length=120)] = "",
    token: Annotated[str, Form(max_length=500)] = "",
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    """The throttle, the one-use form and the credentials (sign_in_answer.answer), then
    the session cookie."""
    answer = await sign_in_answer.answer(
        ingress,
        name=name.strip(),
        token=token.strip(),
        # The socket peer, or the client a trusted proxy named (api.server.server_config).
        address=request.client.host if request.client else "unknown",
        cookie_csrf=request.cookies.get(LOGIN_COOKIE),
        form_csrf=csrf,
    )
    principal = answer.principal
    if principal is None:
        refused = sign_in_form(
            request,
            answer.status,
            error=answer.message,
            entered_name=name,
            retry=answer.status == 429,
        )
        if answer.retry_after is not None:
            refused.headers["Retry-After"] = str(answer.retry_after)
        return refused
    value, _ = await ingress.tx(
        lambda s: sessions.start(s, principal, token.strip(), sessions.now())
    )
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
    request: Request, who: Who, ingress: IngressDep, csrf: Annotated[str | None, Form()] = None
) -> Response:
    checked(who, csrf, act=False)
    value = request.cookies.get(sessions.COOKIE, "")
    await ingress.tx(lambda s: sessions.end(s, value, sessions.now()))
    response = RedirectResponse("/console/sign-in", status_code=303)
    response.delete_cookie(sessions.COOKIE, path="/console")
    return response
