"""The consent and suppression API: bearer-protected, revokes end earlier grants, lifts keep
history, and nothing it answers or logs repeats a recipient or a destination."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

import pytest

from activities.contracts import AuthorizeInput
from activities.ledger import LedgerActivities
from domain.destinations import normalize_email
from ledger import repository as repo
from tests.api.conftest import BEARER, random_mobile
from tests.conftest import unique
from tests.ledger.conftest import fields

pytestmark = pytest.mark.ledger

ROUTES = [
    ("/v1/consents", {"recipient_ref": "m-1", "channel": "sms"}),
    ("/v1/consents/revoke", {"recipient_ref": "m-1", "channel": "sms"}),
    ("/v1/consents/search", {"recipient_ref": "m-1"}),
    ("/v1/suppressions", {"channel": "sms", "destination": "+447400000100"}),
    ("/v1/suppressions/search", {"destination": "+447400000100"}),
    ("/v1/suppressions/1/lift", {}),
]


@pytest.mark.parametrize(("path", "body"), ROUTES)
async def test_every_consent_and_suppression_route_needs_the_bearer_token(http, path, body):
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        answer = await http.post(path, json=body, headers=headers)
        assert answer.status_code == 401
        assert answer.json() == {"detail": "a valid bearer token is required"}


async def test_a_revoke_through_the_api_ends_the_grant_and_the_next_authorization_is_denied(
    http, committed, cipher
):
    key = unique("order-created:o")
    with committed.begin() as session:
        recorded = repo.record_intent(session, fields(session, cipher, key, phone=random_mobile()))
        recipient = repo.get_intent(session, recorded.intent_id).recipient_ref
    # The ledger fixtures share one recipient_ref: start this test from no live grant.
    await http.post(
        "/v1/consents/revoke", json={"recipient_ref": recipient, "channel": "*"}, headers=BEARER
    )
    granted = await http.post(
        "/v1/consents",
        json={"recipient_ref": recipient, "channel": "sms", "source": "signup-form"},
        headers=BEARER,
    )
    assert granted.status_code == 201, granted.text
    grant = granted.json()
    assert grant["live"] and "recipient_ref" not in grant
    ledger = LedgerActivities(committed, cipher)
    assert (await ledger.authorize(AuthorizeInput(recorded.intent_id, "sms", 1))).outcome == "allow"

    revoked = await http.post(
        "/v1/consents/revoke",
        json={"recipient_ref": recipient, "channel": "sms", "source": "support"},
        headers=BEARER,
    )

    assert revoked.status_code == 200, revoked.text
    (ended,) = revoked.json()["ended"]
    assert (ended["id"], ended["live"], ended["revoked_source"]) == (grant["id"], False, "support")
    decision = await ledger.authorize(AuthorizeInput(recorded.intent_id, "sms", 2))
    assert (decision.outcome, decision.rule) == ("deny", "consent.revoked")
    assert f"consent {grant['id']}" in decision.reason
    listed = await http.post(
        "/v1/consents/search", json={"recipient_ref": recipient, "channel": "sms"}, headers=BEARER
    )
    items = listed.json()["items"]
    assert grant["id"] in [c["id"] for c in items]
    assert all(not c["live"] for c in items)


async def test_a_suppression_is_recorded_once_listed_and_lifted_as_history(http, caplog):
    phone = random_mobile()
    caplog.set_level(logging.DEBUG)
    first = await http.post(
        "/v1/suppressions",
        json={"channel": "*", "destination": phone, "reason": "complaint"},
        headers=BEARER,
    )
    again = await http.post(
        "/v1/suppressions",
        json={"channel": "*", "destination": phone, "reason": "complaint"},
        headers=BEARER,
    )
    assert (first.status_code, again.status_code) == (201, 200), first.text
    row = first.json()
    assert row["active"] and row["created"] and again.json()["id"] == row["id"]

    listed = await http.post(
        "/v1/suppressions/search", json={"destination": phone, "channel": "sms"}, headers=BEARER
    )
    assert [s["id"] for s in listed.json()["items"]] == [row["id"]]

    lifted = await http.post(
        f"/v1/suppressions/{row['id']}/lift", json={"source": "operator:ada"}, headers=BEARER
    )
    assert lifted.status_code == 200
    assert (lifted.json()["active"], lifted.json()["changed"]) == (False, True)
    assert lifted.json()["lifted_source"] == "operator:ada"
    twice = await http.post(f"/v1/suppressions/{row['id']}/lift", headers=BEARER)
    assert (twice.status_code, twice.json()["changed"]) == (200, False)
    history = await http.post(
        "/v1/suppressions/search", json={"destination": phone}, headers=BEARER
    )
    assert [(s["id"], s["active"]) for s in history.json()["items"]] == [(row["id"], False)]

    for answer in (first, again, listed, lifted, twice, history):
        assert phone not in answer.text and phone[1:] not in answer.text
    assert phone[1:] not in caplog.text


async def test_an_unknown_suppression_is_404(http):
    answer = await http.post(f"/v1/suppressions/{2**62}/lift", headers=BEARER)
    assert answer.status_code == 404 and answer.json()["detail"] == f"no suppression {2**62}"


async def test_an_invalid_destination_is_422_naming_the_field_without_echoing_it(http):
    secret = f"not-an-address-{uuid.uuid4().hex[:6]}@"
    for channel in ("email", "sms"):
        answer = await http.post(
            "/v1/suppressions", json={"channel": channel, "destination": secret}, headers=BEARER
        )
        assert answer.status_code == 422
        (issue,) = answer.json()["detail"]
        assert issue["loc"] == ["body", "destination"] and secret not in answer.text


async def test_an_email_suppression_matches_the_address_the_intents_use(http, committed, cipher):
    address = f"Person.{uuid.uuid4().hex[:6]}@Example.ORG"
    answer = await http.post(
        "/v1/suppressions", json={"channel": "email", "destination": address}, headers=BEARER
    )
    assert answer.status_code == 201
    # Intake stores the HMAC of the normalized address (domain lowercased).
    lookup = cipher.lookup_hmac(normalize_email(address).address)
    with committed() as session:
        active = repo.suppressions_for(session, lookup, "email")
    assert [s.id for s in active] == [answer.json()["id"]]
    assert datetime.now(UTC) >= active[0].at


@pytest.mark.parametrize(
    ("path", "body", "value"),
    [
        ("/v1/suppressions", {"channel": "sms", "destination": "+4474" + "1" * 400}, "1" * 400),
        ("/v1/consents", {"recipient_ref": "m-" + "7" * 130, "channel": "sms"}, "7" * 130),
        (
            "/v1/intents",
            {
                "business_key": "a:b",
                "recipient_ref": "r",
                "template_key": "t",
                "phone": "+4474" + "2" * 40,
            },
            "2" * 40,
        ),
    ],
)
async def test_a_field_refused_by_validation_is_named_but_never_echoed(http, path, body, value):
    answer = await http.post(path, json=body, headers=BEARER)
    assert answer.status_code == 422
    (issue,) = answer.json()["detail"]
    assert set(issue) == {"loc", "msg", "type"} and issue["loc"][0] == "body"
    assert value not in answer.text
