"""Signing in to the console and out of it."""

from __future__ import annotations

import logging
import secrets
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.console import sessions
from api.console.deps import Who, checked
from api.console.rendering import page
from api.deps import Ingress, IngressDep
from domain.principals import BREAK_GLASS_NAME, Principal, Role

log = logging.getLogger("herald.console")
router = APIRouter(prefix="/console", include_in_schema=False)

LOGIN_COOKIE = "herald_console_login"

OPEN_PAGES = {"GET /console/sign-in", "POST /console/sign-in"}
"""The only console routes without a session."""


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
    ingress: IngressDep,
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
    request: Request, who: Who, ingress: IngressDep, csrf: Annotated[str | None, Form()] = None
) -> Response:
    checked(who, csrf, act=False)
    value = request.cookies.get(sessions.COOKIE, "")
    await ingress.tx(lambda s: sessions.end(s, value, sessions.now()))
    response = RedirectResponse("/console/sign-in", status_code=303)
    response.delete_cookie(sessions.COOKIE, path="/console")
    return response


async def _authenticate(ingress: Ingress, name: str, token: str) -> Principal | None:
    """A ledger principal by name and token; HERALD_OPERATOR_TOKEN signs in as the
    break-glass admin under its reserved name."""
    if name == BREAK_GLASS_NAME:
        return (
            Principal(BREAK_GLASS_NAME, Role.ADMIN) if ingress.auth.is_break_glass(token) else None
        )
    return await ingress.auth.principal_of_name(name, token)
