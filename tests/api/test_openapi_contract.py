"""schemathesis against the app's own OpenAPI document: no 500 and every documented
response conforms to its schema, with and without the operator's bearer token.

The schema is loaded at import (`schemathesis.pytest.from_fixture` fails on pytest 9.2:
it sets `Function._nodeid`, which pytest no longer has). Building the app needs no
database, so its sessionmaker is bound to the test Postgres by a fixture instead.
"""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance
from sqlalchemy.orm import Session, sessionmaker

from ledger.crypto import FieldCipher
from tests.api.conftest import BEARER, StubTemporal, build_app
from tests.conftest import TEST_KEYRING

pytestmark = pytest.mark.ledger

CHECKS = [not_a_server_error, response_schema_conformance]
BOUNDED = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)


SESSIONS: sessionmaker[Session] = sessionmaker(expire_on_commit=False)
APP, _ = build_app(SESSIONS, FieldCipher(TEST_KEYRING), StubTemporal())
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(autouse=True, scope="module")
def bound_to_the_test_database(engine):  # type: ignore[no-untyped-def]
    SESSIONS.configure(bind=engine)


@BOUNDED
@schema.parametrize()
def test_the_api_conforms_with_the_operator_token(case):  # type: ignore[no-untyped-def]
    case.call_and_validate(headers=BEARER, checks=CHECKS)


@BOUNDED
@schema.parametrize()
def test_the_api_conforms_without_a_token_and_operator_routes_are_401(case):  # type: ignore[no-untyped-def]
    response = case.call_and_validate(checks=CHECKS)
    # (The coverage phase also tries undeclared methods: those are 405 before any auth.)
    declared = case.method.upper() == case.operation.method.upper()
    operator_paths = ("/v1/intents", "/v1/consents", "/v1/suppressions")
    if case.operation.path.startswith(operator_paths) and declared:
        assert response.status_code == 401


async def test_the_document_publishes_auth_and_the_idempotency_key_retention():
    transport = httpx.ASGITransport(app=APP)
    async with httpx.AsyncClient(transport=transport, base_url="http://herald") as http:
        doc = (await http.get("/openapi.json")).json()
    assert "Idempotency-Key-Retention: 24 h" in doc["info"]["description"]
    assert "HTTPBearer" in doc["components"]["securitySchemes"]
    create = doc["paths"]["/v1/intents"]["post"]
    assert {"200", "201", "401", "409", "422"} <= set(create["responses"])
    assert create["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "IntentCreate"
    )
    timeline = doc["paths"]["/v1/intents/{id_or_key}"]["get"]["responses"]["200"]
    assert timeline["content"]["application/json"]["schema"]["$ref"].endswith("Timeline")
