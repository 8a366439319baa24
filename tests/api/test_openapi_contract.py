"""schemathesis against the app's own OpenAPI document: with the operator's bearer token,
every check schemathesis has, over positive and negative data (the document promises no
more and no less than the code does); without it, no 500, conforming responses and 401s.

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
from schemathesis.generation import GenerationMode
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


EVERY_CHECK = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # a fixed seed: the same cases every run
    suppress_health_check=list(HealthCheck),
)
DOMAIN_RULES = {"invalid_request", "invalid_destination"}
"""422 types for rules an OpenAPI schema cannot carry: a template that exists, a number
that is allocated, an IANA zone. Every other 422 is a field the document declares."""


SESSIONS: sessionmaker[Session] = sessionmaker(expire_on_commit=False)
APP, _ = build_app(SESSIONS, FieldCipher(TEST_KEYRING), StubTemporal())
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
strict = schemathesis.openapi.from_asgi("/openapi.json", APP)
strict.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
strict.config.checks.update(included_check_names=["all"])
# Schema-valid data may still break a domain rule (see DOMAIN_RULES and the check below).
strict.config.checks.positive_data_acceptance.expected_statuses = [
    *strict.config.checks.positive_data_acceptance.expected_statuses,
    "422",
]


@strict.hook
def filter_query(ctx, query):  # type: ignore[no-untyped-def]
    """Only the query parameters the document declares. An undeclared one is ignored, as
    HTTP APIs do, and an OpenAPI document cannot forbid it; negative mode would send one
    only when Hypothesis happened to pick it, and its picks follow the string constants
    it finds in the project's source, so any change anywhere could turn this red."""
    declared = {parameter.name for parameter in ctx.operation.query}
    return query is None or set(query) <= declared


def positive_data_refused_only_by_a_domain_rule(ctx, response, case):  # type: ignore[no-untyped-def]
    """A schema-valid request refused with 422 names only rules the schema cannot carry."""
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return None
    if response.status_code == 422:
        kinds = {issue["type"] for issue in response.json()["detail"]}
        assert kinds <= DOMAIN_RULES, f"schema-valid data refused for {kinds}: {response.text}"
    return None


@pytest.fixture(autouse=True, scope="module")
def bound_to_the_test_database(engine):  # type: ignore[no-untyped-def]
    SESSIONS.configure(bind=engine)


@EVERY_CHECK
@strict.parametrize()
def test_the_api_does_what_its_document_says_under_every_check(case):  # type: ignore[no-untyped-def]
    case.call_and_validate(
        headers=BEARER, additional_checks=[positive_data_refused_only_by_a_domain_rule]
    )


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


def _patterns(node):  # type: ignore[no-untyped-def]
    """Every `pattern` declared in a property schema (through anyOf for optional ones)."""
    if isinstance(node, dict):
        found = [node["pattern"]] if "pattern" in node else []
        return found + [p for value in node.values() for p in _patterns(value)]
    if isinstance(node, list):
        return [p for value in node for p in _patterns(value)]
    return []


async def _call(method: str, path: str, **kwargs):  # type: ignore[no-untyped-def]
    transport = httpx.ASGITransport(app=APP)
    async with httpx.AsyncClient(transport=transport, base_url="http://herald") as http:
        return await http.request(method, path, **kwargs)


async def test_the_document_declares_the_limits_the_code_enforces():
    doc = (await _call("GET", "/openapi.json")).json()
    taking_json = [
        (method, path)
        for path, operations in doc["paths"].items()
        for method, op in operations.items()
        if "application/json" in op.get("requestBody", {}).get("content", {})
    ]
    assert len(taking_json) >= 9
    for method, path in taking_json:
        assert "400" in doc["paths"][path][method]["responses"], (method, path)
    intent = doc["components"]["schemas"]["IntentCreate"]["properties"]
    assert _patterns(intent["phone"]) == [r"^\+[1-9][0-9]{6,14}$"]
    assert _patterns(intent["business_key"])[0].startswith("^[a-z][a-z0-9]*")
    assert _patterns(intent["recipient_ref"]) == [r"^[^\x00]*$"]
    key = next(
        p
        for p in doc["paths"]["/v1/intents"]["post"]["parameters"]
        if p["name"] == "Idempotency-Key"
    )
    assert key["schema"]["minLength"] == 1 and key["schema"]["pattern"]
    page = doc["paths"]["/v1/unsubscribe/{value}"]["get"]["responses"]
    assert set(page["200"]["content"]) == {"text/html"}
    assert set(page["404"]["content"]) == {"application/json"}
    assert set(page["422"]["content"]) == {"application/json"}
    receipt = doc["paths"]["/v1/receipts/sms"]["post"]
    assert set(receipt["requestBody"]["content"]) == {"application/x-www-form-urlencoded"}
    assert any(p["name"] == "X-Twilio-Signature" for p in receipt["parameters"])


@pytest.mark.parametrize("since", ["0.5", "1733500000", "2026-01-31T12:00:00"])
async def test_a_time_in_the_query_is_rfc_3339_with_an_offset(since):
    answer = await _call("GET", "/v1/intents", params={"since": since}, headers=BEARER)
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["query", "since"]


async def test_a_405_names_every_method_of_the_path_in_allow():
    answer = await _call("PUT", "/v1/unsubscribe/some-token")
    assert answer.status_code == 405
    assert {m.strip() for m in answer.headers["Allow"].split(",")} >= {"GET", "POST"}


async def test_a_body_that_is_not_utf8_is_the_documented_400():
    answer = await _call(
        "POST",
        "/v1/consents",
        content=b'{"recipient_ref": "\xff\xfe"}',
        headers={**BEARER, "Content-Type": "application/json"},
    )
    assert answer.status_code == 400
