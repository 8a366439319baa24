"""The operator console served by `herald api` at /console (see docs/console.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from api.console.pages import HERE, SignInNeeded, console_router

if TYPE_CHECKING:
    from api.app import Ingress


async def _to_sign_in(request: Request, exc: Exception) -> Response:
    return RedirectResponse("/console/sign-in", status_code=303)


def mount_console(app: FastAPI, ingress: Ingress) -> None:
    """The console's pages and static files, and `GET /` leading to it."""
    app.include_router(console_router(ingress))
    app.mount("/console/static", StaticFiles(directory=HERE / "static"), name="console-static")
    app.add_exception_handler(SignInNeeded, _to_sign_in)

    @app.get("/", include_in_schema=False)
    async def root() -> Response:
        return RedirectResponse("/console", status_code=303)
