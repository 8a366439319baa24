"""The intents list pages back as well as forward with no gap, and its choices come from the
data (real Postgres)."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session, sessionmaker

from ledger import listing
from ledger.crypto import FieldCipher
from ledger.models import Intent
from ledger.read_models import intent_list
from tests.api.conftest import submitted_attempt
from tests.conftest import unique

pytestmark = pytest.mark.ledger


@pytest.mark.parametrize("state", [None, "sending"])
def test_paging_back_returns_the_pages_paging_forward_showed(
    committed: sessionmaker[Session], cipher: FieldCipher, state: str | None
) -> None:
    sent = [submitted_attempt(committed, cipher) for _ in range(5)]
    prefix = unique("order-created:back")
    with committed.begin() as session:
        for n, s in enumerate(sent):
            session.get(Intent, s.intent_id).business_key = f"{prefix}:{n}"  # type: ignore[union-attr]
    flt = listing.IntentFilter(key_prefix=prefix, state=state)

    def keys(page: listing.IntentList) -> list[str]:
        return [i.intent.business_key[len(prefix) + 1 :] for i in page.items]

    def at(value: str | None) -> listing.Cursor:
        assert value is not None
        return listing.read_cursor(value, flt)

    with committed() as session:
        first = listing.page(session, flt, size=2)
        assert keys(first) == ["4", "3"] and first.newer_cursor is None and first.next_cursor
        second = listing.page(session, flt, at(first.next_cursor), size=2)
        assert keys(second) == ["2", "1"] and second.newer_cursor and second.next_cursor
        third = listing.page(session, flt, at(second.next_cursor), size=2)
        assert keys(third) == ["0"] and third.next_cursor is None and third.newer_cursor
        back = listing.page(session, flt, at(third.newer_cursor), size=2)
        assert keys(back) == ["2", "1"] and back.newer_cursor and back.next_cursor
        front = listing.page(session, flt, at(back.newer_cursor), size=2)
        assert keys(front) == ["4", "3"] and front.newer_cursor is None
        again = listing.page(session, flt, at(back.next_cursor), size=2)
        assert keys(again) == ["0"]


def test_the_choices_are_the_values_on_record(
    committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    sent = submitted_attempt(committed, cipher)
    with committed.begin() as session:
        intent = session.get(Intent, sent.intent_id)
        assert intent is not None
        intent.event_type = unique("Event-Type")
        event_type, region, category = intent.event_type, intent.region, intent.category
    with committed() as session:
        choices = intent_list.filter_choices(session)
    assert event_type in choices["event_type"]
    assert region in choices["region"] and category in choices["category"]
    assert choices["event_type"] == sorted(choices["event_type"])
