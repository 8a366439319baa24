"""The console's "needs attention" reads and the actions an intent page offers, from the
ledger alone (api/console/attention.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from api.console import attention
from domain.states import AttemptState
from ledger import timeline as ledger_timeline
from tests.ledger.test_settlements import _settle, _unknown_attempt
from tests.ledger.test_settlements import _waiting as waiting_for_a_settlement

pytestmark = pytest.mark.ledger

NOW = datetime.now(UTC) + timedelta(hours=1)


def _waiting(db, cipher, *, channel="sms"):  # type: ignore[no-untyped-def]
    intent_id, attempt, _ = waiting_for_a_settlement(db, cipher, channel=channel, at=NOW)
    return intent_id, attempt


def test_an_unknown_waiting_for_a_settlement_is_on_the_panel(db, cipher):
    intent_id, _ = _waiting(db, cipher)
    seen = attention.needs_attention(db, NOW)
    assert seen.waiting.get("settlement", 0) >= 1 and seen.unknown_attempts >= 1
    assert seen.soonest and len(seen.soonest) <= attention.WAITING_SHOWN
    unknown_set = next(s for s in seen.sets if s.kind == "unknown_outcome")
    assert unknown_set.count >= 1 and unknown_set.exposure


def test_an_intent_waiting_for_a_settlement_offers_settle_and_cancel_not_resend(db, cipher):
    intent_id, attempt = _waiting(db, cipher)
    doc = ledger_timeline.timeline(db, intent_id)
    offered = attention.applicable_actions(db, doc)
    assert offered.settle_channels == ["sms"] and offered.lookup and offered.cancel
    assert offered.resend_channels == []
    assert {r["name"] for r in offered.rules} >= {"carrier-confirmed-not-delivered"}
    _settle(db, intent_id, attempt.token, "carrier-ticket-not-delivered", reference="T")
    after = attention.applicable_actions(db, ledger_timeline.timeline(db, intent_id))
    assert after.resend_channels == ["sms"]


def test_an_email_unknown_is_not_offered_rules_that_need_a_lookup(db, cipher):
    intent_id, _ = _waiting(db, cipher, channel="email")
    offered = attention.applicable_actions(db, ledger_timeline.timeline(db, intent_id))
    assert offered.rules and all(r["evidence"] != "provider_lookup" for r in offered.rules)
    assert not offered.lookup


def test_a_finished_intent_says_why_nothing_applies(db, cipher):
    intent_id, attempt = _unknown_attempt(db, cipher)
    from tests.ledger.test_settlements import _observe

    _observe(db, attempt.token, AttemptState.DELIVERED, at=NOW)
    offered = attention.applicable_actions(db, ledger_timeline.timeline(db, intent_id))
    assert not (offered.resend_channels or offered.settle_channels)
    assert "no longer waits for an operator" in offered.none_because
    assert offered.cancel  # recorded as recalling nothing, as the class-opening story does
