"""Unknown query parameters are refused on every /v1/ route (never silently ignored), and
a recipient's intents are found by a POST with the phone number or address in the body."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from api.auth import app_routes
from domain.principals import Role
from ledger import principals
from tests.api.conftest import BEARER, random_mobile
from tests.conftest import unique

pytestmark = pytest.mark.ledger

ADDRESS = "ann.lee@example.com"


def _concrete(path: str) -> str:
    return (
        path.replace("{id_or_key}", "no-such:key-1")
        .replace("{suppression_id}", "1")
        .replace("{name}", "no-such-principal")
        .replace("{value}", "not-a-signed-link")
    )


def _token(committed: sessionmaker[Session], role: Role) -> dict[str, str]:
    with committed.begin() as session:
        token = principals.create(
            session,
            unique(f"p-{role.value}"),
            role,
            by=principals.BOOTSTRAP_ACTOR,
            at=datetime.now(UTC),
        ).token
    return {"Authorization": f"Bearer {token}"}


async def test_the_unfiltered_list_is_never_the_answer_to_an_unknown_filter(http):
    phone = random_mobile()
    answer = await http.get("/v1/intents", params={"recipient": phone}, headers=BEARER)
    assert answer.status_code == 422, answer.text
    assert answer.json() == {
        "detail": [
            {
                "loc": ["query", "recipient"],
                "msg": "is not a parameter of this route; nothing was done",
                "type": "unknown_parameter",
            }
        ]
    }
    assert phone[1:] not in answer.text


@pytest.mark.parametrize("name", ["state", "awaiting", "channel"])
async def test_a_single_valued_filter_given_twice_is_refused_naming_it(http, name):
    # `?state=sent&state=delivered` once listed only delivered: the last silently won.
    values = {"state": ("sent", "delivered"), "awaiting": ("settlement", "resend")}
    first, second = values.get(name, ("sms", "email"))
    answer = await http.get(
        "/v1/intents", params=[(name, first), (name, second), ("limit", "5")], headers=BEARER
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"] == [
        {
            "loc": ["query", name],
            "msg": "is given 2 times; it takes one value; nothing was done",
            "type": "repeated_parameter",
        }
    ]


@pytest.mark.parametrize("query", ["event_type=a%00b", "region=%0Aeu", "since=2026%1B"])
async def test_a_control_character_in_a_parameter_is_422_naming_it(http, query):
    answer = await http.get(f"/v1/intents?{query}", headers=BEARER)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"] == [
        {
            "loc": ["query", query.partition("=")[0]],
            "msg": "holds a control character; nothing was done",
            "type": "control_character",
        }
    ]


async def test_every_v1_route_refuses_an_unknown_query_parameter(app: FastAPI, http):
    checked = []
    for method, path, _route in app_routes(app):
        if not path.startswith("/v1/") or method == "HEAD":
            continue
        answer = await http.request(
            method, _concrete(path), params={"surprise": ADDRESS}, headers=BEARER, json={}
        )
        assert answer.status_code == 422, (method, path, answer.text)
        assert ["query", "surprise"] in [issue["loc"] for issue in answer.json()["detail"]]
        assert "ann.lee" not in answer.text, (method, path)
        checked.append(f"{method} {path}")
    assert len(checked) >= 20, checked
    # A declared parameter is still fine; and without a token it is 401 before anything.
    assert (await http.get("/v1/intents", params={"limit": 1}, headers=BEARER)).status_code == 200
    assert (await http.get("/v1/intents", params={"surprise": 1})).status_code == 401


async def test_a_recipients_intents_are_found_by_phone_or_address_in_the_body(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
):
    phone = random_mobile()
    key = unique("order-created:o")
    doc = {
        "business_key": key,
        "recipient_ref": "m-1842",
        "template_key": "order-created",
        "template_version": 1,
        "phone": phone,
        "variables": {"order_id": "o-77"},
    }
    created = await http.post("/v1/intents", json=doc, headers=BEARER)
    assert created.status_code == 201, created.text
    viewer = _token(committed, Role.VIEWER)
    spaced = f"{phone[:3]} {phone[3:7]} {phone[7:]}"
    found = await http.post("/v1/recipients/intents", json={"destination": spaced}, headers=viewer)
    assert found.status_code == 200, found.text
    assert [item["business_key"] for item in found.json()["items"]] == [key]
    assert phone[1:] not in found.text
    nobody = await http.post(
        "/v1/recipients/intents", json={"destination": "nobody-" + ADDRESS}, headers=viewer
    )
    assert nobody.status_code == 200 and nobody.json()["items"] == []
    # An app finds nobody by contact data: it reads only its own intents, by id or key.
    as_app = await http.post(
        "/v1/recipients/intents", json={"destination": phone}, headers=_token(committed, Role.APP)
    )
    assert as_app.status_code == 403 and as_app.json()["needed_role"] == "viewer"
    invalid = await http.post(
        "/v1/recipients/intents", json={"destination": "+1 555"}, headers=viewer
    )
    assert invalid.status_code == 422 and invalid.json()["detail"][0]["loc"] == [
        "body",
        "destination",
    ]
