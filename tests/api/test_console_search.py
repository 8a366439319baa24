"""The console's search finds what a caller gives (real Postgres): an intent id, a business
key, an attempt token, the provider's message id, a phone number in national form read in
the chosen country, an email address in any letter case; and the answer names what was
searched for with the contact data masked."""

from __future__ import annotations

import secrets

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from api.console.search import find
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.models import Attempt, Intent
from ledger.search_lookups import backfill_email_search
from tests.api.conftest import random_mobile, submitted_attempt
from tests.conftest import unique
from tests.ledger.conftest import fields
from tests.ledger.test_retention import ITINERARY

pytestmark = pytest.mark.ledger


def found_ids(session: Session, text: str, cipher: FieldCipher, country: str = "GB") -> set[str]:
    answer = find(session, text, country=country, lookup=cipher.lookup_hmac)
    return {item.intent.id for item in answer.listed.items}


def test_ids_keys_tokens_and_provider_message_ids_find_their_intent(
    committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    sent = submitted_attempt(committed, cipher)
    with committed() as session:
        key = session.get(Intent, sent.intent_id).business_key  # type: ignore[union-attr]
        for text in (sent.intent_id, key, sent.token, sent.remote_id, f"  {sent.remote_id} "):
            assert found_ids(session, text, cipher) == {sent.intent_id}, text
        assert found_ids(session, "SM" + secrets.token_hex(16), cipher) == set()


def test_an_email_message_id_is_found_with_or_without_its_brackets(
    committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    sent = submitted_attempt(committed, cipher)
    message_id = f"<{sent.token}.{secrets.token_hex(4)}@herald.example>"
    with committed.begin() as session:
        session.execute(
            update(Attempt).where(Attempt.id == sent.attempt_id).values(message_id=message_id)
        )
    with committed() as session:
        for text in (message_id, message_id[1:-1]):
            assert found_ids(session, text, cipher) == {sent.intent_id}, text
        answer = find(session, message_id, country="GB", lookup=cipher.lookup_hmac)
    assert "not valid" not in answer.searched, answer.searched


def test_a_phone_number_in_national_form_is_read_in_the_chosen_country(
    committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    phone = random_mobile()  # +4474002NNNNN
    sent = submitted_attempt(committed, cipher, phone=phone)
    national = f"0{phone[3:7]} {phone[7:]}"  # 07400 2NNNNN
    with committed() as session:
        assert found_ids(session, national, cipher, "GB") == {sent.intent_id}
        assert found_ids(session, phone, cipher, "US") == {sent.intent_id}
        assert sent.intent_id not in found_ids(session, national, cipher, "FR")
        answer = find(session, national, country="GB", lookup=cipher.lookup_hmac)
    assert phone not in answer.searched and phone[-2:] in answer.searched
    assert answer.searched.startswith("the phone number +44") and "in GB" in answer.searched


def test_an_email_address_is_found_in_any_letter_case_and_old_intents_after_a_backfill(
    committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    local = unique("Ann.Lee")
    key = unique("order-created:o")
    with committed.begin() as session:
        recorded = repo.record_intent(
            session,
            fields(
                session,
                cipher,
                key,
                email=f"{local}@Example.com",
                channels=("sms", "email"),
                mode="all",
                template_key="itinerary-change",
                variables=ITINERARY,
            ),
        )
    with committed() as session:
        for text in (
            f"{local}@example.com",
            f"{local.lower()}@EXAMPLE.COM",
            local.upper() + "@x.Example.com"[0:0] + "@example.com",
        ):
            assert found_ids(session, text, cipher) == {recorded.intent_id}, text
        answer = find(
            session, f"{local.lower()}@example.com", country="GB", lookup=cipher.lookup_hmac
        )
    assert local.lower() not in answer.searched and "***@example.com" in answer.searched
    # An intent recorded before the lookup existed is found once `herald migrate` filled it.
    with committed.begin() as session:
        session.execute(
            update(Intent).where(Intent.id == recorded.intent_id).values(email_search_hmac=None)
        )
    with committed() as session:
        assert found_ids(session, f"{local.lower()}@example.com", cipher) == set()
    with committed.begin() as session:
        while backfill_email_search(session, cipher, batch=500):
            pass
    with committed() as session:
        assert found_ids(session, f"{local.lower()}@example.com", cipher) == {recorded.intent_id}


def test_a_search_that_looks_like_contact_data_is_not_repeated(
    committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    with committed() as session:
        answer = find(session, "0740 not a number 12345", country="GB", lookup=cipher.lookup_hmac)
        assert "12345" not in answer.searched and not answer.listed.items
        plain = find(session, "no-such-key", country="GB", lookup=cipher.lookup_hmac)
        assert plain.searched.startswith("“no-such-key”")
