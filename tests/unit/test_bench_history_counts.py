"""The bench sizes its baseline from Herald's history: local activities count as
activities, patch markers do not (they are not work a baseline would do)."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import WorkflowHistory

from bench.stack import event_counts

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"


def counts(name: str) -> dict[str, int]:
    path = HISTORIES / f"{name}.json"
    return dict(event_counts(WorkflowHistory.from_json(name, path.read_text()).events))


def test_local_authorize_counts_as_an_activity_and_its_patch_marker_does_not():
    c = counts("delivered_by_receipt_local_authorize")
    # load_intent and authorize are local; submit_sms is an ordinary activity.
    assert c["local_activities"] == 2
    assert c["activities"] == 1
    assert c["markers"] == 1  # the authorize-local patch marker
    assert c["activities"] + c["local_activities"] == 3


def test_before_the_patch_the_same_intent_is_also_three_activities():
    c = counts("delivered_by_receipt")
    assert (c["local_activities"], c["activities"]) == (1, 2)
    assert c.get("markers", 0) == 0
