"""The bench sizes its baseline from Herald's history: local activities count as
activities (the baseline runs that many ordinary ones, a stricter comparison)."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import WorkflowHistory

from bench.stack import event_counts

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"


def counts(name: str) -> dict[str, int]:
    path = HISTORIES / f"{name}.json"
    return dict(event_counts(WorkflowHistory.from_json(name, path.read_text()).events))


def test_a_delivered_sms_is_three_activities_two_of_them_local():
    c = counts("delivered_by_receipt")
    # load_intent and authorize are local; submit_sms is an ordinary activity.
    assert (c["local_activities"], c["activities"]) == (2, 1)
    assert c.get("markers", 0) == 0  # no other marker (a patch would add one)
