"""The whole system: Temporal dev server, embedded Postgres, the worker in its own process,
the ingress, the carrier simulator and the SMTP sink."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil
import pytest

from devstack import free_port
from domain.requests import NotificationRequest
from ledger.models import Consent
from tests.conftest import until
from workflows.notification import NotificationWorkflow

pytestmark = pytest.mark.e2e

PHONE = "+447400000100"
TIMEOUT_PHONE = "+447400000001"  # the simulator accepts, then withholds its answer
VARIABLES = {
    "class_name": "Spin 18:00",
    "starts_at": "18:30",
    "hold_until": "18:15",
    "booking_url": "https://x.test/c",
}


def consent(stack, recipient: str, channel: str = "sms") -> None:  # type: ignore[no-untyped-def]
    with stack.client.sessions.begin() as session:
        session.add(
            Consent(
                recipient_ref=recipient,
                channel=channel,
                purpose="service",
                source="test",
                granted_at=datetime.now(UTC),
            )
        )


async def notify(stack, phone: str, **overrides):  # type: ignore[no-untyped-def]
    suffix = uuid.uuid4().hex[:8]
    key = f"class-opening:c-9081:m-{suffix}"
    recipient = f"m-{suffix}"
    consent(stack, recipient)
    values = dict(
        business_key=key,
        recipient_ref=recipient,
        template_key="class-opening",
        phone=phone,
        variables=VARIABLES,
    )
    values.update(overrides)
    ref = await stack.client.notify(NotificationRequest(**values))  # type: ignore[arg-type]
    handle = stack.client.temporal.get_workflow_handle_for(
        NotificationWorkflow.run, ref.workflow_id
    )
    return ref, handle


async def sim_stats(stack) -> dict:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{stack.simulator.url}/_sim/stats")).json()


async def test_one_sms_runs_the_real_path_with_the_worker_in_its_own_process(stack):
    assert stack.worker.pid != os.getpid() and stack.worker.is_alive()
    ref, handle = await notify(stack, PHONE)
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.outcome == "delivered"
    doc = stack.client.timeline(ref.business_key)
    assert doc["intent"]["state"] == "delivered"
    token = doc["attempts"][0]["token"]
    assert (await sim_stats(stack))["by_token"][token] == 1
    sources = {o["source"] for o in doc["observations"]}
    assert {"send", "webhook"} <= sources

    # No phone number, email address or body in the history or the worker's log.
    history = await handle.fetch_history()
    dumped = history.to_json()
    body_fragment = "Spin 18:00"
    for secret in (PHONE, PHONE[1:], "7400000100", body_fragment):
        assert secret not in dumped
    log = Path(stack.cfg.data_path / "worker.log").read_text()
    assert "7400000100" not in log and body_fragment not in log


async def test_a_lost_send_response_settles_by_receipt_with_exactly_one_submission(stack):
    """The 18:00:00 race: accepted, response lost, receipt first, late `unknown` kept."""
    ref, handle = await notify(stack, TIMEOUT_PHONE)
    result = await asyncio.wait_for(handle.result(), 90)
    assert result.outcome == "delivered"

    # The receipt settled the attempt while the send still waited for its answer; the send
    # gives up at its read timeout (10 s) and records `unknown`, which must not apply.
    async def with_late_unknown() -> dict | None:  # type: ignore[type-arg]
        doc = stack.client.timeline(ref.business_key)
        seen = any(o["normalized_status"] == "unknown" for o in doc["observations"])
        return doc if seen else None

    doc = await until(with_late_unknown, within=60, what="the send's late unknown")
    unknown = [o for o in doc["observations"] if o["normalized_status"] == "unknown"]
    token = doc["attempts"][0]["token"]
    assert (await sim_stats(stack))["by_token"][token] == 1
    assert unknown and all(not o["applied"] for o in unknown)
    assert doc["attempts"][0]["state"] == "delivered"


async def test_a_second_start_of_the_same_business_key_returns_the_existing_intent(stack):
    ref, handle = await notify(stack, PHONE)
    again = await stack.client.notify(
        NotificationRequest(
            business_key=ref.business_key,
            recipient_ref=f"m-{ref.business_key.rsplit('-', 1)[1]}",
            template_key="class-opening",
            phone=PHONE,
            variables=VARIABLES,
        )
    )
    assert again.existed and again.intent_id == ref.intent_id
    await asyncio.wait_for(handle.result(), 60)
    token = stack.client.timeline(ref.business_key)["attempts"][0]["token"]
    assert (await sim_stats(stack))["by_token"][token] == 1


def test_herald_dev_serves_the_web_ui_and_leaves_no_process_after_sigterm(tmp_path):
    env = {
        **os.environ,
        "HERALD_DATA_DIR": str(tmp_path / "h"),
        "HERALD_POSTGRES_PORT": str(free_port()),
        "HERALD_TEMPORAL_PORT": str(free_port()),
        "HERALD_TEMPORAL_UI_PORT": str(free_port()),
        "HERALD_API_PORT": str(free_port()),
        "HERALD_SIMULATOR_PORT": str(free_port()),
        "HERALD_TELNYX_SIMULATOR_PORT": str(free_port()),
        "HERALD_SMTP_PORT": str(free_port()),
        "HERALD_EMAIL_SIMULATOR_PORT": str(free_port()),
    }
    env.pop("HERALD_DATABASE_URL", None)
    env.pop("HERALD_TEMPORAL_ADDRESS", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "dev"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    state = tmp_path / "h" / "dev.json"
    try:
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:  # the address table is printed once everything is up
            lines.append(line)
            if "Operator token" in line:
                break
        assert state.exists(), "".join(lines)
        addresses = json.loads(state.read_text())
        assert httpx.get(addresses["temporal_ui"], timeout=10).status_code == 200
        assert httpx.get(f"{addresses['api']}/healthz", timeout=5).status_code == 200
        # The table names the console; `GET /` leads to it (its sign-in page, no session).
        assert f"{addresses['api']}/console" in "".join(lines)
        console = httpx.get(f"{addresses['api']}/", timeout=5, follow_redirects=True)
        assert console.status_code == 200 and console.url.path == "/console/sign-in"
        second = subprocess.run(
            [sys.executable, "-m", "cli", "dev"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode != 0 and "already running" in second.stderr
        pids = list(addresses["pids"].values())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert proc.returncode == 0
    alive = [
        p
        for p in pids
        if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    ]
    assert alive == []
    assert not state.exists()
    # The cluster may live under /var/tmp when the test folder is private: remove it.
    from devstack import EmbeddedPostgres

    EmbeddedPostgres(tmp_path / "h", port=free_port()).destroy()


async def test_the_worker_serves_the_temporal_sdk_metrics(stack):
    # Its task metrics exist once the worker has polled and completed something.
    ref, handle = await notify(stack, PHONE)
    await asyncio.wait_for(handle.result(), 60)
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://{stack.addresses.worker_metrics}/metrics")).text
    assert "temporal_" in text and "workflow_task" in text
    assert PHONE[1:] not in text
