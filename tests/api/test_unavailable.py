"""With the ledger's Postgres or Temporal down, the API answers what an app can parse: 503
JSON naming the dependency, with Retry-After; a fault is 500 in the same shape. No
traceback reaches the log, the provider's webhook still gets a 5xx (it retries), and the
console shows its error page.

The ledger is a Postgres URL on a port nothing listens on (refused at once, as a stopped
server is); Temporal is a stub whose every call fails as an unreachable frontend does.
"""

from __future__ import annotations

import logging
import secrets
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker
from temporalio.service import RPCError, RPCStatusCode

from api import errors
from api.console.sessions import COOKIE
from ledger.crypto import FieldCipher
from ledger.engine import ledger_engine
from ledger.models import OperatorAction
from starter.client import DESCRIBE_TIMEOUT
from tests.api.conftest import (
    BEARER,
    INTERNAL_BASE,
    StubTemporal,
    build_app,
    post_signed,
    random_mobile,
)
from tests.api.test_intents_api import body
from tests.api.test_opt_out import inbound
from tests.conftest import TEST_KEYRING


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DownHandle:
    failure: Exception = RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b"")

    asked: dict[str, Any] = {}

    async def describe(self, **options: Any) -> Any:
        DownHandle.asked = options
        raise self.failure

    async def signal(self, *_: Any) -> None:
        raise RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b"")

    async def execute_update(self, *_: Any, **__: Any) -> Any:
        raise RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b"")


class DownTemporal(StubTemporal):
    """Temporal's frontend unreachable: every call fails UNAVAILABLE (what the client
    raises once its own retries are spent)."""

    def get_workflow_handle(self, workflow_id: str, **_: Any) -> DownHandle:  # type: ignore[override]
        return DownHandle()

    async def start_workflow(self, *_: Any, **__: Any) -> None:
        raise RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b"")


@pytest_asyncio.fixture
async def down() -> AsyncIterator[httpx.AsyncClient]:
    engine = ledger_engine(f"postgresql+psycopg://herald@127.0.0.1:{_closed_port()}/herald")
    app, _ = build_app(
        sessionmaker(engine, expire_on_commit=False), FieldCipher(TEST_KEYRING), DownTemporal()
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=INTERNAL_BASE
    ) as http:
        yield http
    engine.dispose()


def _is_503_problem(answer: httpx.Response) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["Retry-After"] == str(errors.RETRY_AFTER_SECONDS)
    assert answer.json() == {
        "detail": f"the ledger is unavailable; retry in {errors.RETRY_AFTER_SECONDS} s"
    }


async def test_a_read_a_create_and_an_operator_action_are_503_json_with_retry_after(
    down: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    key = f"class-opening:c-{secrets.token_hex(3)}:m-1"
    _is_503_problem(await down.get(f"/v1/intents/{key}", headers=BEARER))
    _is_503_problem(
        await down.post(
            "/v1/intents",
            headers=BEARER,
            json={
                "business_key": key,
                "recipient_ref": "m-1",
                "template_key": "class-opening",
                "phone": "+447400000100",
            },
        )
    )
    _is_503_problem(
        await down.post(f"/v1/intents/{key}/cancel", headers=BEARER, json={"reason": "seat filled"})
    )
    # One line each, no traceback, no key from the path (the route's template instead).
    lines = [r for r in caplog.records if r.name == "herald.api" and "503" in r.getMessage()]
    assert len(lines) == 3
    assert all(r.exc_info is None for r in caplog.records)
    assert all(key not in r.getMessage() for r in caplog.records if r.name.startswith("herald"))
    assert "/v1/intents/{id_or_key}/cancel" in lines[-1].getMessage()


async def test_the_providers_webhooks_get_a_5xx_so_they_retry(down: httpx.AsyncClient) -> None:
    receipt = {"MessageSid": "SM" + secrets.token_hex(16), "MessageStatus": "delivered"}
    # The ordinary receipt (api.ingress.fast_receipts) and an inbound STOP (through the router).
    _is_503_problem(await post_signed(down, "/v1/receipts/sms", receipt))
    _is_503_problem(await post_signed(down, "/v1/inbound/sms", inbound(random_mobile(), "STOP")))


async def test_the_console_answers_with_its_page_not_json(down: httpx.AsyncClient) -> None:
    down.cookies.set(COOKIE, secrets.token_urlsafe(32))  # a session the ledger would check
    answer = await down.get("/console/intents")
    assert answer.status_code == 503
    assert answer.headers["content-type"].startswith("text/html")
    assert answer.headers["Retry-After"] == str(errors.RETRY_AFTER_SECONDS)
    assert "cannot reach its ledger or Temporal" in answer.text


@pytest.mark.ledger
@pytest.mark.parametrize(
    "failure",
    [
        RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b""),
        # A frontend that takes the connection and never answers (DESCRIBE_TIMEOUT).
        RPCError("deadline exceeded", RPCStatusCode.DEADLINE_EXCEEDED, b""),
        RuntimeError("Failed client connect: Server connection error"),
    ],
    ids=["unavailable", "no-answer", "never-connected"],
)
async def test_with_temporal_down_a_cancel_is_503_and_records_nothing(
    committed: sessionmaker[Any],
    cipher: FieldCipher,
    failure: Exception,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Postgres answers, Temporal does not: the cancel cannot know whether the workflow
    runs, so it is refused with 503, never recorded as "the intent had already finished"."""
    app, _ = build_app(committed, cipher, StubTemporal())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=INTERNAL_BASE
    ) as http:
        created = await http.post("/v1/intents", headers=BEARER, json=body())
        assert created.status_code == 201, created.text
        key, intent_id = created.json()["business_key"], created.json()["intent_id"]
    monkeypatch.setattr(DownHandle, "failure", failure)
    app, _ = build_app(committed, cipher, DownTemporal())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=INTERNAL_BASE
    ) as http:
        answer = await http.post(
            f"/v1/intents/{key}/cancel", headers=BEARER, json={"reason": "seat filled"}
        )
        assert answer.status_code == 503
        assert answer.headers["Retry-After"] == str(errors.RETRY_AFTER_SECONDS)
        assert answer.json()["detail"].startswith("Temporal is unavailable")
        # Bounded: a frontend that never answers is a deadline, not a hung request.
        assert DownHandle.asked == {"rpc_timeout": DESCRIBE_TIMEOUT}
    with committed() as session:
        actions = session.scalars(
            select(OperatorAction).where(OperatorAction.intent_id == intent_id)
        ).all()
    assert actions == []


async def test_a_fault_is_500_in_the_same_shape_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from fastapi import FastAPI

    app = FastAPI()
    errors.install_error_answers(app)

    @app.get("/v1/boom")
    async def boom() -> None:
        raise KeyError("m-1842 +447400000100")  # what a fault may hold must not be echoed

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=INTERNAL_BASE
    ) as http:
        answer = await http.get("/v1/boom")
    assert answer.status_code == 500
    assert answer.json() == {"detail": "internal error; the API's log names it"}
    assert "Retry-After" not in answer.headers
    (line,) = [r for r in caplog.records if r.name == "herald.api"]
    assert line.exc_info is None
    assert "KeyError at api/test_unavailable.py:" in line.getMessage()
    assert "447400000100" not in line.getMessage()
    doc = app.openapi()["paths"]["/v1/boom"]["get"]["responses"]
    assert {"500", "503"} <= set(doc)
    assert "Retry-After" in doc["503"]["headers"]


async def test_no_v1_operation_answers_500_with_the_ledger_down(down: httpx.AsyncClient) -> None:
    """Every operation of the document, with a token and a well-formed body where one is
    easy to make: refused before the ledger (4xx), or 503 JSON with Retry-After."""
    doc = (await down.get("/openapi.json")).json()
    bodies = {
        "/v1/intents": body(),
        "/v1/consents": {"recipient_ref": "m-1", "channel": "sms"},
    }
    statuses = {}
    for path, operations in doc["paths"].items():
        if not path.startswith("/v1/"):
            continue
        for method in operations:
            url = path.replace("{id_or_key}", "class-opening:c-1:m-1")
            url = url.replace("{", "").replace("}", "")
            answer = await down.request(
                method.upper(),
                url,
                headers=BEARER,
                json=bodies.get(path, {"reason": "seat filled", "channel": "sms"}),
            )
            statuses[f"{method.upper()} {path}"] = answer.status_code
            assert answer.status_code != 500, (method, path, answer.text)
            if answer.status_code >= 500:
                _is_503_problem(answer)
    unavailable = {operation for operation, status in statuses.items() if status == 503}
    assert {
        "POST /v1/intents",
        "GET /v1/intents",
        "GET /v1/intents/{id_or_key}",
        "POST /v1/intents/{id_or_key}/approve-resend",
        "POST /v1/consents",
        "GET /v1/principals",
        "GET /v1/settlement-rules",
    } <= unavailable, statuses
