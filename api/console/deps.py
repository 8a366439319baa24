"""What console routes depend on: the signed-in session (`Who`) and the form checks.

`api.console.mount_console` refuses a route that does not depend on `signed_in`
(found by identity) unless it is one of the sign-in pages.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Form, HTTPException, Request
from pydantic import AfterValidator
from sqlalchemy.orm import Session

from api.console import sessions
from api.console.sessions import SignedIn
from api.deps import IngressDep
from domain import key_privacy


def _worded(reason: str) -> str:
    if not key_privacy.is_worded(reason):
        raise ValueError("has no visible character (rule reason.worded): say why in words")
    return reason


Reason = Annotated[str, Form(min_length=1, max_length=500), AfterValidator(_worded)]
"""An operator's reason, in words: one with no visible character is refused."""


class SignInNeeded(Exception):
    """No live session: the answer is the sign-in page."""


async def signed_in(request: Request, ingress: IngressDep) -> SignedIn:
    """The live session the cookie names; without one, the sign-in page. A request the
    page's own refresh sent (its REFRESH_HEADER) is not a person's use: it leaves the
    session's idle clock alone."""
    value = request.cookies.get(sessions.COOKIE)
    used = sessions.REFRESH_HEADER not in request.headers

    def work(session: Session) -> SignedIn | None:
        return sessions.resume(
            session,
            value,
            sessions.now(),
            break_glass=ingress.auth.is_break_glass_digest,
            used=used,
            lifetime=ingress.console_session_lifetime,
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
