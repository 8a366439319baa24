"""The ledger's "not found" is answered once, by `api.errors.answer_not_found`: a NotFound
that says what a caller may be told is a 404 with exactly those words (never the key it
looked for); one that does not is a fault (500), as before; the answer goes through the
app's own handler for HTTP errors, so the console can answer its paths with a page."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api import errors
from ledger.errors import NO_INTENT, AmbiguousKey, NotFound
from tests.api.conftest import BEARER, INTERNAL_BASE

KEY = "order-created:+447400000177"


def raising(exc: Exception) -> FastAPI:
    app = FastAPI()
    errors.install_error_answers(app)

    @app.get("/v1/thing")
    async def read_thing() -> None:
        raise exc

    @app.get("/console/thing")
    async def show_thing() -> None:
        raise exc

    return app


async def get(app: FastAPI, path: str = "/v1/thing") -> httpx.Response:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=INTERNAL_BASE
    ) as http:
        return await http.get(path)


async def test_a_not_found_with_an_answer_is_404_with_those_words_and_not_the_key() -> None:
    answer = await get(
        raising(NotFound(f"no intent with id or business key {KEY!r}", answer=NO_INTENT))
    )
    assert (answer.status_code, answer.json()) == (404, {"detail": NO_INTENT})
    assert "447400000177" not in answer.text


async def test_an_ambiguous_key_is_a_not_found_like_any_other() -> None:
    answer = await get(raising(AmbiguousKey("in several namespaces (a, b)", answer=NO_INTENT)))
    assert (answer.status_code, answer.json()) == (404, {"detail": NO_INTENT})


async def test_a_not_found_without_an_answer_stays_a_fault() -> None:
    answer = await get(raising(NotFound("no active policy version")))
    assert answer.status_code == 500
    assert answer.json() == {"detail": "internal error; the API's log names it"}


async def test_the_404_goes_through_the_apps_own_handler_for_http_errors() -> None:
    app = raising(NotFound("no suppression 7", answer="no suppression 7"))

    async def page(request: Request, exc: Exception) -> PlainTextResponse:
        assert isinstance(exc, StarletteHTTPException)
        return PlainTextResponse(f"page: {exc.detail}", status_code=exc.status_code)

    app.add_exception_handler(StarletteHTTPException, page)
    answer = await get(app, "/console/thing")
    assert (answer.status_code, answer.text) == (404, "page: no suppression 7")


# --- the routes that used to say it themselves, through the real app ------------------


@pytest.mark.ledger
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/intents/{key}", None),
        ("POST", "/v1/intents/{key}/cancel", {"reason": "customer asked"}),
        ("POST", "/v1/intents/{key}/approve-resend", {"channel": "sms", "reason": "checked"}),
        ("POST", "/v1/intents/{key}/lookup", {"channel": "sms"}),
        ("POST", "/v1/intents/{key}/settle", {"rule": "x", "reason": "r"}),
    ],
)
async def test_an_unknown_intent_is_the_same_404_on_every_route(http, method, path, body):
    answer = await http.request(method, path.format(key=KEY), json=body, headers=BEARER)
    assert (answer.status_code, answer.json()) == (404, {"detail": NO_INTENT})


@pytest.mark.ledger
async def test_an_unknown_principal_is_404_naming_it(http):
    answer = await http.post("/v1/principals/nobody-here/revoke", headers=BEARER)
    assert (answer.status_code, answer.json()) == (
        404,
        {"detail": "no principal named 'nobody-here'"},
    )
