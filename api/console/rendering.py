"""How a console page is rendered: the templates, the headers every page carries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from api.console import reads
from api.console.sessions import SignedIn

HERE = Path(__file__).resolve().parent
templates = Jinja2Templates(directory=HERE / "templates")
templates.env.filters["when"] = reads.when
templates.env.globals["states"] = reads.STATES
templates.env.globals["attempt_states"] = reads.ATTEMPT_STATES
REFRESH_SECONDS = 5
HEADERS = {
    # Nothing but the app's own files; no inline script; never framed.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def page(
    request: Request,
    name: str,
    who: SignedIn | None,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    return templates.TemplateResponse(
        request,
        name,
        {"who": who, "refresh_seconds": REFRESH_SECONDS, **context},
        status_code=status_code,
        headers=HEADERS,
    )
