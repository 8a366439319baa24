"""How a console page is rendered: the templates and what every page is given. The
headers every answer carries are set by `api.console.headers.SecurityHeaders`."""

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
SEARCH_COUNTRIES = (
    "GB", "IE", "US", "CA", "AU", "NZ", "ZA", "IN",
    "FR", "DE", "ES", "IT", "NL", "BE", "PT", "AT", "CH", "SE", "DK", "NO", "FI", "PL",
)  # fmt: skip
"""The search box's choice of country for a number in national form (the default, from
HERALD_DEFAULT_COUNTRY, is added when it is not one of these)."""


def page(
    request: Request,
    name: str,
    who: SignedIn | None,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    ingress = getattr(request.app.state, "ingress", None)
    default_country = getattr(ingress, "default_country", "GB")
    countries = sorted({*SEARCH_COUNTRIES, default_country})
    return templates.TemplateResponse(
        request,
        name,
        {
            "who": who,
            "refresh_seconds": REFRESH_SECONDS,
            "default_country": default_country,
            "search_countries": countries,
            **context,
        },
        status_code=status_code,
    )
