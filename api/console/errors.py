"""Every console error is a page: what happened and what to do, never `{"detail": ...}`.

The app's handlers for HTTP errors, form validation errors and unexpected exceptions
answer a request under /console with `error.html` (the same status code, the pages'
headers; 503 with Retry-After when the ledger or Temporal is down, `api.errors`) and leave
every other path's answer as the JSON API has it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.console.headers import CONSOLE_HEADERS
from api.errors import RETRY_AFTER_SECONDS, answer_error, status_of

log = logging.getLogger("herald.console")

Handler = Callable[[Request, Exception], Awaitable[Response]]


@dataclass(frozen=True)
class Explained:
    title: str
    what: str
    todo: str


def is_console(request: Request) -> bool:
    path = request.url.path
    return path == "/console" or path.startswith("/console/")


def explain(status: int, detail: str) -> Explained:
    """What a console error means for the person who met it, and what to do next."""
    if status == 403 and "csrf" in detail.lower():
        return Explained(
            "This form has expired",
            "The form was opened in an earlier session, or its page was open too long, so "
            "it was not accepted. Nothing was changed.",
            "Go back, reload the page and send the form again.",
        )
    if status == 403:
        return Explained(
            "Your role does not allow this",
            f"Nothing was changed: {detail.rstrip('.')}. A role changed since the page was "
            "opened applies at once.",
            "Ask an admin for the operator role if you need it (herald principals), or ask "
            "an operator to do it.",
        )
    if status == 404:
        detail = "no such page" if detail.lower() == "not found" else detail
        return Explained(
            "Not found",
            f"There is {detail.rstrip('.')}: the link may be old or mistyped.",
            "Find it from the list of intents or the search box above.",
        )
    if status == 400:
        return Explained(
            "That cannot be read",
            f"Part of the address could not be read ({detail.rstrip('.')}). Nothing was changed.",
            "Go back and correct it.",
        )
    if status == 405:
        return Explained(
            "Not a page",
            "This address takes a form, not a visit (or a visit, not a form).",
            "Start again from the overview.",
        )
    if status == 409:
        return Explained(
            "Refused",
            f"{detail[:1].upper()}{detail[1:].rstrip('.')}.",
            "Go back and reload the page: it shows things as they are now.",
        )
    if status == 422 and "no_contact_data" in detail:
        return Explained(
            "The form holds contact data",
            f"{detail[:1].upper()}{detail[1:].rstrip('.')}.",
            "Go back, write it without the number or address, and send the form again.",
        )
    if status == 422:
        return Explained(
            "Something in the form is missing",
            f"{detail}. Nothing was changed.",
            "Go back, fill it in and send the form again.",
        )
    if status == 503:
        return Explained(
            "Herald cannot reach its ledger or Temporal",
            "A service the console stands on is unavailable for the moment, so nothing "
            "could be read or changed.",
            "Try again in a few seconds; if it lasts, tell the engineer on call "
            "(`herald doctor` says which service is missing).",
        )
    if status >= 500:
        return Explained(
            "Something went wrong on our side",
            "The console could not answer. Nothing you sent is lost from the ledger's "
            "point of view: an action either was recorded in full or not at all.",
            "Try again in a moment; if it keeps happening, tell the engineer on call "
            "(the API's log has the details).",
        )
    return Explained(f"Error {status}", detail, "Start again from the overview.")


FIELD_NAMES = {
    "reason": "a reason",
    "note": "a resolution note",
    "channel": "a channel",
    "csrf": "the form's token",
}


def _validation_detail(exc: RequestValidationError) -> str:
    fields = []
    for error in exc.errors():
        name = str(error.get("loc", ("", ""))[-1])
        label = FIELD_NAMES.get(name, name.replace("_", " "))
        if "reason.worded" in str(error.get("msg", "")):
            label += " in words (the one given has no visible character)"
        fields.append(label)
    listed = ", ".join(dict.fromkeys(fields)) or "a field"
    return f"The form needs {listed} (given and not too long)"


def install(app: FastAPI, templates: Jinja2Templates) -> None:
    """Answer the console's errors with pages; wraps the app's handlers for other paths."""
    json_validation: Handler | None = app.exception_handlers.get(RequestValidationError)  # type: ignore[assignment]
    json_405: Handler | None = app.exception_handlers.get(405)  # type: ignore[assignment]
    json_crash: Handler = app.exception_handlers.get(Exception, answer_error)  # type: ignore[assignment]

    def page(request: Request, status: int, detail: str) -> Response:
        return templates.TemplateResponse(
            request,
            "error.html",
            {"who": None, "status": status, "error": explain(status, detail)},
            status_code=status,
        )

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if not is_console(request):
            if exc.status_code == 405 and json_405 is not None:
                return await json_405(request, exc)
            return await http_exception_handler(request, exc)
        return page(request, exc.status_code, str(exc.detail))

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        if not is_console(request):
            if json_validation is not None:
                return await json_validation(request, exc)
            raise exc
        return page(request, 422, _validation_detail(exc))

    async def on_crash(request: Request, exc: Exception) -> Response:
        if not is_console(request):
            return await json_crash(request, exc)
        status = status_of(exc)
        log.error(
            "console error on %s %s: %s answered %d",
            request.method,
            request.url.path,
            type(exc).__name__,
            status,
        )
        crashed = page(request, status, "")
        if status == 503:
            crashed.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        # Possibly answered outside every middleware (Starlette's ServerErrorMiddleware),
        # so the headers SecurityHeaders gives every other console answer are set here.
        crashed.headers.update(CONSOLE_HEADERS)
        return crashed

    app.add_exception_handler(StarletteHTTPException, on_http)
    # A handler by status code comes before one by class: the 405's is wrapped too.
    app.add_exception_handler(405, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(Exception, on_crash)
