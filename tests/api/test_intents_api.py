"""The operator and app API: bearer token, create with Idempotency-Key, list, read, cancel."""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, update

from api.idempotency import scoped
from domain.principals import BREAK_GLASS_NAME
from ledger import timeline
from ledger.models import IdempotencyRecord, Intent
from tests.api.conftest import BEARER, random_mobile, submitted_attempt
from tests.conftest import unique

pytestmark = pytest.mark.ledger


def body(**overrides):  # type: ignore[no-untyped-def]
    doc = {
        "business_key": unique("order-created:o"),
        "recipient_ref": "m-1842",
        "template_key": "order-created",
        "template_version": 1,
        "phone": random_mobile(),
        "variables": {"order_id": "o-77"},
    }
    doc.update(overrides)
    return doc


def intents_with_key(sessions, key: str) -> int:  # type: ignore[no-untyped-def]
    with sessions() as session:
        return session.scalar(
            select(func.count()).select_from(Intent).where(Intent.business_key == key)
        )


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/intents"),
        ("POST", "/v1/intents"),
        ("GET", "/v1/intents/x"),
        ("POST", "/v1/intents/x/cancel"),
        ("POST", "/v1/intents/x/approve-resend"),
    ],
)
@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "Basic abc"])
async def test_operator_routes_need_the_bearer_token(http, method, path, authorization):
    headers = {"Authorization": authorization} if authorization else {}
    answer = await http.request(method, path, headers=headers, json={})
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"


async def test_create_records_the_intent_and_starts_its_workflow(http, committed, temporal):
    doc = body()
    answer = await http.post("/v1/intents", json=doc, headers=BEARER)
    assert answer.status_code == 201, answer.text
    created = answer.json()
    assert created["business_key"] == doc["business_key"] and created["existed"] is False
    assert answer.headers["location"] == f"/v1/intents/{created['intent_id']}"
    assert temporal.starts == [created["workflow_id"]]
    again = await http.post("/v1/intents", json=doc, headers=BEARER)
    assert again.status_code == 200 and again.json()["intent_id"] == created["intent_id"]
    assert again.json()["existed"] is True
    assert intents_with_key(committed, doc["business_key"]) == 1


async def test_the_same_business_key_with_another_payload_is_409(http):
    doc = body()
    assert (await http.post("/v1/intents", json=doc, headers=BEARER)).status_code == 201
    other = await http.post(
        "/v1/intents", json={**doc, "variables": {"order_id": "o-78"}}, headers=BEARER
    )
    assert other.status_code == 409 and "different payload" in other.json()["detail"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"phone": "+1 555"}, "phone"),
        ({"business_key": "no subject"}, "business_key"),
        ({"template_key": "no-such-template"}, "template_key"),
        ({"variables": {}}, "variables"),
        ({"category": "spam"}, "category"),
        ({"locale": "x" * 40}, "locale"),
        ({"surprise": 1}, "surprise"),
        ({"channels": ["sms", "sms"]}, "channels"),
        ({"variables": {"order_id": None}}, "variables"),  # "None" in the SMS, once
        ({"variables": {"order_id": {"n": 77}}}, "variables"),
    ],
)
async def test_an_invalid_request_is_422_naming_the_field(http, committed, overrides, field):
    doc = body(**overrides)
    answer = await http.post("/v1/intents", json=doc, headers=BEARER)
    assert answer.status_code == 422, answer.text
    assert field in [loc for issue in answer.json()["detail"] for loc in issue["loc"]]
    assert intents_with_key(committed, doc["business_key"]) == 0


@pytest.mark.parametrize(
    ("field", "when"),
    [
        ("expires_at", "0001-01-01T00:00:00+14:00"),
        ("send_at", "0001-01-01T00:00:00+14:00"),
        ("send_at", "9999-12-31T23:59:59Z"),
    ],
)
async def test_a_time_the_ledger_cannot_hold_is_422_and_the_list_still_reads(
    http, committed, field, when
):
    # Once a 201 and a BC date in Postgres that psycopg could not read back: every list
    # through that row was a 500, for every role (and the relay retried it forever).
    doc = body(**{field: when})
    answer = await http.post("/v1/intents", json=doc, headers=BEARER)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"] == [
        {
            "loc": ["body", field],
            "msg": "must be within 366 days of now, either way",
            "type": "invalid_request",
        }
    ]
    assert intents_with_key(committed, doc["business_key"]) == 0
    assert (await http.get("/v1/intents?limit=200", headers=BEARER)).status_code == 200


async def test_every_problem_of_a_request_is_named_at_once(http, committed):
    doc = body(
        template_key="class-opening",
        template_version=None,
        variables={"class_name": "Spin"},
        phone="+1555000",  # E.164 in form (the schema's pattern), but no such number
        timezone="Mars/Olympus",
    )
    answer = await http.post("/v1/intents", json=doc, headers=BEARER)
    assert answer.status_code == 422, answer.text
    issues = {issue["loc"][-1]: issue["msg"] for issue in answer.json()["detail"]}
    assert set(issues) == {"phone", "timezone", "variables"}, issues
    # All three missing variables in one message, not one per try, each with its shape.
    assert issues["variables"] == (
        "template 'class-opening': needs starts_at (text), hold_until (text), booking_url "
        "(text), missing from the variables"
    )
    assert intents_with_key(committed, doc["business_key"]) == 0


async def test_a_422_names_the_problem_but_never_echoes_what_was_sent(http, committed):
    phone, address = 447400123456, "ann.lee+herald@example.com"
    doc = body(phone=phone, contact=address)
    answer = await http.post("/v1/intents", json=doc, headers=BEARER)
    assert answer.status_code == 422, answer.text
    assert str(phone) not in answer.text and address not in answer.text
    issues = answer.json()["detail"]
    assert all(set(issue) == {"loc", "msg", "type"} for issue in issues), issues
    named = {(tuple(issue["loc"]), issue["type"]) for issue in issues}
    assert named == {(("body", "phone"), "string_type"), (("body", "contact"), "extra_forbidden")}
    assert all(issue["msg"] for issue in issues)
    assert intents_with_key(committed, doc["business_key"]) == 0


@pytest.mark.parametrize(
    ("method", "path", "json", "where"),
    [
        ("GET", "/v1/intents?since=ann.lee%40example.com", None, ["query", "since"]),
        (
            "POST",
            "/v1/intents/x/cancel",
            {"reason": ["ann.lee@example.com"]},
            ["body", "reason"],
        ),
    ],
)
async def test_every_route_422_leaves_out_the_value_sent(http, method, path, json, where):
    answer = await http.request(method, path, json=json, headers=BEARER)
    assert answer.status_code == 422, answer.text
    assert "ann.lee" not in answer.text
    issues = answer.json()["detail"]
    assert issues and all(set(issue) == {"loc", "msg", "type"} for issue in issues), issues
    assert where in [issue["loc"] for issue in issues]


async def test_an_idempotency_key_replays_the_first_response(http, temporal):
    key = secrets.token_hex(8)
    doc = body()
    first = await http.post("/v1/intents", json=doc, headers={**BEARER, "Idempotency-Key": key})
    assert first.status_code == 201
    replay = await http.post("/v1/intents", json=doc, headers={**BEARER, "Idempotency-Key": key})
    assert replay.status_code == 201 and replay.json() == first.json()
    assert replay.headers["idempotent-replayed"] == "true"
    assert len(temporal.starts) == 1  # the replay did no work


async def test_an_idempotency_key_with_another_body_is_422(http):
    key = secrets.token_hex(8)
    headers = {**BEARER, "Idempotency-Key": key}
    assert (await http.post("/v1/intents", json=body(), headers=headers)).status_code == 201
    other = await http.post("/v1/intents", json=body(), headers=headers)
    assert other.status_code == 422
    assert other.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]


async def test_a_concurrent_duplicate_is_409_while_the_first_is_in_flight(
    http, committed, temporal
):
    temporal.start_gate = asyncio.Event()
    key = secrets.token_hex(8)
    headers = {**BEARER, "Idempotency-Key": key}
    doc = body()
    first = asyncio.create_task(http.post("/v1/intents", json=doc, headers=headers))
    await asyncio.wait_for(temporal.start_entered.wait(), 10)
    with committed() as session:
        record = session.get(IdempotencyRecord, scoped(key, by=BREAK_GLASS_NAME))
        assert record is not None and record.status_code is None  # committed before the work
    duplicate = await http.post("/v1/intents", json=doc, headers=headers)
    assert duplicate.status_code == 409 and duplicate.headers["retry-after"] == "1"
    temporal.start_gate.set()
    assert (await first).status_code == 201
    replay = await http.post("/v1/intents", json=doc, headers=headers)
    assert replay.status_code == 201 and replay.json() == (await first).json()
    assert temporal.starts == [replay.json()["workflow_id"]]


async def test_a_request_refused_by_validation_releases_its_key(http, committed):
    key = secrets.token_hex(8)
    headers = {**BEARER, "Idempotency-Key": key}
    bad = await http.post("/v1/intents", json=body(phone="+1 555"), headers=headers)
    assert bad.status_code == 422
    with committed() as session:
        assert session.get(IdempotencyRecord, scoped(key, by=BREAK_GLASS_NAME)) is None
    assert (await http.post("/v1/intents", json=body(), headers=headers)).status_code == 201


async def test_an_abandoned_in_flight_key_is_taken_over_after_its_lease(http, committed):
    key = secrets.token_hex(8)
    doc = body()
    from api.idempotency import fingerprint

    with committed.begin() as session:
        session.add(
            IdempotencyRecord(
                key=scoped(key, by=BREAK_GLASS_NAME),
                request_sha256=fingerprint("POST", "/v1/intents", doc, by=BREAK_GLASS_NAME),
                created_at=datetime.now(UTC) - timedelta(minutes=5),
            )
        )
    answer = await http.post("/v1/intents", json=doc, headers={**BEARER, "Idempotency-Key": key})
    assert answer.status_code == 201


@pytest.mark.parametrize("key", ["", "x" * 201, "caf\u00e9".encode(), "a\tb"])
async def test_a_malformed_idempotency_key_is_400(http, key):
    answer = await http.post("/v1/intents", json=body(), headers={**BEARER, "Idempotency-Key": key})
    assert answer.status_code == 400


async def test_list_filters_by_derived_state_and_plan(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    created = (await http.post("/v1/intents", json=body(), headers=BEARER)).json()
    since = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()

    sending = await http.get(
        "/v1/intents", params={"state": "sending", "since": since, "limit": 500}, headers=BEARER
    )
    assert sending.status_code == 200
    ids = {i["id"] for i in sending.json()["items"]}
    assert sent.intent_id in ids and created["intent_id"] not in ids

    pending = await http.get(
        "/v1/intents",
        params={"state": "pending", "channel": "sms", "event_type": "order-created"},
        headers=BEARER,
    )
    assert created["intent_id"] in {i["id"] for i in pending.json()["items"]}
    assert all(i["state"] == "pending" for i in pending.json()["items"])

    none = await http.get(
        "/v1/intents", params={"channel": "email", "since": since}, headers=BEARER
    )
    assert {sent.intent_id, created["intent_id"]}.isdisjoint(i["id"] for i in none.json()["items"])

    # The batched derivation agrees with the ledger's own, intent by intent.
    everything = (await http.get("/v1/intents", params={"limit": 100}, headers=BEARER)).json()
    with committed() as session:
        for item in everything["items"]:
            assert item["state"] == timeline.derived_state(session, item["id"])


async def test_list_filters_the_intents_waiting_for_an_operator_and_says_until_when(
    http, committed, cipher
):
    settling, resending, working = (submitted_attempt(committed, cipher) for _ in range(3))
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
    with committed.begin() as session:
        for sent, awaiting in ((settling, "settlement"), (resending, "resend")):
            session.execute(
                update(Intent)
                .where(Intent.id == sent.intent_id)
                .values(awaiting=awaiting, awaiting_until=until)
            )

    async def listed(awaiting: str) -> dict[str, dict]:
        answer = await http.get(
            "/v1/intents", params={"awaiting": awaiting, "limit": 500}, headers=BEARER
        )
        assert answer.status_code == 200, answer.text
        return {i["id"]: i for i in answer.json()["items"]}

    settlement, resend, anything = [await listed(a) for a in ("settlement", "resend", "any")]
    assert settling.intent_id in settlement and resending.intent_id not in settlement
    assert resending.intent_id in resend and settling.intent_id not in resend
    assert {settling.intent_id, resending.intent_id} <= anything.keys()
    assert working.intent_id not in {*settlement, *resend, *anything}
    item = resend[resending.intent_id]
    assert item["awaiting"] == "resend"
    assert datetime.fromisoformat(item["awaiting_until"]) == until
    assert all(i["awaiting"] == "settlement" for i in settlement.values())
    # An unknown value is refused in the shape of every validation error, naming the field.
    wrong = await http.get("/v1/intents", params={"awaiting": "approval"}, headers=BEARER)
    assert wrong.status_code == 422
    assert wrong.json()["detail"][0]["loc"] == ["query", "awaiting"]


async def test_read_returns_the_timeline_and_unknown_is_404(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    answer = await http.get(f"/v1/intents/{sent.intent_id}", headers=BEARER)
    assert answer.status_code == 200
    doc = answer.json()
    assert doc["intent"]["state"] == "sending" and doc["attempts"][0]["token"] == sent.token
    assert doc["intent"]["template_pins"] == {"sms": {"locale": "en", "version": 1}}
    missing = await http.get("/v1/intents/order-created:o-none", headers=BEARER)
    assert missing.status_code == 404


@pytest.mark.parametrize("route", ["cancel", "approve-resend", "settle"])
@pytest.mark.parametrize("blank", ["   ", "\u200b\u200b", " \u2060\ufeff\t"])
async def test_a_reason_without_a_visible_character_is_422_and_nothing_is_recorded(
    http, committed, cipher, temporal, route, blank
):
    sent = submitted_attempt(committed, cipher)
    extra = {"channel": "sms"} if route == "approve-resend" else {}
    if route == "settle":
        extra = {"rule": "carrier-confirmed-delivered"}
    answer = await http.post(
        f"/v1/intents/{sent.intent_id}/{route}", json={"reason": blank, **extra}, headers=BEARER
    )
    assert answer.status_code == 422, answer.text
    [issue] = answer.json()["detail"]
    assert issue["loc"] == ["body", "reason"] and "rule reason.worded" in issue["msg"]
    doc = (await http.get(f"/v1/intents/{sent.intent_id}", headers=BEARER)).json()
    assert doc["operator_actions"] == [] and doc["intent"]["state"] == "sending"


@pytest.mark.parametrize(
    ("route", "extra", "field", "text"),
    [
        ("cancel", {}, "reason", "member asked by phone +447400000777"),
        ("cancel", {}, "reason", "mail carol.q@example.net instead"),
        ("cancel", {}, "reason", "called her on 07400 000777"),  # national, in the intent's GB
        ("approve-resend", {"channel": "sms"}, "reason", "resend to +1 415 555 2671"),
        ("settle", {"rule": "carrier-confirmed-delivered"}, "reason", "she wrote from a@b.io"),
        (
            "settle",
            {"rule": "carrier-confirmed-delivered", "reason": "ok"},
            "reference",
            "+447400000777",
        ),
    ],
)
async def test_an_operator_note_holding_contact_data_is_422_and_nothing_is_recorded(
    http, committed, cipher, temporal, route, extra, field, text
):
    # The reason (and a settlement's reference) is the update's input in Temporal's history
    # and shows in every timeline, to viewers too.
    sent = submitted_attempt(committed, cipher)
    answer = await http.post(
        f"/v1/intents/{sent.intent_id}/{route}",
        json={"reason": "x", **extra, field: text},
        headers=BEARER,
    )
    assert answer.status_code == 422, answer.text
    [issue] = answer.json()["detail"]
    assert issue["loc"] == ["body", field] and issue["type"] == "invalid_request"
    assert (
        f"rule {field}.no_contact_data" in issue["msg"] and "nothing was recorded" in issue["msg"]
    )
    assert "7400" not in answer.text and "@" not in answer.text and "2671" not in answer.text
    doc = (await http.get(f"/v1/intents/{sent.intent_id}", headers=BEARER)).json()
    assert doc["operator_actions"] == [] and doc["intent"]["state"] == "sending"
    # A ticket number and a date are fine in a note.
    fine = await http.post(
        f"/v1/intents/{sent.intent_id}/cancel",
        json={"reason": "carrier ticket 1234567890 of 2026-12-07"},
        headers=BEARER,
    )
    assert fine.status_code == 200, fine.text


async def test_an_operator_body_refuses_unknown_fields_but_takes_the_old_operator_field(
    http, committed, cipher
):
    sent = submitted_attempt(committed, cipher)
    surprise = await http.post(
        f"/v1/intents/{sent.intent_id}/cancel",
        json={"reason": "x", "resaon": "typo"},
        headers=BEARER,
    )
    assert surprise.status_code == 422, surprise.text
    [issue] = surprise.json()["detail"]
    assert (issue["loc"], issue["type"]) == (["body", "resaon"], "extra_forbidden")
    doc = (await http.get(f"/v1/intents/{sent.intent_id}", headers=BEARER)).json()
    assert doc["operator_actions"] == []
    # A lookup's body may be left out: its one field has a default.
    looked = await http.post(f"/v1/intents/{sent.intent_id}/lookup", headers=BEARER)
    assert looked.status_code == 200 and looked.json()["found"] is False, looked.text


async def test_cancel_of_a_finished_intent_is_recorded_and_resend_refused(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    operator = {"operator": "ops@example.org", "reason": "customer called"}
    cancel = await http.post(f"/v1/intents/{sent.intent_id}/cancel", json=operator, headers=BEARER)
    assert cancel.status_code == 200 and cancel.json()["accepted"] is True
    resend = await http.post(
        f"/v1/intents/{sent.intent_id}/approve-resend",
        json={**operator, "channel": "sms"},
        headers=BEARER,
    )
    assert resend.status_code == 409 and resend.json()["accepted"] is False
    actions = (await http.get(f"/v1/intents/{sent.intent_id}", headers=BEARER)).json()
    assert [(a["action"], a["outcome"]) for a in actions["operator_actions"]] == [
        ("cancel", "accepted"),
        ("approve-resend", "refused"),
    ]


async def test_a_second_cancel_says_already_cancelled_and_records_nothing(http, committed, cipher):
    # One form posted twice, then once more replayed: one accepted cancel on record.
    sent = submitted_attempt(committed, cipher)
    body = {"reason": "customer called"}
    first = await http.post(f"/v1/intents/{sent.intent_id}/cancel", json=body, headers=BEARER)
    assert first.status_code == 200 and first.json()["accepted"] is True
    for _ in range(2):
        again = await http.post(f"/v1/intents/{sent.intent_id}/cancel", json=body, headers=BEARER)
        assert again.status_code == 200, again.text
        assert again.json()["message"] == "already cancelled"
    doc = (await http.get(f"/v1/intents/{sent.intent_id}", headers=BEARER)).json()
    assert [(a["action"], a["outcome"]) for a in doc["operator_actions"]] == [
        ("cancel", "accepted")
    ]


@pytest.mark.parametrize(
    ("key", "what"),
    [("signup:447400123456", "phone number"), ("signup:ann.lee@example.com", "email address")],
)
async def test_a_business_key_holding_contact_data_is_422_naming_the_rule(
    http, committed, temporal, key, what
):
    answer = await http.post("/v1/intents", json=body(business_key=key), headers=BEARER)
    assert answer.status_code == 422, answer.text
    [issue] = answer.json()["detail"]
    assert issue["loc"] == ["body", "business_key"]
    assert "business_key.no_contact_data" in issue["msg"] and what in issue["msg"]
    assert "447400123456" not in answer.text and "ann.lee" not in answer.text
    assert intents_with_key(committed, key) == 0 and temporal.starts == []


async def test_the_python_client_refuses_a_business_key_holding_a_phone_number(
    committed, cipher, temporal
):
    from domain.requests import NotificationRequest
    from ledger.errors import InvalidRequest
    from starter.client import HeraldClient

    client = HeraldClient(temporal, committed, cipher)
    key = "signup:447400123456"
    request = NotificationRequest(
        business_key=key,
        recipient_ref="m-1842",
        template_key="order-created",
        template_version=1,
        phone=random_mobile(),
        variables={"order_id": "o-77"},
    )
    with pytest.raises(InvalidRequest) as refused:
        await client.notify(request)
    assert refused.value.field == "business_key"
    assert "business_key.no_contact_data" in str(refused.value)
    assert "447400123456" not in str(refused.value)
    assert intents_with_key(committed, key) == 0 and temporal.starts == []


async def test_one_rule_is_one_refusal_whichever_layer_finds_it(http, committed):
    # In E.164 form the schema's own check finds the number; in national form only intake
    # can (it needs the phone's country). Both answer the same issue, in the same words.
    phone = random_mobile()
    national = "0" + phone.removeprefix("+44")
    answers = [
        await http.post("/v1/intents", json=body(business_key=key, phone=phone), headers=BEARER)
        for key in (f"signup:{phone}", f"signup:{national}")
    ]
    issues = [answer.json()["detail"] for answer in answers]
    assert [answer.status_code for answer in answers] == [422, 422], issues
    assert issues[0] == issues[1], issues
    [issue] = issues[0]
    assert issue["loc"] == ["body", "business_key"] and issue["type"] == "invalid_request"
    assert issue["msg"].startswith("business key holds a phone number (rule business_key.")
    assert phone[3:] not in answers[0].text and national not in answers[1].text


async def test_a_pattern_refusal_says_what_the_field_must_be_not_the_regex(http, committed):
    answer = await http.post("/v1/intents", json=body(phone="07400 123456"), headers=BEARER)
    assert answer.status_code == 422, answer.text
    [issue] = answer.json()["detail"]
    assert issue["loc"] == ["body", "phone"]
    assert issue["msg"].startswith("must be a phone number in E.164 form: + and 7 to 15 digits")
    assert "should match pattern" not in answer.text and "^" not in answer.text


async def test_a_text_of_the_wrong_length_is_counted_in_characters(http, committed, cipher):
    # Text fields are checked after their own validator, where pydantic says "items".
    long_ref = await http.post("/v1/intents", json=body(recipient_ref="r" * 121), headers=BEARER)
    [issue] = long_ref.json()["detail"]
    assert (issue["loc"], issue["msg"], issue["type"]) == (
        ["body", "recipient_ref"],
        "String should have at most 120 characters",
        "too_long",
    )
    sent = submitted_attempt(committed, cipher)
    empty = await http.post(
        f"/v1/intents/{sent.intent_id}/cancel", json={"reason": ""}, headers=BEARER
    )
    [issue] = empty.json()["detail"]
    assert (issue["loc"], issue["msg"]) == (
        ["body", "reason"],
        "String should have at least 1 character",
    )
    assert "item" not in long_ref.text + empty.text


async def test_an_unknown_time_zone_names_the_field_not_the_value(http, committed):
    answer = await http.post("/v1/intents", json=body(timezone="Mars/Olympus"), headers=BEARER)
    assert answer.status_code == 422, answer.text
    [issue] = answer.json()["detail"]
    assert issue == {
        "loc": ["body", "timezone"],
        "msg": "not a time zone in the IANA database (e.g. Europe/London)",
        "type": "invalid_request",
    }
    assert "Mars" not in answer.text and "Olympus" not in answer.text
