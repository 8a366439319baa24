"""What `load_intent` hands the workflow from the active policy's fallback rule."""

from __future__ import annotations

import uuid

import pytest

from activities.contracts import LoadIntentInput
from activities.ledger import NO_WINDOW_SECONDS, LedgerActivities, window_seconds
from tests.activities import intents

pytestmark = pytest.mark.ledger


def recorded(committed, cipher, category: str) -> str:  # type: ignore[no-untyped-def]
    key = f"load-intent:{uuid.uuid4().hex[:8]}"
    request = intents.demo_request(key, "+447400000123", category=category)
    return intents.record(committed, cipher, request)


async def test_a_policy_without_a_fallback_window_ends_the_plan_on_unknown(committed, cipher):  # type: ignore[no-untyped-def]
    # The packaged default policy: promotional has `email_after_seconds = false`.
    ledger = LedgerActivities(committed, cipher)
    facts = await ledger.load_intent(LoadIntentInput(recorded(committed, cipher, "promotional")))
    assert facts.fallback_when_unresolved is False
    assert facts.email_after_seconds == NO_WINDOW_SECONDS
    assert facts.email_on_permanent_failure is False


async def test_a_policy_with_a_window_passes_it_on_and_follows_unknown(committed, cipher):  # type: ignore[no-untyped-def]
    ledger = LedgerActivities(committed, cipher)
    facts = await ledger.load_intent(LoadIntentInput(recorded(committed, cipher, "transactional")))
    assert facts.fallback_when_unresolved is True
    assert facts.email_after_seconds == 600


def test_a_zero_window_is_a_window_not_never() -> None:
    assert window_seconds(0) == 0.0
    assert window_seconds(600) == 600.0
    assert window_seconds(None) == NO_WINDOW_SECONDS
