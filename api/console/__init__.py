"""The operator console served by `herald api` at /console (see docs/console.md).

A presentation layer only: pages read `api.console.reads` (over the ledger's read models)
and actions go through the same paths as the JSON API (`HeraldClient.cancel` and
`approve_resend`, `ledger.evidence`), so there is one set of rules. Contact data never
reaches a URL: the recipient search and the recipient's page are POST forms, and a
destination is shown only in the answer to a reveal that names its reason.

One module per group of pages (`PAGE_GROUPS`), each with its `router`; what they share is
in `deps` (the session, the form checks) and `rendering` (templates and headers).
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.responses import RedirectResponse, Response
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from markupsafe import Markup

from api import auth
from api.console import (
    errors,
    intent,
    intents,
    overview,
    reads,
    recipient,
    reconciliation,
    sign_in,
    versions,
)
from api.console.deps import SignInNeeded, signed_in
from api.console.headers import SecurityHeaders
from api.console.rendering import HERE, templates
from api.console.sign_in import OPEN_PAGES

PAGE_GROUPS = (sign_in, overview, intents, intent, reconciliation, recipient, versions)
"""Each module holds one group of pages and its `router`."""

SESSION_GUARD = "the console's signed-in session (api.console); actions check the role"


async def _to_sign_in(request: Request, exc: Exception) -> Response:
    return RedirectResponse("/console/sign-in", status_code=303)


def _needs_session(dependant: Dependant) -> bool:
    return any(sub.call is signed_in or _needs_session(sub) for sub in dependant.dependencies)


def time_element(value: datetime | str | None) -> Markup:
    """A time as the pages show it: the console's one format (`2026-12-07 20:04:50 UTC`)
    in a `<time>` element, which console.js shows in the browser's zone when asked."""
    if value is None:
        return Markup("")
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return Markup('<time datetime="{}">{}</time>').format(
        moment.astimezone(UTC).isoformat(), reads.when(moment)
    )


def mount_console(app: FastAPI) -> None:
    """The console's pages and static files, and `GET /` leading to it.

    Every console route but the sign-in page depends on the signed-in session; it is
    checked here (a route without it refuses to mount) and registered in
    `api.auth.PUBLIC_ROUTES` as guarded by the session rather than a bearer token.
    """
    templates.env.filters["at"] = time_element
    templates.env.globals["rendered_at"] = lambda: time_element(datetime.now(UTC))
    for group in PAGE_GROUPS:
        for route in group.router.routes:
            assert isinstance(route, APIRoute)
            keys = [f"{method} {route.path}" for method in sorted(route.methods or ())]
            if not _needs_session(route.dependant) and not set(keys) <= OPEN_PAGES:
                raise RuntimeError(f"console route {route.path} does not require a session")
            for key in keys:
                auth.PUBLIC_ROUTES.setdefault(
                    key, "the sign-in form" if key in OPEN_PAGES else SESSION_GUARD
                )
        app.include_router(group.router)
    auth.PUBLIC_ROUTES.setdefault("GET /", "a redirect to the console")
    app.mount("/console/static", StaticFiles(directory=HERE / "static"), name="console-static")
    app.add_exception_handler(SignInNeeded, _to_sign_in)
    # Every console error a page that says what happened and what to do (not JSON).
    errors.install(app, templates)
    # Every answer under /console, errors and the CSV included, and /docs and /redoc.
    app.add_middleware(SecurityHeaders)

    @app.get("/", include_in_schema=False)
    async def root() -> Response:
        return RedirectResponse("/console", status_code=303)
