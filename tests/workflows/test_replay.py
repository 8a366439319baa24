"""Histories recorded from the real workflow (tests/workflows/histories/*.json) must replay
against the current code: a change to the commands of a recorded history fails here, in
CI, before it reaches intents that are open in production. What to do then is in the
failure's message and in docs/operations.md ("Changing the workflow while intents are
open"): a new build, or a patch with a new history beside the old ones; never a
re-recording."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.worker import (
    Interceptor,
    Replayer,
    StartActivityInput,
    StartLocalActivityInput,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)
from temporalio.workflow import ActivityHandle

from runtime.sandbox import sandbox_runner
from tests.workflows import conftest
from tests.workflows.altered_workflow import AuthorizeAsAnActivity
from workflows.notification import NotificationWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))

WHAT_TO_DO = (
    "this change alters the commands of a recorded history, so runs that are open in "
    "production would fail the same way on the new worker. Ship it as a new build under "
    'Worker Versioning (docs/operations.md, "Deploying a new build"), or guard it with '
    "`workflow.patched` and record a new history beside the old ones "
    "(HERALD_RECORD_HISTORIES=1, under a new name). Never re-record an existing history "
    "to make this pass."
)
"""What a failed replay tells whoever made the change (docs/operations.md, "Changing the
workflow while intents are open")."""


async def replay_failure(path: Path, workflow_class: type = NotificationWorkflow) -> str | None:
    """Replay one recorded history; None when it replays, else what failed and what to do."""
    replayer = Replayer(workflows=[workflow_class], workflow_runner=sandbox_runner())
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    if result.replay_failure is None:
        return None
    return f"{path.name} no longer replays ({result.replay_failure}); {WHAT_TO_DO}"


def test_histories_were_recorded():
    assert len(HISTORIES) >= 30


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_a_recorded_history_replays_deterministically(path: Path):
    failure = await replay_failure(path)
    assert failure is None, failure


async def test_a_changed_command_fails_the_replay_saying_what_to_do():
    # A variant registered under the workflow's name whose commands differ (altered_workflow).
    path = Path(__file__).parent / "histories" / "delivered_by_receipt.json"
    assert await replay_failure(path) is None
    failure = await replay_failure(path, AuthorizeAsAnActivity)
    assert failure is not None
    assert failure.startswith("delivered_by_receipt.json no longer replays (")
    assert "Nondeterminism" in failure or "nondeterminism" in failure, failure
    assert 'new build under Worker Versioning (docs/operations.md, "Deploying a new build")' in (
        failure
    )
    assert "`workflow.patched` and record a new history beside the old ones" in failure
    assert "Never re-record an existing history" in failure


async def test_recording_never_overwrites_a_recorded_history(monkeypatch, tmp_path):
    class Handle:
        async def fetch_history(self) -> WorkflowHistory:
            return WorkflowHistory.from_json("new", HISTORIES[0].read_text())

    monkeypatch.setenv("HERALD_RECORD_HISTORIES", "1")
    monkeypatch.setattr(conftest, "HISTORIES", tmp_path)
    (tmp_path / "kept.json").write_text("the 1.0 history")
    await conftest.keep_history(Handle(), "kept")  # type: ignore[arg-type]
    await conftest.keep_history(Handle(), "new_case")  # type: ignore[arg-type]
    assert (tmp_path / "kept.json").read_text() == "the 1.0 history"
    assert WorkflowHistory.from_json("new", (tmp_path / "new_case.json").read_text()).events


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_a_recorded_history_holds_no_pii(path: Path):
    text = path.read_text()
    for forbidden in ("+44", "+33", "+1555", "@example", "Herald demo"):
        assert forbidden not in text


class _Scheduled(Interceptor):
    """What a replay asks of activities, in order: each activity's type, task queue (the
    workflow's own named `<own>`: a replay runs on a queue of its own), summary and input,
    and each local activity's summary."""

    def __init__(self) -> None:
        self.seen: list[tuple[object, ...]] = []

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        seen = self.seen
        to_payloads = DataConverter.default.payload_converter.to_payloads

        class Outbound(WorkflowOutboundInterceptor):
            def start_activity(self, input: StartActivityInput) -> ActivityHandle[Any]:
                own = workflow.info().task_queue
                queue = (input.task_queue or own).replace(own, "<own>", 1)
                data = [p.data for p in to_payloads(input.args)]
                seen.append(("activity", input.activity, queue, input.summary, data))
                return super().start_activity(input)

            def start_local_activity(self, input: StartLocalActivityInput) -> ActivityHandle[Any]:
                seen.append(("local", input.summary))
                return super().start_local_activity(input)

        class Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(Outbound(outbound))

        return Inbound


def _recorded(history: WorkflowHistory) -> list[tuple[object, ...]]:
    """What the history recorded of the same: the replay checks the commands' kinds and
    activity types, not their queues, summaries or inputs."""
    summary_of = DataConverter.default.payload_converter.from_payload
    own = history.events[0].workflow_execution_started_event_attributes.task_queue.name
    recorded: list[tuple[object, ...]] = []
    for event in history.events:
        meta = event.user_metadata
        summary = summary_of(meta.summary, str) if meta.HasField("summary") else None
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled = event.activity_task_scheduled_event_attributes
            data = [p.data for p in scheduled.input.payloads]
            recorded.append(
                (
                    "activity",
                    scheduled.activity_type.name,
                    scheduled.task_queue.name.replace(own, "<own>", 1),
                    summary,
                    data,
                )
            )
        elif event.HasField("marker_recorded_event_attributes"):
            recorded.append(("local", summary))
    return recorded


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_a_recorded_history_replays_with_the_same_queues_summaries_and_inputs(path: Path):
    # A provider's own queue, a label's "via X", a refusal's wording in the next
    # authorization's summary, the failover flag of a submit: what the Web UI showed and
    # the activities were given, which the replay itself lets change.
    scheduled = _Scheduled()
    replayer = Replayer(
        workflows=[NotificationWorkflow],
        interceptors=[scheduled],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    await replayer.replay_workflow(history)
    recorded = _recorded(history)
    # Local activities in any order: their markers are recorded as they end (mode "all"
    # authorizes its channels side by side).
    assert [s for s in scheduled.seen if s[0] == "activity"] == [
        r for r in recorded if r[0] == "activity"
    ]
    assert sorted(map(repr, (s for s in scheduled.seen if s[0] == "local"))) == sorted(
        map(repr, (r for r in recorded if r[0] == "local"))
    )
