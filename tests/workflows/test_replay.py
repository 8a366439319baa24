"""Histories recorded from the real workflow (tests/workflows/histories/*.json) must replay
against the current code: a non-deterministic change fails here, in CI, before it reaches
intents that are open in production. Re-record with HERALD_RECORD_HISTORIES=1 only when a
change is deliberately versioned (docs/operations.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from runtime.sandbox import sandbox_runner
from workflows.notification import NotificationWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_histories_were_recorded():
    assert len(HISTORIES) >= 10


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_a_recorded_history_replays_deterministically(path: Path):
    replayer = Replayer(workflows=[NotificationWorkflow], workflow_runner=sandbox_runner())
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_a_recorded_history_holds_no_pii(path: Path):
    text = path.read_text()
    for forbidden in ("+44", "+33", "+1555", "@example", "Herald demo"):
        assert forbidden not in text
