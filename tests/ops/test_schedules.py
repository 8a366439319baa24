"""Reconciliation and the retention purge run as Temporal Schedules: the worker creates
them at start-up (idempotently, keeping a pause), `herald schedules` lists and triggers
them, and a triggered run executes the maintenance activity against the ledger."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from activities.contracts import PURGE, RECONCILE, MaintenanceInput
from activities.maintenance import MaintenanceActivities
from cli.main import main as cli_main
from runtime.schedules import INTERVALS, ensure_schedules, job_schedules
from workflows.maintenance import MaintenanceWorkflow

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.workflow
async def test_the_maintenance_workflow_runs_reconcile_and_purge_on_the_ledger(time_env, committed):
    queue = f"maint-{uuid.uuid4().hex[:8]}"
    acts = MaintenanceActivities(committed)
    async with Worker(
        time_env.client,
        task_queue=queue,
        workflows=[MaintenanceWorkflow],
        activities=[acts.reconcile, acts.purge],
    ):
        for job in (RECONCILE, PURGE):
            result = await time_env.client.execute_workflow(
                MaintenanceWorkflow.run,
                MaintenanceInput(job),
                id=f"{queue}-{job}",
                task_queue=queue,
            )
            assert result.job == job
            if job == PURGE:
                assert result.batches >= 1
            else:
                assert result.review_items_recorded >= 0
                assert all(isinstance(v, int) for v in result.rows_by_kind.values())


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
    assert {j.schedule_id for j in jobs} == {f"{queue}-reconcile", f"{queue}-purge"}
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
    assert rows[RECONCILE]["exists"] and rows[PURGE]["exists"]
    assert rows[RECONCILE]["every_seconds"] == 300 and rows[PURGE]["every_seconds"] == 3600

    for job in (RECONCILE, PURGE):
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
