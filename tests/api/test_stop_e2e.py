"""Issue 6's acceptance: a STOP from the carrier simulator (signed, over real HTTP, to the
running ingress) suppresses the next SMS to that number, with the reason in the decision."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from datetime import UTC, datetime

import httpx
import pytest

from domain.requests import NotificationRequest
from ledger.models import Consent
from workflows.notification import NotificationWorkflow

pytestmark = pytest.mark.e2e

VARIABLES = {
    "class_name": "Spin 18:00",
    "starts_at": "18:30",
    "hold_until": "18:15",
    "booking_url": "https://x.test/c",
}


async def test_a_stop_from_the_simulator_denies_the_next_sms_with_the_reason(stack):
    phone = f"+4474003{secrets.randbelow(100_000):05d}"  # outside the simulator's fault range
    async with httpx.AsyncClient() as http:
        answer = await http.post(
            f"{stack.simulator.url}/_sim/inbound",
            json={"from": phone, "to": stack.cfg.sms_sender, "body": "Stop"},
        )
    assert answer.status_code == 200 and answer.json()["status_code"] == 200

    suffix = uuid.uuid4().hex[:8]
    recipient = f"m-{suffix}"
    with stack.client.sessions.begin() as session:
        session.add(
            Consent(
                recipient_ref=recipient,
                channel="sms",
                purpose="service",
                source="test",
                granted_at=datetime.now(UTC),
            )
        )
    ref = await stack.client.notify(
        NotificationRequest(
            business_key=f"class-opening:c-9081:{recipient}",
            recipient_ref=recipient,
            template_key="class-opening",
            phone=phone,
            variables=VARIABLES,
        )
    )
    handle = stack.client.temporal.get_workflow_handle_for(
        NotificationWorkflow.run, ref.workflow_id
    )
    await asyncio.wait_for(handle.result(), 60)

    doc = stack.client.timeline(ref.business_key)
    sms = [d for d in doc["decisions"] if d["channel"] == "sms"]
    assert sms and sms[-1]["outcome"] == "deny"
    assert sms[-1]["rule"] == "suppression.opted_out"
    assert doc["attempts"] == []
    async with httpx.AsyncClient() as http:
        stats = (await http.get(f"{stack.simulator.url}/_sim/stats")).json()
    assert phone not in str(stats)
