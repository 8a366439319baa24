"""/healthz says the process answers; /readyz says the ledger and Temporal do too, and
names the one that does not."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from devstack import free_port
from tests.api.conftest import INTERNAL_BASE, build_app

pytestmark = pytest.mark.ledger


async def test_ready_when_the_ledger_and_temporal_answer(http, temporal):
    response = await http.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": {"ledger": "ok", "temporal": "ok"}}


async def test_not_ready_names_temporal_when_its_frontend_is_down(http, temporal):
    temporal.service_client.down = True
    response = await http.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not ready"
    assert body["checks"] == {"ledger": "ok", "temporal": "unavailable (RPCError)"}
    # Liveness does not depend on either.
    assert (await http.get("/healthz")).status_code == 200


async def test_not_ready_names_the_ledger_when_postgres_is_unreachable(cipher, temporal):
    password = "s3cret-not-in-the-answer"
    nowhere = create_engine(
        f"postgresql+psycopg://herald:{password}@127.0.0.1:{free_port()}/herald",
        connect_args={"connect_timeout": 1},
    )
    app, _ = build_app(sessionmaker(nowhere), cipher, temporal)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=INTERNAL_BASE
    ) as http:
        response = await http.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {
        "ledger": "unavailable (OperationalError)",
        "temporal": "ok",
    }
    assert password not in response.text


async def test_a_hanging_dependency_is_probed_once_however_often_readyz_is_asked(
    http, temporal, monkeypatch
):
    import api.app

    monkeypatch.setattr(api.app, "READY_TIMEOUT_SECONDS", 0.05)
    temporal.service_client.hang = asyncio.Event()
    answers = [await http.get("/readyz") for _ in range(3)]
    assert [a.status_code for a in answers] == [503, 503, 503]
    assert answers[-1].json()["checks"]["temporal"] == "no answer within 0.05 s"
    # Three requests, one probe in flight: a hung dependency holds one task (or thread).
    assert temporal.service_client.calls == 1
    temporal.service_client.hang.set()
    temporal.service_client.hang = None
    # The hung probe finishes; the next request is answered by a fresh one.
    ready = await http.get("/readyz")
    assert ready.status_code == 200
    assert temporal.service_client.calls in (1, 2)
