"""/healthz says the process answers; /readyz says the ledger and Temporal do too, and
names the one that does not."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from starter.devstack import free_port
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
