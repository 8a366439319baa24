"""The one-click unsubscribe link (RFC 8058) a recipient follows, authenticated by
Herald's own signature over the attempt token.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Response
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from api.deps import Ingress, IngressDep
from api.ingress.receiving import suppress
from api.intents import INVALID
from api.schemas import NO_CONTROL, Problem, Unsubscribed
from domain import channels
from domain.unsubscribe import verify_unsubscribe_token
from ledger import repository as repo
from ledger.errors import NotFound

router = APIRouter(tags=["recipients"])
"""The one-click unsubscribe link, signed by Herald."""
UNKNOWN_LINK: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem, "description": "Not a link Herald signed."},
    **INVALID,
}


LinkValue = Annotated[str, Path(pattern=NO_CONTROL, description="The signed link's value.")]


def verified(ingress: Ingress, value: str) -> str:
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
        **UNKNOWN_LINK,
    },
    summary="The confirmation page (changes nothing: link scanners fetch it)",
)
async def show_unsubscribe_page(value: LinkValue, ingress: IngressDep) -> HTMLResponse:
    verified(ingress, value)
    return HTMLResponse(
        "<!doctype html><html><head><meta charset='utf-8'><title>Unsubscribe</title>"
        "</head><body><form method='post'><p>Stop these emails?</p>"
        "<input type='hidden' name='List-Unsubscribe' value='One-Click'>"
        "<button type='submit'>Unsubscribe</button></form></body></html>"
    )


@router.post(
    "/v1/unsubscribe/{value}",
    response_model=Unsubscribed,
    responses=UNKNOWN_LINK,
    summary="RFC 8058 one-click unsubscribe",
)
async def unsubscribe_in_one_click(value: LinkValue, ingress: IngressDep) -> dict[str, str]:
    """Suppress email to the attempt's destination (idempotent)."""
    token = verified(ingress, value)

    def work(session: Session) -> None:
        attempt = repo.attempt_by_token(session, token)
        # RFC 8058 one-click unsubscribe is an email header: it suppresses email.
        suppress(
            session, attempt.destination_hmac, channels.EMAIL.name, "unsubscribed", "one-click"
        )

    try:
        await ingress.tx(work)
    except NotFound as err:
        # Signed, but naming no attempt the ledger holds: to the recipient an unknown link,
        # in this route's own words (the ledger's message names the token).
        raise HTTPException(404, "unknown unsubscribe link") from err
    return {"status": "unsubscribed"}
