"""Telnyx's Ed25519-signed events: verified against the raw body before any parse (the
official `telnyx` package is the oracle: Herald accepts exactly what it accepts),
deduplicated on `data.id`, recorded through the one transition, signalled; inbound STOP
through Telnyx suppresses SMS for every provider."""

from __future__ import annotations

import base64
import json
import secrets
import time
import uuid
from typing import get_args

import pytest
from nacl.signing import SigningKey
from sqlalchemy import select
from telnyx import Telnyx

from domain.states import TELNYX_STATUSES
from ledger import repository as repo
from ledger.models import InboundKeyword
from tests.api.conftest import (
    TELNYX_PUBLIC_KEY,
    TELNYX_SIGNING_KEY,
    attempt_state,
    observations_of,
    random_mobile,
    sent_through,
    submitted_attempt,
    webhook_observations,
)

pytestmark = pytest.mark.ledger

PATH = "/v1/webhooks/telnyx"


def event(
    event_type: str, remote_id: str, status: str, *, code: str | None = None, event_id=None
) -> str:
    return json.dumps(
        {
            "data": {
                "event_type": event_type,
                "id": event_id or str(uuid.uuid4()),
                "occurred_at": "2026-12-07T00:00:00.000Z",
                "record_type": "event",
                "payload": {
                    "id": remote_id,
                    "direction": "outbound",
                    "to": [{"phone_number": "+447400000100", "status": status}],
                    "errors": [{"code": code, "title": "x"}] if code else [],
                },
            },
            "meta": {"attempt": 1},
        }
    )


def inbound(sender: str, text: str) -> str:
    payload = {
        "id": str(uuid.uuid4()),
        "direction": "inbound",
        "from": {"phone_number": sender},
        "to": [{"phone_number": "+15005550006", "status": "webhook_delivered"}],
        "text": text,
    }
    data = {"event_type": "message.received", "id": str(uuid.uuid4()), "payload": payload}
    return json.dumps({"data": data})


def signed_headers(
    body: str, *, key: SigningKey = TELNYX_SIGNING_KEY, timestamp: int | None = None
) -> dict[str, str]:
    """What Telnyx sends: Ed25519 (PyNaCl, as the official package verifies) over
    `timestamp|body`."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signature = key.sign(f"{stamp}|{body}".encode()).signature
    return {
        "telnyx-signature-ed25519": base64.b64encode(signature).decode(),
        "telnyx-timestamp": stamp,
        "content-type": "application/json",
    }


async def post(http, body: str, headers: dict[str, str], *, token: str | None = None):  # type: ignore[no-untyped-def]
    params = {"token": token} if token else None
    return await http.post(PATH, content=body.encode(), headers=headers, params=params)


def official_accepts(body: str, headers: dict[str, str]) -> bool:
    try:
        Telnyx(api_key="unused", public_key=TELNYX_PUBLIC_KEY).webhooks.unwrap(
            body, headers=headers
        )
    except ValueError:
        return False
    return True


def _tampered(body: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    return body.replace('"outbound"', '"inbound "'), headers


def _other_key(body: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    return body, signed_headers(body, key=SigningKey.generate())


def _stale(body: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    return body, signed_headers(body, timestamp=int(time.time()) - 301)


def _future(body: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    return body, signed_headers(body, timestamp=int(time.time()) + 301)


def _almost_stale(body: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    return body, signed_headers(body, timestamp=int(time.time()) - 240)


def _timestamp_swapped(body: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    return body, {**headers, "telnyx-timestamp": str(int(headers["telnyx-timestamp"]) - 1)}


def _not_base64(body: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    return body, {**headers, "telnyx-signature-ed25519": "not base64!"}


def _short_signature(body: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    return body, {**headers, "telnyx-signature-ed25519": base64.b64encode(b"x" * 63).decode()}


def _unchanged(body: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    return body, headers


def _reserialized(body: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    # The same JSON, other bytes: the signature covers bytes, not meaning.
    return json.dumps(json.loads(body), indent=1), headers


@pytest.mark.parametrize(
    "mutate",
    [
        _unchanged,
        _almost_stale,
        _tampered,
        _reserialized,
        _other_key,
        _stale,
        _future,
        _timestamp_swapped,
        _not_base64,
        _short_signature,
    ],
)
async def test_herald_accepts_exactly_what_the_official_package_accepts(
    http, committed, cipher, mutate
):
    sent = submitted_attempt(committed, cipher)
    body, headers = mutate(*_signed(event("message.sent", sent.remote_id, "sent")))
    expected = official_accepts(body, headers)
    answer = await post(http, body, headers)
    assert answer.status_code == (204 if expected else 403), answer.text
    assert attempt_state(committed, sent.attempt_id) == ("sent" if expected else "submitted")


@pytest.mark.parametrize("stamp", [b"\xb2", b"9" * 5000, "\u0661\u0667".encode()])
async def test_a_timestamp_that_is_not_ascii_unix_seconds_is_403(http, committed, cipher, stamp):
    # "²" and Arabic-Indic digits pass str.isdigit() and int() then raised (a 500 before
    # any signature check); over 4,300 digits int() refuses too.
    sent = submitted_attempt(committed, cipher)
    body, headers = _signed(event("message.sent", sent.remote_id, "sent"))
    raw = {k.encode(): v.encode() for k, v in headers.items()} | {b"telnyx-timestamp": stamp}
    answer = await post(http, body, raw)  # type: ignore[arg-type]
    assert answer.status_code == 403, answer.text
    assert "telnyx-timestamp is not unix seconds" in answer.text
    assert attempt_state(committed, sent.attempt_id) == "submitted"


def _signed(body: str) -> tuple[str, dict[str, str]]:
    return body, signed_headers(body)


async def test_an_unsigned_event_is_403_and_changes_nothing(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    body = event("message.finalized", sent.remote_id, "delivered")
    answer = await post(http, body, {"content-type": "application/json"})
    assert answer.status_code == 403
    assert attempt_state(committed, sent.attempt_id) == "submitted"
    assert observations_of(committed, remote_id=sent.remote_id)[-1].source == "send"


async def test_a_signed_body_that_is_not_json_is_400_only_after_the_signature(http):
    body = "not json {"
    assert (await post(http, body, {"content-type": "application/json"})).status_code == 403
    assert (await post(http, body, signed_headers(body))).status_code == 400


async def test_a_finalized_delivery_is_recorded_applied_and_signalled(
    http, committed, cipher, temporal
):
    sent = submitted_attempt(committed, cipher)
    body = event("message.finalized", sent.remote_id, "delivered")
    answer = await post(http, body, signed_headers(body))
    assert answer.status_code == 204
    assert attempt_state(committed, sent.attempt_id) == "delivered"
    (webhook,) = [
        o for o in observations_of(committed, remote_id=sent.remote_id) if o.source == "webhook"
    ]
    assert (webhook.raw_status, webhook.verdict, webhook.applied) == ("delivered", "applied", True)
    assert [(wid, name, arg.state) for wid, name, arg in temporal.signals] == [
        (sent.workflow_id, "receipt", "delivered")
    ]


async def test_a_redelivered_event_is_one_observation(http, committed, cipher, temporal):
    sent = submitted_attempt(committed, cipher)
    event_id = str(uuid.uuid4())
    body = event("message.finalized", sent.remote_id, "delivery_failed", code="40008",
                 event_id=event_id)  # fmt: skip
    for _ in range(3):
        # Each redelivery is signed afresh (a new timestamp); the event id is the same.
        assert (await post(http, body, signed_headers(body))).status_code == 204
    webhook = [
        o for o in observations_of(committed, remote_id=sent.remote_id) if o.source == "webhook"
    ]
    assert [(o.raw_status, o.provider_code) for o in webhook] == [("delivery_failed", "40008")]
    assert attempt_state(committed, sent.attempt_id) == "undelivered"
    assert len(temporal.signals) == 1


async def test_a_late_sent_after_delivered_is_stale_evidence(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    for status, kind in (("delivered", "message.finalized"), ("sent", "message.sent")):
        body = event(kind, sent.remote_id, status)
        assert (await post(http, body, signed_headers(body))).status_code == 204
    assert attempt_state(committed, sent.attempt_id) == "delivered"
    verdicts = [
        (o.raw_status, o.applied)
        for o in observations_of(committed, remote_id=sent.remote_id)
        if o.source == "webhook"
    ]
    assert verdicts == [("delivered", True), ("sent", False)]


async def test_a_token_for_another_message_is_not_trusted(http, committed, cipher):
    # Telnyx does not sign the URL: a token naming an attempt that already has another
    # remote id is ignored, and the event is kept as orphan evidence by its message id.
    sent = submitted_attempt(committed, cipher)
    stranger = str(uuid.uuid4())
    body = event("message.finalized", stranger, "delivered")
    answer = await post(http, body, signed_headers(body), token=sent.token)
    assert answer.status_code == 204
    assert attempt_state(committed, sent.attempt_id) == "submitted"
    (orphan,) = observations_of(committed, remote_id=stranger)
    assert orphan.attempt_id is None


def test_every_status_the_official_package_documents_has_a_meaning() -> None:
    from telnyx.types.outbound_message_payload import To

    documented = set(get_args(get_args(To.model_fields["status"].annotation)[0]))
    assert {"expired", "read", "delivered"} <= documented
    assert documented <= TELNYX_STATUSES, documented - TELNYX_STATUSES


@pytest.mark.parametrize(("status", "state"), [("expired", "failed"), ("read", "delivered")])
async def test_an_expired_or_read_message_is_recorded_as_what_it_means(
    http, committed, cipher, status, state
):
    sent = submitted_attempt(committed, cipher)
    body = event("message.finalized", sent.remote_id, status)
    assert (await post(http, body, signed_headers(body))).status_code == 204
    assert attempt_state(committed, sent.attempt_id) == state


async def test_an_event_naming_an_attempt_sent_through_twilio_moves_nothing(
    http, committed, cipher, temporal
):
    sent = submitted_attempt(committed, cipher)
    sent_through(committed, sent.attempt_id, "twilio")
    body = event("message.finalized", sent.remote_id, "delivery_failed", code="40008")
    answer = await post(http, body, signed_headers(body), token=sent.token)
    assert answer.status_code == 204
    assert attempt_state(committed, sent.attempt_id) == "submitted"
    (kept,) = webhook_observations(committed, sent.remote_id)
    assert (kept.attempt_id, kept.applied) == (None, False)
    assert "sent through twilio; Telnyx message events" in kept.detail["not_applied"]
    assert temporal.signals == []


@pytest.mark.parametrize("media_type", ["text/plain", "application/x-www-form-urlencoded", ""])
async def test_a_signed_event_not_sent_as_json_is_400_and_changes_nothing(
    http, committed, cipher, media_type
):
    sent = submitted_attempt(committed, cipher)
    body = event("message.finalized", sent.remote_id, "delivered")
    answer = await post(http, body, {**signed_headers(body), "content-type": media_type})
    assert answer.status_code == 400, answer.text
    assert answer.json()["detail"] == "Content-Type must be application/json"
    assert attempt_state(committed, sent.attempt_id) == "submitted"


async def test_an_unknown_status_word_is_400(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    body = event("message.sent", sent.remote_id, "teleported")
    assert (await post(http, body, signed_headers(body))).status_code == 400


async def test_other_event_types_are_acknowledged_and_ignored(http):
    body = json.dumps({"data": {"event_type": "number_order.complete", "id": "e1", "payload": {}}})
    assert (await post(http, body, signed_headers(body))).status_code == 204


@pytest.mark.parametrize("word", ["STOP", " stop ", "Unsubscribe!"])
async def test_a_stop_through_telnyx_suppresses_sms_for_every_provider(http, committed, cipher,
                                                                        word):  # fmt: skip
    phone = random_mobile()
    body = inbound(phone, word)
    assert (await post(http, body, signed_headers(body))).status_code == 204
    with committed() as session:
        (row,) = repo.suppressions_for(session, cipher.lookup_hmac(phone), "sms")
    # Kept per destination and channel, not per provider: a Twilio send is refused too.
    assert row.reason == "opted_out" and row.source.startswith("keyword:")


async def test_start_through_telnyx_lifts_an_opt_out_received_through_twilio(
    http, committed, cipher
):
    from tests.api.conftest import post_signed

    phone = random_mobile()
    twilio_stop = {"MessageSid": "SM" + secrets.token_hex(16), "From": phone, "Body": "STOP"}
    assert (await post_signed(http, "/v1/inbound/sms", twilio_stop)).status_code == 200
    body = inbound(phone, "START")
    assert (await post(http, body, signed_headers(body))).status_code == 204
    with committed() as session:
        assert repo.suppressions_for(session, cipher.lookup_hmac(phone), "sms") == []


async def test_a_stop_replayed_or_delayed_past_a_start_opts_nobody_out_again(
    http, committed, cipher
):
    phone = random_mobile()
    lookup = cipher.lookup_hmac(phone)

    def keyword(word: str, at: str) -> str:
        document = json.loads(inbound(phone, word))
        document["data"]["payload"]["received_at"] = at
        return json.dumps(document)

    stop, start = keyword("STOP", "2026-12-07T10:00:00Z"), keyword("START", "2026-12-07T10:01:00Z")
    late_stop = keyword("STOP", "2026-12-07T10:00:30Z")  # sent before the START, came after
    for body in (stop, start, stop, late_stop):
        # Each signed afresh, as a redelivery (or a replay inside the 300 s) would be.
        assert (await post(http, body, signed_headers(body))).status_code == 204
    with committed() as session:
        assert repo.suppressions_for(session, lookup, "sms") == []
        kept = session.execute(
            select(InboundKeyword.word, InboundKeyword.applied)
            .where(InboundKeyword.destination_hmac == lookup)
            .order_by(InboundKeyword.received_at)
        ).all()
    assert [tuple(k) for k in kept] == [("STOP", True), ("START", True), ("STOP", False)]


async def test_without_a_configured_key_every_event_is_refused(committed, cipher, temporal):
    import httpx

    from api.app import Ingress, create_app
    from starter.client import HeraldClient

    app = create_app(
        Ingress(
            HeraldClient(temporal, committed, cipher),
            auth_token="t",
            public_base_url="https://h",
            operator_token=None,
            unsubscribe_secret="s",
        )
    )
    body = inbound(random_mobile(), "STOP")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as c:
        answer = await post(c, body, signed_headers(body))
    assert answer.status_code == 403 and "public key" in answer.json()["detail"]


async def test_a_stop_through_telnyx_refuses_a_later_send_routed_to_twilio(http, committed, cipher):
    from activities.contracts import AuthorizeInput
    from activities.ledger import LedgerActivities
    from tests.activities import intents

    phone = random_mobile()
    body = inbound(phone, "STOP")
    assert (await post(http, body, signed_headers(body))).status_code == 204
    key = f"class-opening:c-9081:m-{uuid.uuid4().hex[:8]}"
    intent_id = intents.record(committed, cipher, intents.demo_request(key, phone), consent="sms")
    # The packaged policy routes SMS to `twilio` alone: the opt-out came through Telnyx.
    decided = await LedgerActivities(committed, cipher).authorize(
        AuthorizeInput(intent_id, "sms", 1)
    )
    assert decided.outcome == "deny" and decided.rule.startswith("suppression")
    assert decided.attempt_token is None
