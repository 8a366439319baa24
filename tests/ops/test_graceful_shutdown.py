"""SIGTERM to a worker process: it stops polling, lets an in-flight activity finish within
the grace period, and hands back (to another worker, through the server's retry) one
that would not finish in time. Run against the stack's Temporal on a task queue of its
own, with a worker process of its own, so the stack's worker is never touched."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import PendingActivityState

from tests.ops.grace_worker import GraceWorkflow, build

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


async def started_activity(handle) -> None:  # type: ignore[no-untyped-def]
    for _ in range(200):
        desc = await handle.describe()
        pending = desc.raw_description.pending_activities
        if pending and pending[0].state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the activity never started")


async def run_case(stack, *, activity_seconds: float, grace: float):  # type: ignore[no-untyped-def]
    temporal = stack.client.temporal
    queue = f"grace-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.ops.grace_worker",
            stack.cfg.temporal_target,
            queue,
            str(grace),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert (await asyncio.to_thread(proc.stdout.readline)).strip() == "ready"
        handle = await temporal.start_workflow(
            GraceWorkflow.run, activity_seconds, id=queue, task_queue=queue
        )
        await started_activity(handle)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 60)
        took = time.monotonic() - sent
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, err[-3000:]
    assert "stopped" in out
    # Another worker on the same queue finishes the workflow.
    async with build(temporal, queue, grace=1):
        attempt = await asyncio.wait_for(handle.result(), 30)
    return attempt, took


async def test_sigterm_lets_an_in_flight_activity_finish_within_the_grace(stack):
    attempt, took = await run_case(stack, activity_seconds=3, grace=20)
    assert attempt == 1  # completed by the worker that was told to stop
    assert took < 15


async def test_sigterm_hands_back_an_activity_that_outlives_the_grace(stack):
    attempt, took = await run_case(stack, activity_seconds=120, grace=1)
    assert attempt == 2  # retried elsewhere at once, not after its 5-minute timeout
    assert took < 15
