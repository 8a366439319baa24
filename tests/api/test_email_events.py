"""SendGrid's Event Webhook: verified before any parse (the official package agrees with
every signature used here), each event stored once, mapped to the one lattice; bounces and
complaints suppress with the event as evidence; no address is stored."""

from __future__ import annotations

import json
import re
import secrets
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sendgrid.helpers.eventwebhook import EventWebhook
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.ingress.sendgrid import EVENTS_PATH
from domain.email_events import SIGNATURE_HEADER, TIMESTAMP_HEADER, TOKEN_ARG
from domain.principals import Role
from domain.states import AttemptState
from ledger import observations
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.models import Observation, Suppression
from ledger.observations import ObservationFacts
from tests.api.conftest import (
    EVENT_PRIVATE_KEY,
    EVENT_PUBLIC_KEY,
    StubTemporal,
    attempt_state,
    random_mobile,
    submitted_attempt,
)
from tests.api.test_console import principal, sign_in
from tests.api.test_metrics import samples, value
from tests.conftest import unique
from tests.ledger.conftest import fields, make_attempt
from tests.ledger.test_retention import ITINERARY
from transports.sendgrid import generate_event_key_pair, sign_event_batch

pytestmark = pytest.mark.ledger

PRIVATE, PUBLIC = EVENT_PRIVATE_KEY, EVENT_PUBLIC_KEY


def email_attempt(
    sessions: sessionmaker[Session],
    cipher: FieldCipher,
    *,
    category: str = "transactional",
    sender: str = "Herald <notifications@herald.example>",
) -> tuple[str, str, int, str]:
    """An email attempt SendGrid accepted (`submitted`): (token, workflow id, id, address)."""
    key = unique("order-created:o")
    address = f"ada.{secrets.token_hex(4)}@example.com"
    with sessions.begin() as session:
        recorded = repo.record_intent(
            session,
            fields(
                session,
                cipher,
                key,
                email=address,
                category=category,
                channels=("email",),
                country="GB",
                template_key="itinerary-change",
                variables=ITINERARY,
            ),
        )
        attempt = make_attempt(
            session, cipher, recorded.intent_id, key, channel="email", destination=address
        )
        attempt.sender_address = sender
        observations.record_observation(
            session,
            ObservationFacts(
                source="send",
                raw_status="202",
                normalized=AttemptState.SUBMITTED,
                observed_at=datetime.now(UTC),
                dedupe_key=f"send:{attempt.token}",
                remote_id="sg" + secrets.token_hex(8),
            ),
            token=attempt.token,
        )
        return attempt.token, recorded.workflow_id, attempt.id, address


def event(token: str, address: str, word: str, **extra: Any) -> dict[str, Any]:
    return {
        "email": address,
        "timestamp": int(time.time()),
        "event": word,
        "sg_event_id": secrets.token_urlsafe(16),
        "sg_message_id": "abc.filter-1.0",
        TOKEN_ARG: token,
        **extra,
    }


def signed(events: list[dict[str, Any]], *, timestamp: str | None = None) -> tuple[bytes, dict]:
    body = json.dumps(events).encode()
    stamp = timestamp or str(int(time.time()))
    signature = sign_event_batch(PRIVATE, timestamp=stamp, body=body)
    # Every signature these tests send is one the official package accepts.
    hook = EventWebhook()
    assert hook.verify_signature(
        body.decode(), signature, stamp, hook.convert_public_key_to_ecdsa(PUBLIC)
    )
    return body, {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signature,
        TIMESTAMP_HEADER: stamp,
    }


async def post(http: httpx.AsyncClient, events: list[dict[str, Any]], **kw: Any) -> httpx.Response:
    body, headers = signed(events, **kw)
    return await http.post(EVENTS_PATH, content=body, headers=headers)


def stored(sessions, token: str) -> list[Observation]:  # type: ignore[no-untyped-def]
    with sessions() as session:
        attempt = repo.attempt_by_token(session, token)
        return [
            o for o in observations.observations_of(session, attempt.id) if o.source == "webhook"
        ]


def suppressions(sessions, address: str, cipher: FieldCipher) -> list[Suppression]:  # type: ignore[no-untyped-def]
    with sessions() as session:
        return list(
            session.execute(
                select(Suppression).where(
                    Suppression.destination_hmac == cipher.lookup_hmac(address)
                )
            ).scalars()
        )


async def test_a_delivered_event_reaches_delivered_and_signals_the_workflow(
    http, committed, cipher, temporal: StubTemporal
):
    token, workflow_id, attempt_id, address = email_attempt(committed, cipher)
    answer = await post(
        http, [event(token, address, "processed"), event(token, address, "delivered")]
    )
    assert answer.status_code == 204
    assert attempt_state(committed, attempt_id) == "delivered"
    assert [(o.raw_status, o.verdict) for o in stored(committed, token)] == [
        ("processed", "stale"),
        ("delivered", "applied"),
    ]
    assert [(w, name, s.state) for w, name, s in temporal.signals] == [
        (workflow_id, "receipt", "delivered")
    ]


async def test_a_batch_delivered_twice_stores_each_event_once(http, committed, cipher):
    token, _, attempt_id, address = email_attempt(committed, cipher)
    batch = [event(token, address, "processed"), event(token, address, "bounce", type="bounce")]
    body, headers = signed(batch)
    for _ in range(2):
        assert (await http.post(EVENTS_PATH, content=body, headers=headers)).status_code == 204
    assert len(stored(committed, token)) == 2
    assert attempt_state(committed, attempt_id) == "undelivered"
    assert len(suppressions(committed, address, cipher)) == 1


@pytest.mark.parametrize("tamper", ["body", "timestamp", "key", "unsigned"])
async def test_a_tampered_or_unsigned_batch_is_403_and_stores_nothing(
    http, committed, cipher, tamper
):
    token, _, attempt_id, address = email_attempt(committed, cipher)
    body, headers = signed([event(token, address, "bounce", type="bounce")])
    if tamper == "body":
        body = body.replace(b"bounce", b"delivered")
    elif tamper == "timestamp":
        headers[TIMESTAMP_HEADER] = str(int(headers[TIMESTAMP_HEADER]) + 1)
    elif tamper == "key":
        other, _ = generate_event_key_pair()
        headers[SIGNATURE_HEADER] = sign_event_batch(
            other, timestamp=headers[TIMESTAMP_HEADER], body=body
        )
    else:
        del headers[SIGNATURE_HEADER]
    answer = await http.post(EVENTS_PATH, content=body, headers=headers)
    assert answer.status_code == 403
    assert stored(committed, token) == []
    assert attempt_state(committed, attempt_id) == "submitted"
    assert suppressions(committed, address, cipher) == []


async def test_a_retry_a_day_after_the_event_is_accepted_and_a_week_old_one_is_not(
    http, committed, cipher
):
    token, _, attempt_id, address = email_attempt(committed, cipher)
    day_old = str(int(time.time()) - 24 * 3600 - 60)
    answer = await post(http, [event(token, address, "delivered")], timestamp=day_old)
    assert answer.status_code == 204
    assert attempt_state(committed, attempt_id) == "delivered"
    week_old = str(int(time.time()) - 7 * 86400)
    late = await post(http, [event(token, address, "open")], timestamp=week_old)
    assert late.status_code == 403
    assert len(stored(committed, token)) == 1


async def test_a_bounce_after_delivered_is_evidence_without_review_and_still_suppresses(
    http, committed, cipher
):
    token, _, attempt_id, address = email_attempt(committed, cipher)
    await post(http, [event(token, address, "delivered")])
    await post(http, [event(token, address, "bounce", type="bounce", reason=f"550 {address} gone")])
    assert attempt_state(committed, attempt_id) == "delivered"
    bounce = stored(committed, token)[-1]
    assert (bounce.raw_status, bounce.verdict, bounce.applied, bounce.conflict) == (
        "bounce",
        "stale",
        False,
        False,
    )
    assert address not in json.dumps(bounce.detail)
    (row,) = suppressions(committed, address, cipher)
    assert (row.channel, row.reason, row.source, row.category) == (
        "email",
        "hard_bounce",
        "bounce",
        None,
    )
    assert row.evidence is not None and row.evidence["attempt_token"] == token
    assert address not in json.dumps(row.evidence)


async def test_a_spam_report_suppresses_the_intents_category_only(http, committed, cipher):
    token, _, attempt_id, address = email_attempt(committed, cipher, category="operational")
    await post(http, [event(token, address, "delivered"), event(token, address, "spamreport")])
    assert attempt_state(committed, attempt_id) == "delivered"
    (row,) = suppressions(committed, address, cipher)
    assert (row.reason, row.source, row.category) == ("complaint", "spamreport", "operational")


@pytest.mark.parametrize(
    ("echoed", "held_for"),
    [("promotional", "promotional"), ("newsletter", None), ({"x": 1}, None), (None, None)],
)
async def test_a_complaint_about_a_message_herald_cannot_place_holds_for_the_channel(
    http, committed, cipher, echoed, held_for
):
    # No attempt matches: only an echoed category of Herald's own places it. Anything else
    # holds for every email category, as SendGrid's own spam-report list holds for the
    # whole account; a category nobody sends in would have suppressed nothing.
    address = f"p-{secrets.token_hex(4)}@example.org"
    report = event("no-such-token", address, "spamreport", sg_message_id="unknown.filter-1")
    report.pop(TOKEN_ARG)
    if echoed is not None:
        report["category"] = echoed
    assert (await post(http, [report])).status_code == 204
    (row,) = suppressions(committed, address, cipher)
    assert (row.reason, row.category) == ("complaint", held_for)


async def test_the_recipients_console_page_shows_the_complaint_for_its_category(
    http, committed, cipher
):
    token, _, _, address = email_attempt(committed, cipher, category="operational")
    await post(http, [event(token, address, "spamreport")])
    with committed() as session:
        ref = repo.get_intent(
            session, repo.attempt_by_token(session, token).intent_id
        ).recipient_ref
    csrf = await sign_in(http, *principal(committed, Role.OPERATOR))
    page = await http.post("/console/recipient", data={"recipient_ref": ref, "csrf": csrf})
    assert page.status_code == 200
    assert "email (operational only)" in page.text and "complaint" in page.text
    assert address not in page.text


async def test_group_resubscribe_lifts_the_unsubscribe(http, committed, cipher):
    token, _, _, address = email_attempt(committed, cipher, category="promotional")
    await post(http, [event(token, address, "group_unsubscribe")])
    (row,) = suppressions(committed, address, cipher)
    assert (row.reason, row.category, row.lifted_at) == ("unsubscribed", "promotional", None)
    await post(http, [event(token, address, "group_resubscribe")])
    (row,) = suppressions(committed, address, cipher)
    assert row.lifted_source == "group_resubscribe"


async def test_opens_clicks_deferrals_and_blocks_move_no_state(http, committed, cipher):
    token, _, attempt_id, address = email_attempt(committed, cipher)
    words = [
        event(token, address, "deferred"),
        event(token, address, "open"),
        event(token, address, "click", url="https://x.test"),
        event(token, address, "bounce", type="blocked"),
    ]
    assert (await post(http, words)).status_code == 204
    assert attempt_state(committed, attempt_id) == "submitted"
    assert [o.raw_status for o in stored(committed, token)] == [
        "deferred",
        "open",
        "click",
        "blocked",
    ]
    assert suppressions(committed, address, cipher) == []


async def test_enough_blocks_in_the_window_suppress_the_address(http, committed, cipher):
    token, _, _, address = email_attempt(committed, cipher)
    await post(http, [event(token, address, "bounce", type="blocked") for _ in range(3)])
    (row,) = suppressions(committed, address, cipher)
    assert (row.reason, row.source) == ("repeated_blocks", "blocked")


async def test_a_dropped_event_ends_undelivered_with_the_reason(http, committed, cipher):
    token, _, attempt_id, address = email_attempt(committed, cipher)
    await post(http, [event(token, address, "dropped", reason="Bounced Address")])
    assert attempt_state(committed, attempt_id) == "undelivered"
    assert stored(committed, token)[0].detail["reason"] == "Bounced Address"


async def test_an_event_naming_an_sms_attempt_moves_nothing_and_suppresses_nothing(
    http, committed, cipher, temporal
):
    # Tokens follow from business keys: anyone sending through the same SendGrid account
    # can name an SMS attempt's in custom_args.
    phone = random_mobile()
    sms = submitted_attempt(committed, cipher, phone=phone)
    bounce = event(sms.token, "x@example.com", "bounce")
    answer = await post(http, [bounce])
    assert answer.status_code == 204
    assert attempt_state(committed, sms.attempt_id) == "submitted"
    with committed() as session:
        kept = session.execute(
            select(Observation).where(Observation.dedupe_key == f"sendgrid:{bounce['sg_event_id']}")
        ).scalar_one()
        on_the_phone = Suppression.destination_hmac == cipher.lookup_hmac(phone)
        held = session.execute(select(Suppression).where(on_the_phone)).scalars().all()
    assert (kept.attempt_id, kept.applied) == (None, False)
    assert kept.detail["not_applied"] == "names a sms attempt; SendGrid events speak only for email"
    assert held == [] and temporal.signals == []


@pytest.mark.parametrize("media_type", ["text/plain", "application/x-www-form-urlencoded"])
async def test_a_signed_batch_not_sent_as_json_is_400_and_changes_nothing(
    http, committed, cipher, media_type
):
    token, _, attempt_id, address = email_attempt(committed, cipher)
    body, headers = signed([event(token, address, "delivered")])
    answer = await http.post(
        EVENTS_PATH, content=body, headers={**headers, "Content-Type": media_type}
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["detail"] == "Content-Type must be application/json"
    assert attempt_state(committed, attempt_id) == "submitted" and stored(committed, token) == []


async def test_a_body_that_is_not_an_array_of_objects_is_400_after_the_signature(
    http, committed, cipher
):
    answer = await post(http, {"event": "delivered"})  # type: ignore[arg-type]
    assert answer.status_code == 400


async def test_bounce_and_complaint_rates_per_sender_domain_reach_the_metrics(
    http, committed, cipher
):
    domain = f"news-{secrets.token_hex(3)}.herald.example"
    sender = f"Herald News <news@{domain}>"
    for word in ("delivered", "delivered", "delivered", "bounce", "spam"):
        token, _, _, address = email_attempt(committed, cipher, sender=sender)
        events = [event(token, address, "delivered")]
        if word == "bounce":
            events = [event(token, address, "bounce", type="bounce")]
        elif word == "spam":
            events.append(event(token, address, "spamreport"))
        assert (await post(http, events)).status_code == 204
    found = samples((await http.get("/metrics")).text)
    assert value(found, "herald_email_messages", sender_domain=domain, kind="accepted") == 5
    assert value(found, "herald_email_messages", sender_domain=domain, kind="bounced") == 1
    assert value(found, "herald_email_bounce_rate", sender_domain=domain) == pytest.approx(0.2)
    assert value(found, "herald_email_complaint_rate", sender_domain=domain) == pytest.approx(0.25)
    labels = {v for _, pairs in found for _, v in pairs}
    assert not any("@" in v for v in labels)
    # The console's overview shows the same day's numbers for the domain.
    await sign_in(http, *principal(committed, Role.VIEWER))
    overview = (await http.get("/console")).text
    row = re.search(rf"<tr><td>{re.escape(domain)}</td>(.*?)</tr>", overview)
    assert row is not None
    assert "20.00 %" in row.group(1) and "25.00 %" in row.group(1)
