"""An app on its own credential, over HTTP against the whole stack (issue #50): it records
consent, uploads an attachment and sends it (the email that reaches the mailbox carries
the same bytes), and cancels its own scheduled intent twice with one action recorded."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from domain.principals import Role
from ledger import principals
from scenarios.base import EMAIL_REACHED
from tests.activities.test_email_send import VARIABLES as ITINERARY
from tests.conftest import key_id, until

pytestmark = pytest.mark.e2e


def app_token(stack) -> tuple[str, dict[str, str]]:  # type: ignore[no-untyped-def]
    name = f"shop-{key_id(6)}"
    with stack.client.sessions.begin() as session:
        token = principals.create(
            session, name, Role.APP, by=principals.BOOTSTRAP_ACTOR, at=datetime.now(UTC)
        ).token
    return name, {"Authorization": f"Bearer {token}"}


async def test_an_app_uploads_an_attachment_and_the_email_that_arrives_carries_it(stack):  # type: ignore[no-untyped-def]
    _, auth = app_token(stack)
    recipient = f"m-{key_id()}"
    data = b"session_id,hands,net\ngs-" + key_id().encode() + b",184,+1320\n"
    async with httpx.AsyncClient(base_url=stack.addresses.api, headers=auth, timeout=30) as http:
        consent = await http.post(
            "/v1/consents",
            json={"recipient_ref": recipient, "channel": "email", "source": "signup"},
        )
        assert consent.status_code == 201, consent.text
        uploaded = await http.post(
            "/v1/attachments", files={"file": ("session-report.csv", data, "text/csv")}
        )
        assert uploaded.status_code == 201, uploaded.text
        assert uploaded.json()["sha256"] == hashlib.sha256(data).hexdigest()
        created = await http.post(
            "/v1/intents",
            json={
                "business_key": f"itinerary-change:t-{key_id()}",
                "recipient_ref": recipient,
                "template_key": "itinerary-change",
                "email": f"{recipient}@example.test",
                "channels": ["email"],
                "country": "GB",
                "artifact_sha256": uploaded.json()["sha256"],
                "variables": ITINERARY,
            },
        )
        assert created.status_code == 201, created.text
        key = created.json()["business_key"]

        async def reached() -> dict | None:  # type: ignore[type-arg]
            doc = (await http.get(f"/v1/intents/{key}")).json()
            attempts = doc["attempts"]
            return doc if attempts and attempts[0]["state"] in EMAIL_REACHED else None

        doc = await until(reached, within=60, what="the email to reach the mailbox")

    message_id = doc["attempts"][0]["message_id"]

    async def delivered_mail():  # type: ignore[no-untyped-def]
        found = [m for m in stack.sink.messages if m.message["Message-ID"] == message_id]
        return found[0] if found else None

    mail = await until(delivered_mail, within=30, what="the message in the SMTP sink")
    (part,) = list(mail.message.iter_attachments())
    assert part.get_filename() == "session-report.csv"
    assert part.get_payload(decode=True) == data


async def test_an_app_cancels_its_own_scheduled_intent_twice_and_one_cancel_is_recorded(stack):  # type: ignore[no-untyped-def]
    name, auth = app_token(stack)
    recipient = f"m-{key_id()}"
    async with httpx.AsyncClient(base_url=stack.addresses.api, headers=auth, timeout=30) as http:
        consent = await http.post(
            "/v1/consents", json={"recipient_ref": recipient, "channel": "sms"}
        )
        assert consent.status_code == 201, consent.text
        created = await http.post(
            "/v1/intents",
            json={
                "business_key": f"order-created:o-{key_id()}",
                "recipient_ref": recipient,
                "template_key": "order-created",
                "template_version": 1,
                "phone": "+447400000100",
                "variables": {"order_id": "o-77"},
                "send_at": (datetime.now(UTC) + timedelta(days=1)).isoformat(),
            },
        )
        assert created.status_code == 201, created.text
        key = created.json()["business_key"]

        first = await http.post(f"/v1/intents/{key}/cancel", json={"reason": "order withdrawn"})
        again = await http.post(f"/v1/intents/{key}/cancel", json={"reason": "order withdrawn"})

        assert first.status_code == 200 and first.json()["accepted"], first.text
        assert first.json()["operator"] == name
        assert again.status_code == 200 and again.json()["message"] == "already cancelled"
        doc = (await http.get(f"/v1/intents/{key}")).json()
    cancels = [a for a in doc["operator_actions"] if a["action"] == "cancel"]
    assert [(a["operator"], a["operator_role"]) for a in cancels] == [(name, "app")]
    assert doc["attempts"] == []
