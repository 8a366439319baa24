"""`POST /v1/erasures`: an admin erases a recipient's contact data through the one ledger
function; the answer and the audit name the recipient by HMAC only; a legal hold is a 409
naming it; the recipient travels in the body only and is never echoed."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.models import Attempt, AuditEvent, Intent
from tests.api.conftest import BEARER, random_mobile
from tests.conftest import key_id
from tests.ledger.conftest import fields, make_attempt

pytestmark = pytest.mark.ledger


def _closed(committed: sessionmaker[Session], cipher: FieldCipher, phone: str, **cols) -> str:  # type: ignore[no-untyped-def]
    key = f"erasure-api:{key_id()}"
    with committed.begin() as session:
        recorded = repo.record_intent(session, fields(session, cipher, key, phone=phone))
        make_attempt(session, cipher, recorded.intent_id, key, destination=phone)
        session.execute(
            update(Attempt).where(Attempt.intent_id == recorded.intent_id).values(state="delivered")
        )
        if cols:
            session.execute(update(Intent).where(Intent.id == recorded.intent_id).values(**cols))
    return recorded.intent_id


async def test_an_admin_erases_a_recipient_named_in_the_body_only(
    http: httpx.AsyncClient, committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    phone = random_mobile()
    intent_id = _closed(committed, cipher, phone)
    dry = await http.post(
        "/v1/erasures",
        json={"kind": "phone", "value": phone, "reason": "request 7", "dry_run": True},
        headers=BEARER,
    )
    assert dry.status_code == 200 and dry.json()["rows_erased"] == {"intent": 1, "attempt": 1}
    with committed() as session:
        assert session.get(Intent, intent_id).sms_destination_ct is not None  # type: ignore[union-attr]

    done = await http.post(
        "/v1/erasures",
        json={"kind": "phone", "value": phone, "reason": "request 7"},
        headers=BEARER,
    )
    assert done.status_code == 201, done.text
    body = done.json()
    assert body["lookup"] == cipher.lookup_hmac(phone) and phone not in done.text
    with committed() as session:
        assert session.get(Intent, intent_id).sms_destination_ct is None  # type: ignore[union-attr]
        attempt = session.execute(
            select(Attempt).where(Attempt.intent_id == intent_id)
        ).scalar_one()
        assert attempt.destination_ct is None and attempt.body_ct is None
        event = session.get(AuditEvent, body["audit_event_id"])
    assert event is not None and event.action == "recipient.erased"
    assert event.actor == "break-glass" and event.subject == f"phone:{body['lookup']}"


async def test_a_hold_is_a_409_naming_it_and_the_recipient_is_named_once(
    http: httpx.AsyncClient, committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    phone = random_mobile()
    intent_id = _closed(committed, cipher, phone, legal_hold=True)
    with committed() as session:
        key = session.get(Intent, intent_id).business_key  # type: ignore[union-attr]
    held = await http.post(
        "/v1/erasures", json={"kind": "phone", "value": phone, "reason": "r"}, headers=BEARER
    )
    assert held.status_code == 409 and f"legal hold on {key}" in held.json()["detail"]
    with committed() as session:
        assert session.get(Intent, intent_id).sms_destination_ct is not None  # type: ignore[union-attr]

    bad = await http.post(
        "/v1/erasures", json={"kind": "phone", "value": "call-me", "reason": "r"}, headers=BEARER
    )
    assert bad.status_code == 422 and "recipient.valid" in bad.text and "call-me" not in bad.text
    named = await http.post(
        "/v1/erasures",
        json={"kind": "phone", "value": phone, "reason": f"asked by {phone}"},
        headers=BEARER,
    )
    assert named.status_code == 422 and "reason.no_contact_data" in named.text
    assert phone not in named.text
