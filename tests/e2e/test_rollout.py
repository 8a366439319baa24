"""A rollout an operator follows, and the rollback, with two worker processes whose
workflow code differs in its commands (tests/e2e/rollout_build.py: build B's runs upsert a
memo first, build A's never do), against one ledger, the simulator and the dev server
(docs/operations.md, "Deploying a new build").

Build A is current; intents start, two wait in a settlement window. Build B starts, is
ramped, then made current: new intents run on B, A's pinned runs finish on A (one
settled there), one waiting run moves to B when asked and is settled there; A is drained
and stopped. Then B is bad: A starts again and is made current; B's waiting run stays on
B and is settled there. Every run's workflow tasks were completed by one build, and only
build B's runs carry B's command."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.contracts import Projection
from devstack.processes import ChildProcess
from devstack.stack import DevStack
from domain.principals import Principal, Role
from domain.requests import NotificationRequest
from ledger.models import Consent
from runtime import deployments
from tests.cli.conftest import HERALD
from tests.conftest import fresh_database, long_story, stack_settings, until
from workflows.notification import NotificationWorkflow

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
A, B = "rollout-a", "rollout-b"
DELIVERS = "+447400000100"
NEVER_RESOLVES = "+447400000008"  # the simulator accepts it and never answers
HORIZON = 3
"""Seconds of delivery polling: an unresolved SMS waits for a settlement soon."""
VARIABLES = {
    "class_name": "Spin 18:00",
    "starts_at": "18:30",
    "hold_until": "18:15",
    "booking_url": "https://x.test/c",
}
OPERATOR = Principal("rollout-operator", Role.OPERATOR)
intent_ids: dict[str, str] = {}
"""workflow id -> intent id, of the intents `notify` recorded."""


@pytest.fixture
async def stack(tmp_path: Path, pg_url: str) -> AsyncIterator[DevStack]:
    """The dev stack without its worker (the test runs each build's worker itself), on a
    policy whose polling horizon is HORIZON s."""
    demo = (ROOT / "policies" / "demo.toml").read_text()
    policy = demo.replace('version = "demo-2026-12-07.1"', 'version = "rollout-2026-12-07.1"')
    policy = policy.replace(
        "sms_poll_horizon_seconds = 60", f"sms_poll_horizon_seconds = {HORIZON}"
    )
    assert "rollout-2026-12-07.1" in policy and f"= {HORIZON}\n" in policy
    (tmp_path / "rollout.toml").write_text(policy)
    cfg = stack_settings(
        tmp_path / "data",
        database_url=fresh_database(pg_url, "herald_rollout"),
        policy_name=str(tmp_path / "rollout.toml"),
    )
    dev = DevStack(cfg, worker_process=False, temporal_ui=False)
    await dev.start()
    try:
        yield dev
    finally:
        await dev.stop()


def start_build(stack: DevStack, build: str, name: str) -> ChildProcess:
    argv = [sys.executable, "-m", "tests.e2e.rollout_build"]
    if build == B:
        argv.append("--build-b")
    child = ChildProcess(
        name,
        argv,
        log_path=stack.cfg.data_path / f"{name}.log",
        env={**os.environ, **stack.env(), "HERALD_BUILD_ID": build},
        cwd=ROOT,
    )
    child.start()
    return child


def deploy(stack: DevStack, *args: str) -> subprocess.CompletedProcess[str]:
    """`herald deploy ARGS` as an operator runs it, told only the data folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env["HERALD_DATA_DIR"] = str(stack.cfg.data_path)
    return subprocess.run(
        [str(HERALD), "deploy", *args],
        cwd=stack.cfg.data_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def notify(stack: DevStack, phone: str) -> str:
    """A new intent to `phone`; its workflow id."""
    assert stack.client is not None
    suffix = uuid.uuid4().hex[:8]
    with stack.client.sessions.begin() as session:
        session.add(
            Consent(
                recipient_ref=f"m-{suffix}",
                channel="sms",
                purpose="service",
                source="test",
                granted_at=datetime.now(UTC),
            )
        )
    ref = await stack.client.notify(
        NotificationRequest(
            business_key=f"class-opening:c-9081:m-{suffix}",
            recipient_ref=f"m-{suffix}",
            template_key="class-opening",
            phone=phone,
            variables=VARIABLES,
        )
    )
    intent_ids[ref.workflow_id] = ref.intent_id
    return ref.workflow_id


async def build_of(client: Client, workflow_id: str) -> str:
    """The build the workflow's latest run is pinned to."""
    described = await client.get_workflow_handle(workflow_id).describe()
    info = described.raw_description.workflow_execution_info.versioning_info
    return info.deployment_version.build_id


async def projection(client: Client, workflow_id: str) -> Projection:
    handle = client.get_workflow_handle_for(NotificationWorkflow.run, workflow_id)
    return await handle.query(NotificationWorkflow.projection)


async def awaiting(client: Client, workflow_id: str) -> str:
    return (await projection(client, workflow_id)).awaiting


async def outcome(client: Client, workflow_id: str) -> str:
    handle = client.get_workflow_handle_for(NotificationWorkflow.run, workflow_id)
    return (await asyncio.wait_for(handle.result(), 60)).outcome


async def settle(stack: DevStack, workflow_id: str) -> None:
    assert stack.client is not None
    settled = await stack.client.settle(
        intent_ids[workflow_id],
        channel="sms",
        rule="destination-unreachable",
        reason="the number is disconnected",
        reference="ticket-77",
        by=OPERATOR,
    )
    assert settled.accepted, settled


async def runs_by_build(client: Client) -> dict[tuple[str, str], dict[str, Any]]:
    """Every NotificationWorkflow run: the builds whose workers completed its workflow
    tasks (from the history), and whether it carries build B's command."""
    runs: dict[tuple[str, str], dict[str, Any]] = {}
    async for execution in client.list_workflows("WorkflowType = 'NotificationWorkflow'"):
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        builds: set[str] = set()
        b_command = False
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                completed = event.workflow_task_completed_event_attributes
                builds.add(completed.deployment_version.build_id)
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
                b_command = True
        runs[(execution.id, execution.run_id)] = {"builds": builds, "b_command": b_command}
    return runs


@long_story
async def test_a_rollout_then_a_rollback_runs_each_intent_on_one_build(stack: DevStack) -> None:
    assert stack.client is not None
    client = stack.client.temporal
    deployment = stack.cfg.worker_deployment
    worker_a = start_build(stack, A, "worker-a")
    worker_b: ChildProcess | None = None
    try:
        # A first install: build A makes itself current once the server knows it.
        async def a_is_current() -> bool:
            # Asked once a second: the server rate-limits calls on one deployment.
            await asyncio.sleep(1)
            try:
                return (await deployments.describe(client, deployment)).current == A
            except deployments.DeploymentError:
                return False

        await until(a_is_current, within=60)
        delivered_on_a = await notify(stack, DELIVERS)
        stays_on_a = await notify(stack, NEVER_RESOLVES)
        moves_to_b = await notify(stack, NEVER_RESOLVES)
        assert await outcome(client, delivered_on_a) == "delivered"
        for waiting in (stays_on_a, moves_to_b):
            await until(_awaiting_settlement(client, waiting), within=60)

        # Build B starts: known to the deployment, new intents still go to A.
        worker_b = start_build(stack, B, "worker-b")

        async def b_is_known() -> bool:
            await asyncio.sleep(1)
            builds = (await deployments.describe(client, deployment)).builds
            return any(b.build_id == B for b in builds)

        await until(b_is_known, within=60)
        unknown = deploy(stack, "promote", "no-such-build")
        assert unknown.returncode == 2 and len(unknown.stderr.splitlines()) == 1
        assert "no build 'no-such-build'" in unknown.stderr and B in unknown.stderr
        ramped = deploy(stack, "promote", B, "--ramp", "50")
        assert ramped.returncode == 0, ramped.stderr
        assert f"build {B} is ramping: 50% of new intents" in ramped.stdout
        status = deploy(stack, "status")
        assert f"current {A}, ramping {B} at 50%" in status.stdout, status.stdout
        during_ramp = [await notify(stack, DELIVERS) for _ in range(4)]
        for workflow_id in during_ramp:
            assert await outcome(client, workflow_id) == "delivered"
        promoted = deploy(stack, "promote", B)
        assert promoted.returncode == 0, promoted.stderr
        assert f"build {B} is now current" in promoted.stdout

        # New intents run on B; A's pinned runs stay on A.
        delivered_on_b = await notify(stack, DELIVERS)
        assert await outcome(client, delivered_on_b) == "delivered"
        assert await build_of(client, delivered_on_b) == B
        assert await build_of(client, stays_on_a) == A
        not_drained = deploy(stack, "drained", A)
        assert not_drained.returncode == 1
        assert "2 open run(s) still pin it" in not_drained.stdout, not_drained.stdout

        # One waiting run is settled on A and finishes there.
        await settle(stack, stays_on_a)
        assert await outcome(client, stays_on_a) == "failed"
        # The other moves to B when asked, keeps its state, and is settled on B.
        before = await projection(client, moves_to_b)
        moved = deploy(stack, "move-waiting", A)
        assert moved.returncode == 0, moved.stderr
        assert "asked 1 run(s)" in moved.stdout, moved.stdout

        async def moved_to_b() -> bool:
            await asyncio.sleep(0.5)
            return await build_of(client, moves_to_b) == B

        await until(moved_to_b, within=60)
        await until(_awaiting_settlement(client, moves_to_b), within=30)
        after = await projection(client, moves_to_b)
        assert after.attempt_states == before.attempt_states and after.attempt_states
        assert after.awaiting_until == before.awaiting_until
        await settle(stack, moves_to_b)
        assert await outcome(client, moves_to_b) == "failed"

        # A is drained, and stopped.
        drained = await _eventually_drained(stack, A)
        assert f"build {A} is drained" in drained.stdout
        worker_a.stop(timeout=30)

        # Rollback: B is bad. B's waiting run stays on B; A starts again and is current.
        waits_on_b = await notify(stack, NEVER_RESOLVES)
        await until(_awaiting_settlement(client, waits_on_b), within=60)
        restarted_at = datetime.now(UTC)
        worker_a = start_build(stack, A, "worker-a-again")

        async def a_polls() -> bool:
            await asyncio.sleep(1)
            found = await deployments.describe(client, deployment, task_queue=stack.cfg.task_queue)
            polled = found.build(A).last_polled
            return polled is not None and polled > restarted_at

        await until(a_polls, within=60)
        back = deploy(stack, "promote", A)
        assert back.returncode == 0, back.stderr
        delivered_after_rollback = await notify(stack, DELIVERS)
        assert await outcome(client, delivered_after_rollback) == "delivered"
        assert await build_of(client, delivered_after_rollback) == A
        await settle(stack, waits_on_b)
        assert await outcome(client, waits_on_b) == "failed"
        assert await build_of(client, waits_on_b) == B
        await _eventually_drained(stack, B)

        # No run ever saw the other build's code.
        runs = await runs_by_build(client)
        for key, run in runs.items():
            assert len(run["builds"]) == 1, (key, run)
            assert run["b_command"] == (run["builds"] == {B}), (key, run)
        by_id: dict[str, list[str]] = {}
        for (workflow_id, _), run in runs.items():
            by_id.setdefault(workflow_id, []).extend(run["builds"])
        assert by_id[delivered_on_a] == [A] and by_id[stays_on_a] == [A]
        assert by_id[delivered_on_b] == [B] and by_id[waits_on_b] == [B]
        assert by_id[delivered_after_rollback] == [A]
        assert sorted(by_id[moves_to_b]) == [A, B]  # its first run on A, its next on B
    finally:
        for child in (worker_a, worker_b):
            if child is not None:
                child.stop(timeout=30)


def _awaiting_settlement(client: Client, workflow_id: str) -> Callable[[], Awaitable[bool]]:
    async def reached() -> bool:
        return await awaiting(client, workflow_id) == "settlement"

    return reached


async def _eventually_drained(stack: DevStack, build: str) -> subprocess.CompletedProcess[str]:
    """`herald deploy drained BUILD` until it exits 0 (visibility follows a run's close
    by a moment)."""
    answers: list[subprocess.CompletedProcess[str]] = []

    async def drained() -> bool:
        answers.append(await asyncio.to_thread(deploy, stack, "drained", build))
        return answers[-1].returncode == 0

    await until(drained, within=30)
    return answers[-1]
