"""Reconciliation, the retention purge and the archive run as Temporal Schedules: the worker creates
them at start-up (idempotently, keeping a pause), `herald schedules` lists and triggers
them, and a triggered run executes the maintenance activity against the ledger."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from activities.contracts import ARCHIVE, PURGE, RECONCILE, MaintenanceInput, MaintenanceResult
from activities.maintenance import MaintenanceActivities
from cli.main import main as cli_main
from ledger import repository as repo
from ledger import review_items
from ledger.models import ArchivedIntent, Intent, ReviewItem
from runtime.schedules import INTERVALS, ensure_schedules, job_schedules
from tests.conftest import unique
from tests.ledger.conftest import fields
from workflows.maintenance import MaintenanceWorkflow

ROOT = Path(__file__).resolve().parents[2]


def _recorded(committed, cipher, **columns):  # type: ignore[no-untyped-def]
    """An intent recorded an hour ago (so past every grace), with `columns` set on its row."""
    key = unique("class-opening:c-9081")
    with committed.begin() as session:
        intent_id = repo.record_intent(session, fields(session, cipher, key)).intent_id
        hour_ago = datetime.now(UTC) - timedelta(hours=1)
        values = {Intent.created_at: hour_ago, **columns}
        session.query(Intent).filter(Intent.id == intent_id).update(values)
        workflow_id = session.get(Intent, intent_id).workflow_id
    return intent_id, workflow_id


def _filed(committed, intent_id: str) -> list[str]:  # type: ignore[no-untyped-def]
    with committed() as session:
        return sorted(
            session.execute(
                select(ReviewItem.kind).where(ReviewItem.subject == f"intent:{intent_id}")
            ).scalars()
        )


@pytest.mark.workflow
async def test_the_maintenance_workflow_files_what_reconcile_finds_purges_and_archives(
    committed, cipher
):
    # Its own time-skipping server: terminating a workflow through the shared one left its
    # time-skipping lock unbalanced, and every later workflow test in the session hung.
    from temporalio.testing import WorkflowEnvironment

    from devstack.binaries import find_binary

    async with await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(find_binary("temporal-test-server"))
    ) as time_env:
        await _files_what_reconcile_finds(time_env, committed, cipher)


async def _files_what_reconcile_finds(time_env, committed, cipher):  # type: ignore[no-untyped-def]
    # Never authorized, and its workflow was terminated (which the workflow cannot see).
    stuck, stuck_workflow = _recorded(committed, cipher)
    # Its retention passed: its contact data must go.
    due, _ = _recorded(committed, cipher, purge_after=datetime.now(UTC) - timedelta(minutes=1))
    # Denied two years ago: closed, past the default evidence retention (a year).
    two_years_ago = datetime.now(UTC) - timedelta(days=730)
    old, _ = _recorded(committed, cipher)
    with committed.begin() as session:
        session.query(Intent).filter(Intent.id == old).update({Intent.created_at: two_years_ago})
        repo.record_decision(
            session,
            intent_id=old,
            channel="sms",
            policy_version=repo.active_policy(session).version,
            outcome="deny",
            rule="consent.missing",
            reason="test",
            inputs={},
            next_eligible_at=None,
            decided_at=two_years_ago,
        )
    queue = f"maint-{uuid.uuid4().hex[:8]}"
    terminated = await time_env.client.start_workflow(
        "NeverRuns", id=stuck_workflow, task_queue=f"{queue}-nobody"
    )
    await terminated.terminate(reason="test: a workflow that ends without the ledger hearing")
    acts = MaintenanceActivities(committed)

    async def run(job: str, attempt: int = 1) -> MaintenanceResult:
        return await time_env.client.execute_workflow(
            MaintenanceWorkflow.run,
            MaintenanceInput(job),
            id=f"{queue}-{job}-{attempt}",
            task_queue=queue,
            result_type=MaintenanceResult,
        )

    async with Worker(
        time_env.client,
        task_queue=queue,
        workflows=[MaintenanceWorkflow],
        activities=[acts.reconcile, acts.purge, acts.archive],
    ):
        found = await run(RECONCILE)
        assert found.job == RECONCILE
        both = [review_items.INTENT_WITHOUT_ATTEMPT, review_items.WORKFLOW_CLOSED_INTENT_OPEN]
        assert _filed(committed, stuck) == sorted(both)
        assert all(found.rows_by_kind[kind] >= 1 for kind in both)
        assert found.review_items_recorded >= 2  # at least the two filed for `stuck`
        # Each (kind, subject) is filed once, however often the schedule runs.
        again = await run(RECONCILE, attempt=2)
        assert again.rows_by_kind[review_items.INTENT_WITHOUT_ATTEMPT] >= 1
        assert _filed(committed, stuck) == sorted(both)

        purged = await run(PURGE)
        assert purged.job == PURGE and purged.intents_purged >= 1 and purged.batches >= 1

        archived = await run(ARCHIVE)
        assert archived.job == ARCHIVE and archived.intents_archived >= 1
    with committed() as session:
        assert session.get(Intent, old) is None
        assert session.scalar(select(ArchivedIntent.id).where(ArchivedIntent.intent_id == old))
    with committed() as session:
        gone, kept = session.get(Intent, due), session.get(Intent, stuck)
        assert gone.sms_destination_ct is None and gone.variables_ct is None
        assert kept.sms_destination_ct is not None  # not due: untouched


def test_triggering_an_unknown_job_is_a_clear_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["schedules", "trigger", "vacuum"])
    assert exit_.value.code == 2
    assert "invalid choice: 'vacuum'" in capsys.readouterr().err


async def describe_when_created(temporal, schedule_id: str):  # type: ignore[no-untyped-def]
    handle = temporal.get_schedule_handle(schedule_id)
    for _ in range(150):
        try:
            return await handle.describe()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
        await asyncio.sleep(0.2)
    raise AssertionError(f"the worker never created schedule {schedule_id}")


def herald(stack, *argv: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(
        [sys.executable, "-m", "cli", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **stack.env()},
        timeout=120,
    )


@pytest.mark.e2e
async def test_the_worker_creates_the_schedules_and_the_cli_triggers_them(stack):
    temporal = stack.client.temporal
    queue = stack.cfg.task_queue
    jobs = job_schedules(queue)
    assert {j.schedule_id for j in jobs} == {
        f"{queue}-reconcile",
        f"{queue}-purge",
        f"{queue}-archive",
    }
    for job in jobs:
        desc = await describe_when_created(temporal, job.schedule_id)
        assert [i.every for i in desc.schedule.spec.intervals] == [INTERVALS[job.job]]
        assert desc.schedule.action.task_queue == queue

    # Idempotent, and an operator's pause survives a worker restart's ensure.
    reconcile = temporal.get_schedule_handle(f"{queue}-reconcile")
    await reconcile.pause(note="test")
    try:
        assert await ensure_schedules(temporal, queue) == [j.schedule_id for j in jobs]
        assert (await reconcile.describe()).schedule.state.paused
    finally:
        await reconcile.unpause()

    listed = await asyncio.to_thread(herald, stack, "schedules", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["job"]: r for r in json.loads(listed.stdout)}
    assert rows[RECONCILE]["exists"] and rows[PURGE]["exists"] and rows[ARCHIVE]["exists"]
    assert rows[RECONCILE]["every_seconds"] == 300 and rows[PURGE]["every_seconds"] == 3600
    assert rows[ARCHIVE]["every_seconds"] == 86400

    for job in (RECONCILE, PURGE, ARCHIVE):
        done = await asyncio.to_thread(
            herald, stack, "schedules", "trigger", job, "--wait", "--json"
        )
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert out["result"]["job"] == job
        assert out["workflow_id"].startswith(f"{queue}-{job}")
        # The run really executed the activity (seen in its history, by type).
        history = await temporal.get_workflow_handle(out["workflow_id"]).fetch_history()
        scheduled = [
            e.activity_task_scheduled_event_attributes.activity_type.name
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
        ]
        completed = [
            e for e in history.events if e.HasField("activity_task_completed_event_attributes")
        ]
        assert scheduled == [f"maintenance_{job}"] and len(completed) == 1
