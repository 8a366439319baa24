"""schemathesis against the app's own OpenAPI document: with the operator's bearer token,
every check schemathesis has, over positive and negative data (the document promises no
more and no less than the code does); without it, no 500, conforming responses and 401s.

The schema is loaded at import (`schemathesis.pytest.from_fixture` fails on pytest 9.2:
it sets `Function._nodeid`, which pytest no longer has). Building the app needs no
database, so its sessionmaker is bound to the test Postgres by a fixture instead.
"""

from __future__ import annotations

import json
import re
import secrets
import zoneinfo

import httpx
import pytest
import schemathesis
from fastapi import APIRouter, FastAPI
from hypothesis import HealthCheck, settings
from openapi_spec_validator import validate
from openapi_spec_validator.validation import OpenAPIV30SpecValidator
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    negative_data_rejection,
    response_schema_conformance,
)
from sqlalchemy.orm import Session, sessionmaker

from api import idempotency
from api.auth import CreatingIntents, GuardedRoute, Operating
from api.openapi import TAGS, as_openapi_30, install_contract, operation_id
from api.schemas import PATTERN_WORDS
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
DOMAIN_TYPES = {"invalid_request", "invalid_destination", "invalid_cursor"}
"""The 422 types of rules checked after the schema."""
REASON_RULES = ("reason.no_contact_data", "reason.worded")
DOMAIN_RULES: dict[tuple[str, str], tuple[str, ...]] = {
    ("/v1/intents", "business_key"): ("business_key.no_contact_data",),
    ("/v1/intents", "template_key"): ("template.exists",),
    ("/v1/intents", "variables"): ("template.variables",),
    ("/v1/intents", "phone"): ("phone.valid_for_country", "channels.destinations"),
    ("/v1/intents", "email"): ("email.valid", "channels.destinations"),
    ("/v1/intents", "channels"): ("channels.destinations",),
    ("/v1/intents", "country"): ("country.required",),
    ("/v1/intents", "send_at"): ("send_at.within_a_year",),
    ("/v1/intents", "expires_at"): ("expires_at.after_send_at", "expires_at.within_a_year"),
    ("/v1/intents", "artifact_sha256"): ("artifact.registered", "artifact.email_only"),
    ("/v1/intents/{id_or_key}/cancel", "reason"): ("reason.no_contact_data", "reason.worded"),
    ("/v1/intents/{id_or_key}/approve-resend", "reason"): (
        "reason.no_contact_data",
        "reason.worded",
    ),
    ("/v1/intents/{id_or_key}/settle", "reason"): ("reason.no_contact_data", "reason.worded"),
    ("/v1/intents/{id_or_key}/settle", "reference"): ("reference.no_contact_data",),
    ("/v1/suppressions", "destination"): ("destination.valid",),
    ("/v1/suppressions/search", "destination"): ("destination.valid",),
    ("/v1/recipients/intents", "destination"): ("destination.valid",),
    ("/v1/recipients/intents", "cursor"): ("cursor.issued",),
    ("/v1/intents", "cursor"): ("cursor.issued",),
    ("/v1/templates/import", "body"): ("file.accepted",),
    ("/v1/policies/import", "body"): ("file.accepted",),
    ("/v1/erasures", "value"): ("recipient.valid",),
    ("/v1/erasures", "reason"): REASON_RULES,
    ("/v1/principals", "namespace"): ("business_key.no_contact_data",),
}
"""Where schema-valid data may still be refused, and for which named rules: those an
OpenAPI schema cannot express (a number valid in its country's plan, a zone the IANA
database has, a template that exists, a rule across two fields). Each rule is named in
its field's description in the document (checked below); a 422 for anything else on
schema-valid data means the document allows what the code refuses."""


BYTES_ARE_BYTES = {
    "/v1/attachments": [negative_data_rejection],
    "/v1/templates/import": [allow_header_conformance],
    "/v1/policies/import": [allow_header_conformance],
}
"""An attachment's `file` part is bytes, whatever they spell: a "negative" case that makes
it a number sends those digits as a file, which is a file all the same. The upload's own
refusals (413, 415, 422) are checked by tests/api/test_app_scope.py.

`/v1/templates/import` is also `/v1/templates/{key}` for the key `import` (and so for
policies): its 405 rightly allows GET, which the document lists under the other path."""


@schemathesis.serializer("application/pdf", "image/png", "image/jpeg")
def as_file(ctx, value):  # type: ignore[no-untyped-def]
    """An attachment part of a binary type, as bytes (a generated number or text goes as
    its characters, as a client sending such a file would)."""
    return value if isinstance(value, bytes) else str(value).encode()


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
        for issue in response.json()["detail"]:
            if issue["loc"] == ["header", "Idempotency-Key"]:
                # Any route that takes the key: a key Hypothesis sent before, with
                # another request (the header's description names the rule).
                assert issue["type"] == "idempotency_key_reused", response.text
                continue
            where = (case.operation.path, str(issue["loc"][-1]))
            assert issue["type"] in DOMAIN_TYPES and where in DOMAIN_RULES, (
                f"schema-valid data refused at {where}: {response.text}"
            )
    return None


@pytest.fixture(autouse=True, scope="module")
def bound_to_the_test_database(engine):  # type: ignore[no-untyped-def]
    SESSIONS.configure(bind=engine)


@EVERY_CHECK
@strict.parametrize()
def test_the_api_does_what_its_document_says_under_every_check(case):  # type: ignore[no-untyped-def]
    case.call_and_validate(
        headers=BEARER,
        additional_checks=[positive_data_refused_only_by_a_domain_rule],
        excluded_checks=BYTES_ARE_BYTES.get(case.operation.path, []),
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


def _body_property(doc, path: str, field: str):  # type: ignore[no-untyped-def]
    """The field's schema: a query parameter of the path's GET, else its POST body's."""
    for parameter in doc["paths"][path].get("get", {}).get("parameters", []):
        if parameter["in"] == "query" and parameter["name"] == field:
            return parameter
    body = doc["paths"][path]["post"]["requestBody"]
    if "application/json" not in body["content"]:  # a file's text (an import): the body
        return body
    ref = body["content"]["application/json"]["schema"]
    name = ref["$ref"].rsplit("/", 1)[-1]
    return doc["components"]["schemas"][name]["properties"][field]


def _descriptions(node):  # type: ignore[no-untyped-def]
    if isinstance(node, dict):
        found = [node["description"]] if isinstance(node.get("description"), str) else []
        return found + [d for value in node.values() for d in _descriptions(value)]
    if isinstance(node, list):
        return [d for value in node for d in _descriptions(value)]
    return []


async def test_every_domain_rule_is_named_in_its_fields_description():
    doc = (await _call("GET", "/openapi.json")).json()
    for (path, field), rules in DOMAIN_RULES.items():
        described = " ".join(_descriptions(_body_property(doc, path, field)))
        for rule in rules:
            assert f"Rule `{rule}`" in described, (path, field, rule)


async def test_the_document_says_what_it_can_country_zone_channels_destination():
    doc = (await _call("GET", "/openapi.json")).json()
    intent = doc["components"]["schemas"]["IntentCreate"]["properties"]
    (country,) = [branch for branch in intent["country"]["anyOf"] if "enum" in branch]
    assert "GB" in country["enum"] and "AA" not in country["enum"] and "gb" not in country["enum"]
    (zone,) = [branch for branch in intent["timezone"]["anyOf"] if "enum" in branch]
    assert set(zone["enum"]) == zoneinfo.available_timezones()
    assert "America/Argentina/Salta" in zone["enum"] and "Mars/Olympus" not in zone["enum"]
    assert intent["channels"]["items"]["enum"] == ["sms", "email"]
    listing = doc["paths"]["/v1/intents"]["get"]["parameters"]
    (channel,) = [p["schema"] for p in listing if p["name"] == "channel"]
    assert [branch.get("enum") for branch in channel["anyOf"]] == [["sms", "email"], None]
    (destination,) = _patterns(_body_property(doc, "/v1/suppressions/search", "destination"))
    assert not re.match(destination, "+00") and re.match(destination, "+44 7400 123456")
    assert not re.match(destination, "+10") and not re.match(destination, "+1 (555) 01")
    assert re.match(destination, "+6834001") and not re.match(destination, "+1" + "2" * 15)


def _declared_patterns(doc):  # type: ignore[no-untyped-def]
    """Every pattern a JSON body or a query, path or header parameter declares."""
    found = []
    for operations in doc["paths"].values():
        for op in operations.values():
            for parameter in op.get("parameters", []):
                found += _patterns(parameter.get("schema", {}))
            found += _patterns(
                op.get("requestBody", {}).get("content", {}).get("application/json", {})
            )
    return set(found + _patterns(doc["components"]["schemas"]))


async def test_every_pattern_the_code_checks_has_words_for_its_refusal():
    doc = (await _call("GET", "/openapi.json")).json()
    # Checked by their own code, not by pydantic, so never refused with a pattern's words.
    not_pydantic = {idempotency.KEY_PATTERN}
    missing = _declared_patterns(doc) - set(PATTERN_WORDS) - not_pydantic
    assert not missing


async def test_every_v1_operation_declares_500_and_503_with_retry_after():
    doc = (await _call("GET", "/openapi.json")).json()
    operations = [
        (path, method, op)
        for path, ops in doc["paths"].items()
        if path.startswith("/v1/")
        for method, op in ops.items()
    ]
    assert len(operations) >= 20
    for path, method, op in operations:
        responses = op["responses"]
        assert {"500", "503"} <= set(responses), (method, path)
        assert "Retry-After" in responses["503"]["headers"], (method, path)
        for status in ("500", "503"):
            schema = responses[status]["content"]["application/json"]["schema"]
            assert schema["$ref"].endswith("/Problem"), (method, path, status)


FRAMEWORK_DEFAULT = re.compile(r"_v1_|_(get|post|put|patch|delete)$|(Get|Post|Put|Patch|Delete)$")
CAMEL_CASE = re.compile(r"^[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)*$")


def _operations(doc):  # type: ignore[no-untyped-def]
    return [
        (method, path, op)
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if method in {"get", "put", "post", "delete", "patch"}
    ]


async def test_every_operation_id_is_camel_case_named_for_what_it_does_and_unique():
    doc = (await _call("GET", "/openapi.json")).json()
    ids = [op["operationId"] for _, _, op in _operations(doc)]
    for op_id in ids:
        assert CAMEL_CASE.match(op_id), op_id
        assert not FRAMEWORK_DEFAULT.search(op_id), op_id
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    by_route = {(m, p): op["operationId"] for m, p, op in _operations(doc)}
    assert by_route["post", "/v1/intents"] == "createIntent"
    assert by_route["get", "/v1/intents"] == "listIntents"
    assert by_route["get", "/v1/intents/{id_or_key}"] == "getIntent"
    assert by_route["post", "/v1/intents/{id_or_key}/cancel"] == "cancelIntent"
    assert by_route["post", "/v1/consents"] == "recordConsent"


async def test_a_route_added_later_gets_its_id_and_its_audience_from_what_it_declares():
    router = APIRouter(prefix="/v1/attachments", tags=["attachments"], route_class=GuardedRoute)

    @router.post("")
    async def upload_attachment(by: CreatingIntents) -> dict[str, str]:
        return {}

    @router.post("/{attachment_id}/quarantine")
    async def quarantine_attachment(attachment_id: str, by: Operating) -> dict[str, str]:
        return {}

    app = FastAPI(generate_unique_id_function=operation_id)
    app.include_router(router)
    install_contract(app, max_body_bytes=1024)
    doc = app.openapi()
    upload = doc["paths"]["/v1/attachments"]["post"]
    quarantine = doc["paths"]["/v1/attachments/{attachment_id}/quarantine"]["post"]
    assert (upload["operationId"], upload["tags"]) == ("uploadAttachment", ["attachments"])
    assert (quarantine["operationId"], quarantine["tags"]) == (
        "quarantineAttachment",
        ["operations"],
    )


async def test_each_operation_has_one_audience_tag_and_the_document_describes_every_tag():
    doc = (await _call("GET", "/openapi.json")).json()
    described = {tag["name"]: tag["description"] for tag in doc["tags"]}
    assert all(described.values()) and set(described) <= set(TAGS)
    for method, path, op in _operations(doc):
        assert len(op["tags"]) == 1 and op["tags"][0] in described, (method, path, op["tags"])
    tag_of = {op["operationId"]: op["tags"][0] for _, _, op in _operations(doc)}
    assert {tag_of[i] for i in ("createIntent", "listIntents", "getIntent")} == {"intents"}
    assert tag_of["addPrincipal"] == tag_of["eraseRecipient"] == "administration"
    assert tag_of["approveResend"] == tag_of["settleIntent"] == "operations"
    assert tag_of["receiveTwilioReceipt"] == "provider-webhooks"


async def test_the_document_names_the_server_it_was_fetched_from():
    for url in ("/openapi.json", "/openapi-3.0.json"):
        doc = (await _call("GET", url)).json()
        assert doc["servers"] == [{"url": "http://herald", "description": "This Herald API."}]


async def test_every_operation_that_reads_a_body_declares_the_413_of_the_body_limit():
    doc = (await _call("GET", "/openapi.json")).json()
    with_body = [(m, p, op) for m, p, op in _operations(doc) if "requestBody" in op]
    assert len(with_body) >= 15
    for method, path, op in with_body:
        assert "413" in op["responses"], (method, path)
    answer = await _call(
        "POST",
        "/v1/consents",
        content=b"{" + b" " * (64 * 1024) + b"}",
        headers={**BEARER, "Content-Type": "application/json"},
    )
    assert answer.status_code == 413


CREATED = {
    "recipient_ref": "m-1842",
    "template_key": "order-created",
    "template_version": 1,
    "phone": "+447400123456",
    "variables": {"order_id": "o-77"},
}


async def test_the_headers_the_server_sends_on_create_and_replay_are_declared():
    doc = (await _call("GET", "/openapi.json")).json()
    declared = doc["paths"]["/v1/intents"]["post"]["responses"]
    body = {**CREATED, "business_key": f"order-created:o-{secrets.token_hex(4)}"}
    headers = {**BEARER, "Idempotency-Key": secrets.token_hex(8)}
    first = await _call("POST", "/v1/intents", json=body, headers=headers)
    again = await _call("POST", "/v1/intents", json=body, headers=headers)
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.headers["Idempotent-Replayed"] == "true"
    for answer in (first, again):
        sent = {"Location", "Idempotent-Replayed", "Retry-After"} & {
            name.title() for name in answer.headers
        }
        assert "Location" in sent
        assert sent <= set(declared[str(answer.status_code)]["headers"])
    assert "Retry-After" in declared["409"]["headers"]


async def test_the_openapi_30_copy_is_valid_3_0_with_the_same_operations():
    doc31 = (await _call("GET", "/openapi.json")).json()
    answer = await _call("GET", "/openapi-3.0.json")
    assert answer.status_code == 200
    doc30 = answer.json()
    assert doc30["openapi"] == "3.0.3"
    validate(doc30, cls=OpenAPIV30SpecValidator)
    assert [op["operationId"] for _, _, op in _operations(doc30)] == [
        op["operationId"] for _, _, op in _operations(doc31)
    ]
    dumped = json.dumps(doc30)
    assert '"type": "null"' not in dumped and '"const"' not in dumped
    # An optional field is `nullable`, its constraints kept (3.0 has no `anyOf` with null).
    phone = doc30["components"]["schemas"]["IntentCreate"]["properties"]["phone"]
    assert phone["nullable"] is True and phone["pattern"] == r"^\+[1-9][0-9]{6,14}$"


def test_the_30_converter_rewrites_each_31_form_it_meets_into_valid_30():
    """Forms today's document does not use yet (a type list, a numeric exclusive bound, an
    uploaded file's `contentMediaType`) as well as those it does."""
    upload = {"type": "string", "contentMediaType": "application/octet-stream"}
    doc31 = {
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1", "summary": "3.1 only"},
        "paths": {
            "/files": {
                "post": {
                    "operationId": "uploadFile",
                    "requestBody": {
                        "content": {
                            "multipart/form-data": {
                                "schema": {"type": "object", "properties": {"file": upload}}
                            }
                        }
                    },
                    "responses": {
                        "201": {
                            "description": "d",
                            "content": {
                                "application/json": {"schema": {"$ref": "#/components/schemas/F"}}
                            },
                        }
                    },
                }
            }
        },
        "components": {
            "schemas": {
                "F": {
                    "type": "object",
                    "properties": {
                        "size": {"type": "integer", "exclusiveMinimum": 0},
                        "note": {"type": ["string", "null"], "examples": ["a note"]},
                        "kind": {"const": "file"},
                        "parent": {"$ref": "#/components/schemas/F", "description": "Its folder."},
                        "owner": {"anyOf": [{"$ref": "#/components/schemas/F"}, {"type": "null"}]},
                    },
                }
            }
        },
    }
    doc30 = as_openapi_30(doc31)
    validate(doc30, cls=OpenAPIV30SpecValidator)
    assert doc31["openapi"] == "3.1.0"  # the 3.1 document is left as it was
    props = doc30["components"]["schemas"]["F"]["properties"]
    assert props["size"] == {"type": "integer", "minimum": 0, "exclusiveMinimum": True}
    assert props["note"] == {"type": "string", "nullable": True, "example": "a note"}
    assert props["kind"] == {"enum": ["file"]}
    assert props["parent"] == {
        "allOf": [{"$ref": "#/components/schemas/F"}],
        "description": "Its folder.",
    }
    assert props["owner"] == {"allOf": [{"$ref": "#/components/schemas/F"}], "nullable": True}
    body = doc30["paths"]["/files"]["post"]["requestBody"]["content"]["multipart/form-data"]
    assert body["schema"]["properties"]["file"] == {"type": "string", "format": "binary"}
