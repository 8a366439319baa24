"""`Idempotency-Key` on every mutating route: a retry with the same key and request replays
the first answer and does nothing again; another request under the key is a 422; a key
belongs to its principal; the document declares the header wherever it works."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import pytest
from sqlalchemy.orm import Session, sessionmaker

from domain.principals import Principal, Role
from ledger import principals
from tests.api.conftest import BEARER, random_mobile, submitted_attempt
from tests.conftest import unique

pytestmark = pytest.mark.ledger


def bearer_of(committed: sessionmaker[Session], role: Role) -> dict[str, str]:
    with committed.begin() as session:
        issued = principals.create(
            session, unique("p"), role, by=Principal("test", Role.ADMIN), at=datetime.now(UTC)
        )
    return {"Authorization": f"Bearer {issued.token}"}


def keyed(headers: dict[str, str], key: str) -> dict[str, str]:
    return {**headers, "Idempotency-Key": key}


async def actions(http, intent_id: str) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    doc = (await http.get(f"/v1/intents/{intent_id}", headers=BEARER)).json()
    return [(a["action"], a["outcome"]) for a in doc["operator_actions"]]


async def test_a_cancel_retried_with_one_key_is_recorded_once_and_replays_the_first_answer(
    http, committed, cipher
):
    sent = submitted_attempt(committed, cipher)
    headers = keyed(BEARER, secrets.token_hex(8))
    path = f"/v1/intents/{sent.intent_id}/cancel"
    first = await http.post(path, json={"reason": "customer called"}, headers=headers)
    assert first.status_code == 200 and first.json()["accepted"] is True
    assert "idempotent-replayed" not in first.headers
    again = await http.post(path, json={"reason": "customer called"}, headers=headers)
    assert again.status_code == 200 and again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert await actions(http, sent.intent_id) == [("cancel", "accepted")]


async def test_a_refused_resend_retried_with_one_key_is_one_refusal_replayed_with_its_409(
    http, committed, cipher
):
    sent = submitted_attempt(committed, cipher)
    headers = keyed(BEARER, secrets.token_hex(8))
    path = f"/v1/intents/{sent.intent_id}/approve-resend"
    body = {"channel": "sms", "reason": "customer asked again"}
    first = await http.post(path, json=body, headers=headers)
    assert first.status_code == 409 and first.json()["accepted"] is False
    again = await http.post(path, json=body, headers=headers)
    assert (again.status_code, again.json()) == (409, first.json())
    assert again.headers["idempotent-replayed"] == "true"
    assert await actions(http, sent.intent_id) == [("approve-resend", "refused")]


async def test_a_consent_recorded_twice_with_one_key_is_one_grant(http):
    recipient = unique("m")
    grant = {"recipient_ref": recipient, "channel": "sms", "source": "signup-form"}
    headers = keyed(BEARER, secrets.token_hex(8))
    first = await http.post("/v1/consents", json=grant, headers=headers)
    again = await http.post("/v1/consents", json=grant, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    found = await http.post(
        "/v1/consents/search", json={"recipient_ref": recipient, "channel": "sms"}, headers=BEARER
    )
    assert len(found.json()["items"]) == 1


async def test_a_suppression_lift_replays_and_the_key_on_another_route_is_422(http):
    suppressed = await http.post(
        "/v1/suppressions",
        json={"channel": "sms", "destination": random_mobile()},
        headers=keyed(BEARER, secrets.token_hex(8)),
    )
    assert suppressed.status_code == 201, suppressed.text
    key = secrets.token_hex(8)
    path = f"/v1/suppressions/{suppressed.json()['id']}/lift"
    lifted = await http.post(path, json={"source": "support"}, headers=keyed(BEARER, key))
    again = await http.post(path, json={"source": "support"}, headers=keyed(BEARER, key))
    assert lifted.status_code == again.status_code == 200, again.text
    assert again.json() == lifted.json() and again.headers["idempotent-replayed"] == "true"
    elsewhere = await http.post(
        "/v1/consents",
        json={"recipient_ref": unique("m"), "channel": "sms"},
        headers=keyed(BEARER, key),
    )
    assert elsewhere.status_code == 422
    [issue] = elsewhere.json()["detail"]
    assert issue["loc"] == ["header", "Idempotency-Key"]
    assert "another route" in issue["msg"] and issue["type"] == "idempotency_key_reused"


async def test_the_same_key_with_another_body_is_422_in_words_and_records_nothing(
    http, committed, cipher
):
    sent = submitted_attempt(committed, cipher)
    headers = keyed(BEARER, secrets.token_hex(8))
    path = f"/v1/intents/{sent.intent_id}/cancel"
    assert (await http.post(path, json={"reason": "one"}, headers=headers)).status_code == 200
    other = await http.post(path, json={"reason": "another"}, headers=headers)
    assert other.status_code == 422
    [issue] = other.json()["detail"]
    assert issue["loc"] == ["header", "Idempotency-Key"]
    assert "different body" in issue["msg"] and "new key" in issue["msg"]
    assert await actions(http, sent.intent_id) == [("cancel", "accepted")]


async def test_two_principals_with_one_key_never_share_an_answer(http, committed, cipher):
    one, two = bearer_of(committed, Role.OPERATOR), bearer_of(committed, Role.OPERATOR)
    sent = submitted_attempt(committed, cipher)
    key = secrets.token_hex(8)
    path = f"/v1/intents/{sent.intent_id}/cancel"
    body = {"reason": "customer called"}
    first = await http.post(path, json=body, headers=keyed(one, key))
    assert first.status_code == 200 and first.json()["accepted"] is True
    # The same key, route and body from another principal: its own answer, not a replay
    # (nor a 422: the key is free in its own namespace).
    theirs = await http.post(path, json=body, headers=keyed(two, key))
    assert theirs.status_code == 200 and "idempotent-replayed" not in theirs.headers
    assert theirs.json()["message"] == "already cancelled"
    assert theirs.json()["operator"] != first.json()["operator"]
    # And each principal's own retry replays its own answer.
    mine = await http.post(path, json=body, headers=keyed(one, key))
    assert mine.json() == first.json() and mine.headers["idempotent-replayed"] == "true"
    yours = await http.post(path, json=body, headers=keyed(two, key))
    assert yours.json() == theirs.json() and yours.headers["idempotent-replayed"] == "true"


async def test_a_refused_request_releases_its_key(http, committed, cipher):
    key = secrets.token_hex(8)
    missing = await http.post(
        "/v1/intents/no-such-intent/cancel", json={"reason": "x"}, headers=keyed(BEARER, key)
    )
    assert missing.status_code == 404
    sent = submitted_attempt(committed, cipher)
    # The key did nothing the first time, so it is free for the request the caller meant.
    meant = await http.post(
        f"/v1/intents/{sent.intent_id}/cancel", json={"reason": "x"}, headers=keyed(BEARER, key)
    )
    assert meant.status_code == 200 and meant.json()["accepted"] is True


NOT_IDEMPOTENT = {
    # Providers' and recipients' routes: no principal, and deduplicated by their own ids.
    "/v1/receipts/sms": "a provider's callback, deduplicated on the provider's ids",
    "/v1/inbound/sms": "a provider's callback, deduplicated on the message id",
    "/v1/receipts/email/sendgrid": "a provider's callback, deduplicated on sg_event_id",
    "/v1/webhooks/telnyx": "a provider's callback, deduplicated on data.id",
    "/v1/unsubscribe/{value}": "a signed link: suppressing twice changes nothing",
    # Reads that take their question in the body (contact data never goes in a URL).
    "/v1/recipients/intents": "a read",
    "/v1/consents/search": "a read",
    "/v1/suppressions/search": "a read",
    # Their answer is a token shown once: a stored answer would keep it in the ledger.
    "/v1/principals": "the answer holds a new token",
    "/v1/principals/{name}/rotate": "the answer holds a new token",
    # Idempotent by content: the same bytes are the same attachment (its SHA-256), whatever
    # the key; a multipart body's boundary differs on every retry, so a body fingerprint
    # would refuse the very retry a key is for.
    "/v1/attachments": "idempotent by content (the bytes' SHA-256 is the id)",
    # Idempotent by content too: a version recorded as it is is `unchanged`, a no-op.
    "/v1/templates/import": "idempotent by content (the same file again changes nothing)",
    "/v1/policies/import": "idempotent by content (the same file again changes nothing)",
    # A render that stores nothing but an audit event: a read.
    "/v1/templates/{key}/versions/{version}/preview": "a read (an audit event, no state)",
    # Idempotent by the version's state: the same verdict or activation by the same
    # principal again changes nothing and answers 200 (docs/templates.md).
    "/v1/templates/{key}/versions/{version}/approve": "idempotent by the version's state",
    "/v1/templates/{key}/versions/{version}/refuse": "idempotent by the version's state",
    "/v1/templates/{key}/versions/{version}/activate": "idempotent by the version's state",
    "/v1/policies/{version}/approve": "idempotent by the version's state",
    "/v1/policies/{version}/refuse": "idempotent by the version's state",
    "/v1/policies/{version}/activate": "idempotent by the version's state",
}
"""Mutating /v1 routes without `Idempotency-Key`, each with why."""


async def test_the_document_declares_the_key_and_the_replayed_header_on_every_mutating_route(
    http,
):
    doc = (await http.get("/openapi.json")).json()
    covered = []
    for path, item in doc["paths"].items():
        for method in ("post", "put", "patch", "delete"):
            operation = item.get(method)
            if not path.startswith("/v1/") or operation is None:
                continue
            headers = {p["name"] for p in operation.get("parameters", []) if p["in"] == "header"}
            if path in NOT_IDEMPOTENT:
                assert "Idempotency-Key" not in headers, path
                continue
            assert "Idempotency-Key" in headers, f"{method.upper()} {path}"
            answers = operation["responses"]
            success = [c for c in answers if c.startswith("2")]
            assert success, path
            for code in success:
                assert "Idempotent-Replayed" in answers[code].get("headers", {}), (path, code)
            assert "Retry-After" in answers["409"].get("headers", {}), path
            assert "Idempotency-Key" in answers["422"]["description"], path
            covered.append(path)
    assert {
        "/v1/intents",
        "/v1/intents/{id_or_key}/cancel",
        "/v1/intents/{id_or_key}/approve-resend",
        "/v1/intents/{id_or_key}/settle",
        "/v1/consents",
        "/v1/consents/revoke",
        "/v1/suppressions",
        "/v1/suppressions/{suppression_id}/lift",
    } <= set(covered)
