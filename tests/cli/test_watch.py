"""`herald send --wait` and `herald show --follow` end on what the ledger holds once
Temporal says the run waits or has finished (cli/intents.py `_watch`): the ledger read
before that may predate the receipt that ended the run."""

from __future__ import annotations

from typing import Any

import pytest

from cli import intents
from runtime.tables import Clock


class Ledger:
    """A client whose ledger answers `docs` in turn (the last one from then on)."""

    def __init__(self, *docs: dict[str, Any]) -> None:
        self.docs = list(docs)
        self.reads = 0

    def timeline(self, intent: str) -> dict[str, Any]:
        self.reads += 1
        return self.docs.pop(0) if len(self.docs) > 1 else self.docs[0]


def doc(state: str, **intent: Any) -> dict[str, Any]:
    return {"intent": {"state": state, "workflow_id": "notification:k", **intent}}


async def test_a_run_that_finished_after_the_read_ends_on_the_ledger_read_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def finished(client: Any, workflow_id: str) -> tuple[bool, str | None]:
        return False, None  # the delivered receipt came, and the run ended

    monkeypatch.setattr(intents, "_workflow_phase", finished)
    ledger = Ledger(doc("sent"), doc("delivered"))
    last, ended = await intents._watch(ledger, "k", 10, Clock.for_args(True), quiet=True)
    assert (last["intent"]["state"], ended) == ("delivered", "delivered")


async def test_a_run_that_waits_for_an_operator_ends_on_the_ledgers_record_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def waiting(client: Any, workflow_id: str) -> tuple[bool, str | None]:
        return True, intents.AWAITING_OPERATOR

    monkeypatch.setattr(intents, "_workflow_phase", waiting)
    ledger = Ledger(doc("undelivered"), doc("undelivered", awaiting="resend"))
    last, ended = await intents._watch(ledger, "k", 10, Clock.for_args(True), quiet=True)
    assert ended == intents.AWAITING_OPERATOR and last["intent"]["awaiting"] == "resend"
    assert ledger.reads == 2
