"""An intent's timeline is one snapshot of the ledger (ledger/timeline.py): a receipt that
lands while it is read shows in none of its parts, never in some."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from domain.states import AttemptState
from ledger import repository as repo
from ledger import timeline as ledger_timeline
from tests.ledger.test_settlements import _observe, _unknown_attempt

pytestmark = pytest.mark.ledger


def test_a_receipt_landing_while_the_timeline_is_read_is_in_none_of_its_parts(
    committed, cipher, monkeypatch
):  # type: ignore[no-untyped-def]
    with committed.begin() as session:
        intent_id, attempt = _unknown_attempt(session, cipher)
    reads_attempts = repo.attempts_of

    def attempts_then_a_receipt(session, intent):  # type: ignore[no-untyped-def]
        found = reads_attempts(session, intent)
        # The provider's receipt commits between the timeline's first reads and the rest.
        with committed.begin() as other:
            _observe(other, attempt.token, AttemptState.DELIVERED, at=datetime.now(UTC))
        return found

    monkeypatch.setattr(repo, "attempts_of", attempts_then_a_receipt)
    with committed() as session:
        doc = ledger_timeline.timeline(session, intent_id)
    states = {a["state"] for a in doc["attempts"]}
    observed = [o["normalized_status"] for o in doc["observations"]]
    assert states == {"unknown"} and "delivered" not in observed, (states, observed)
    monkeypatch.undo()
    with committed() as session:
        after = ledger_timeline.timeline(session, intent_id)
    assert {a["state"] for a in after["attempts"]} == {"delivered"}
    assert "delivered" in [o["normalized_status"] for o in after["observations"]]
