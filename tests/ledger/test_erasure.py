"""Erasing one recipient: every registered contact column of their rows is nulled and
nothing of anyone else's; the evidence stays as hashes; the erasure is recorded by HMAC
only; a legal hold or an open intent refuses it, changing nothing. And the registry
cannot miss an encrypted column of the models."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from domain.principals import Principal, Role
from domain.states import AttemptState
from ledger import contact_data, erasure, retention
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.errors import ErasureRefused
from ledger.models import Attempt, AuditEvent, Base, Intent, Suppression
from tests.conftest import key_id
from tests.ledger.conftest import fields, make_attempt

pytestmark = pytest.mark.ledger


def _mobile() -> str:
    """A number no other test uses: the shared ledger holds other tests' intents."""
    return f"+4474003{secrets.randbelow(100_000):05d}"


ADMIN = Principal("dpo-desk", Role.ADMIN)
ITINERARY = {
    "flight": "LH-432",
    "origin": "Paris",
    "destination": "Boston",
    "new_departure": "16:05",
    "old_departure": "14:10",
    "trip_url": "https://trips.example/t-1",
    "first_name": "Ada",
}


def _intent(
    db: Session,
    cipher: FieldCipher,
    *,
    phone: str,
    state: str,
    email: str | None = None,
    ref: str | None = None,
) -> str:
    """An sms+email intent with one attempt per channel, both in `state`."""
    key = f"erasure:{key_id()}"
    email = email or f"{key_id()}@example.org"
    recorded = repo.record_intent(
        db,
        fields(
            db,
            cipher,
            key,
            phone=phone,
            email=email,
            channels=("sms", "email"),
            mode="all",
            recipient_ref=ref or f"m-{key_id()}",
            template_key="itinerary-change",
            variables=ITINERARY,
        ),
    )
    # A subject on the SMS too, so that every registered column holds something.
    make_attempt(db, cipher, recorded.intent_id, key, destination=phone, subject="Hi")
    make_attempt(
        db, cipher, recorded.intent_id, key, channel="email", destination=email, subject="Hi"
    )
    db.execute(update(Attempt).where(Attempt.intent_id == recorded.intent_id).values(state=state))
    return recorded.intent_id


def _contact(db: Session, intent_id: str) -> dict[str, Any]:
    """Every registered column of the intent's rows, with its lookups beside them."""
    intent = db.get(Intent, intent_id)
    # In one order every time: the erasure's UPDATE moves rows, and an unordered read follows.
    attempts = (
        db.execute(select(Attempt).where(Attempt.intent_id == intent_id).order_by(Attempt.id))
        .scalars()
        .all()
    )
    out: dict[str, Any] = {}
    for table, column in contact_data.ERASED_COLUMNS:
        rows = [intent] if table == "intent" else attempts
        out[f"{table}.{column}"] = [getattr(r, column) for r in rows]
    out["hmacs"] = [intent.sms_destination_hmac, intent.email_destination_hmac] + [  # type: ignore[union-attr]
        a.destination_hmac for a in attempts
    ]
    return out


def test_erasure_nulls_every_registered_column_of_the_recipient_and_nothing_of_others(
    db: Session, cipher: FieldCipher
) -> None:
    phone, other = _mobile(), _mobile()
    delivered = AttemptState.DELIVERED.value
    mine = [_intent(db, cipher, phone=phone, state=delivered) for _ in range(2)]
    theirs = _intent(db, cipher, phone=other, state=delivered)
    db.add(
        Suppression(
            destination_hmac=cipher.lookup_hmac(phone),
            channel="sms",
            reason="opt_out",
            source="keyword:STOP",
            at=datetime.now(UTC),
        )
    )
    before = {i: _contact(db, i) for i in [*mine, theirs]}
    for intent_id in mine:
        empty = [k for k, vs in before[intent_id].items() if None in vs]
        assert empty == []

    # Written as a person would: the lookup is of the normal form.
    who = erasure.recipient("phone", f"{phone[:3]} {phone[3:7]} {phone[7:]}", cipher.lookup_hmac)
    report = erasure.erase(db, who, by=ADMIN, reason="GDPR art. 17 request", at=datetime.now(UTC))

    assert report.intents == 2
    assert report.rows_erased == {"intent": 2, "attempt": 4}
    assert report.evidence_kept == {"consent": 0, "suppression": 1, "inbound_keyword": 0}
    for intent_id in mine:
        after = _contact(db, intent_id)
        for table, column in contact_data.ERASED_COLUMNS:
            assert after[f"{table}.{column}"] == [None] * len(after[f"{table}.{column}"])
        # The evidence stays as hashes: the lookups, and the intent reads as purged.
        assert after["hmacs"] == before[intent_id]["hmacs"]
        assert db.get(Intent, intent_id).pii_purged_at is not None  # type: ignore[union-attr]
    assert _contact(db, theirs) == before[theirs]

    event = db.get(AuditEvent, report.audit_event_id)
    assert event is not None
    assert (event.actor, event.actor_role, event.action) == (
        "dpo-desk",
        "admin",
        "recipient.erased",
    )
    assert event.subject == f"phone:{cipher.lookup_hmac(phone)}"
    assert event.detail["rows_erased"] == {"intent": 2, "attempt": 4}  # type: ignore[index]
    assert phone.lstrip("+") not in str(event.detail)

    # Again: nothing left to erase, recorded again (a person asked twice).
    again = erasure.erase(db, who, by=ADMIN, reason="second request", at=datetime.now(UTC))
    assert again.rows_erased == {"intent": 0, "attempt": 0}


def test_a_dry_run_says_what_would_go_and_changes_nothing(db: Session, cipher: FieldCipher) -> None:
    phone = _mobile()
    intent_id = _intent(db, cipher, phone=phone, state=AttemptState.DELIVERED.value)
    before = _contact(db, intent_id)
    who = erasure.recipient("phone", phone, cipher.lookup_hmac)
    report = erasure.erase(db, who, by=ADMIN, reason="r", at=datetime.now(UTC), dry_run=True)
    assert report.rows_erased == {"intent": 1, "attempt": 2}
    assert report.audit_event_id is None
    assert _contact(db, intent_id) == before


def test_an_email_in_another_letter_case_and_a_recipient_ref_find_the_same_person(
    db: Session, cipher: FieldCipher
) -> None:
    email, ref8 = f"ada.{key_id()}@example.org", f"m-{key_id()}"
    done = AttemptState.DELIVERED.value
    by_email = _intent(db, cipher, phone=_mobile(), email=email, state=done)
    by_ref = _intent(db, cipher, phone=_mobile(), ref=ref8, state=done)
    who = erasure.recipient("email", email.upper(), cipher.lookup_hmac)
    erasure.erase(db, who, by=ADMIN, reason="request", at=datetime.now(UTC))
    assert db.get(Intent, by_email).email_destination_ct is None  # type: ignore[union-attr]
    assert db.get(Intent, by_email).email_search_hmac is None  # type: ignore[union-attr]
    assert db.get(Intent, by_ref).sms_destination_ct is not None  # type: ignore[union-attr]

    ref = erasure.recipient("recipient_ref", ref8, cipher.lookup_hmac)
    report = erasure.erase(db, ref, by=ADMIN, reason="request", at=datetime.now(UTC))
    assert report.rows_erased == {"intent": 1, "attempt": 2}
    assert ref8 not in ref.subject


def test_erasure_is_refused_under_legal_hold_naming_it_and_changes_nothing(
    db: Session, cipher: FieldCipher
) -> None:
    phone = _mobile()
    intent_id = _intent(db, cipher, phone=phone, state=AttemptState.DELIVERED.value)
    key = db.get(Intent, intent_id).business_key  # type: ignore[union-attr]
    retention.set_legal_hold(db, intent_id, True)
    before = _contact(db, intent_id)
    who = erasure.recipient("phone", phone, cipher.lookup_hmac)
    with pytest.raises(ErasureRefused, match=f"legal hold on {key}"):
        erasure.erase(db, who, by=ADMIN, reason="request", at=datetime.now(UTC))
    assert _contact(db, intent_id) == before
    assert db.scalar(select(AuditEvent).where(AuditEvent.subject == who.subject)) is None


def test_erasure_is_refused_while_an_intent_is_open(db: Session, cipher: FieldCipher) -> None:
    phone = _mobile()
    intent_id = _intent(db, cipher, phone=phone, state=AttemptState.SUBMITTED.value)
    key = db.get(Intent, intent_id).business_key  # type: ignore[union-attr]
    before = _contact(db, intent_id)
    who = erasure.recipient("phone", phone, cipher.lookup_hmac)
    with pytest.raises(ErasureRefused, match=f"still open: {key}; cancel"):
        erasure.erase(db, who, by=ADMIN, reason="request", at=datetime.now(UTC))
    assert _contact(db, intent_id) == before


def test_a_recorded_erasure_is_applied_again_from_its_subject(
    db: Session, cipher: FieldCipher
) -> None:
    """After a restore brought the data back: the record's `phone:<HMAC>` is enough."""
    phone = _mobile()
    intent_id = _intent(db, cipher, phone=phone, state=AttemptState.DELIVERED.value)
    who = erasure.recipient_by_lookup(f"phone:{cipher.lookup_hmac(phone)}")
    report = erasure.erase(db, who, by=ADMIN, reason="restore", at=datetime.now(UTC))
    assert report.rows_erased == {"intent": 1, "attempt": 2}
    assert db.get(Intent, intent_id).sms_destination_ct is None  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="phone:<HMAC>"):
        erasure.recipient_by_lookup("recipient_ref:abc")


def test_a_bad_recipient_or_no_reason_is_refused_without_naming_the_value(
    cipher: FieldCipher,
) -> None:
    with pytest.raises(ValueError) as bad:
        erasure.recipient("phone", "not-a-number-123", cipher.lookup_hmac)
    assert "not-a-number-123" not in str(bad.value)
    with pytest.raises(ValueError, match="unknown recipient kind"):
        erasure.recipient("fax", "x", cipher.lookup_hmac)


def test_every_encrypted_column_of_the_models_is_registered_for_erasure() -> None:
    """A new `*_ct` column (the ledger's convention for ciphertext) must be registered in
    ledger/contact_data.py, and its table must say how a recipient's rows are found."""
    in_models = {
        (table.name, column.name)
        for table in Base.metadata.sorted_tables
        for column in table.columns
        if column.name.endswith("_ct") and table.name != "ledger_secret"
    }
    registered = set(contact_data.CONTACT_COLUMNS)
    assert in_models - registered == set(), "register these in ledger/contact_data.py"
    assert registered - in_models == set(), "registered columns that no model has"
    for table, column in contact_data.ERASED_COLUMNS:
        assert column in Base.metadata.tables[table].columns
    assert set(contact_data.tables()) == set(erasure.ROW_FINDERS)
