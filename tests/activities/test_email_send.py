"""The email send activity against the real ledger and a real SMTP server (the sink): a
retried send of an attempt the relay already accepted sends nothing and is counted."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from activities.contracts import SubmitInput
from activities.email import EmailActivities
from domain.requests import NotificationRequest
from ledger.metrics import DUPLICATES_SUPPRESSED
from tests.activities import intents
from transports.artifacts import ArtifactStore
from transports.email import SmtpEmail
from transports.smtp_sink import SmtpSink

pytestmark = pytest.mark.ledger

VARIABLES = {
    "first_name": "Ada",
    "flight": "HR 204",
    "origin": "LHR",
    "destination": "OSL",
    "new_departure": "14:05",
    "old_departure": "12:40",
    "trip_url": "https://x.test/t",
}


async def prepared_email(committed, cipher) -> str:  # type: ignore[no-untyped-def]
    key = f"itinerary-change:t-{uuid.uuid4().hex[:8]}"
    request = NotificationRequest(
        business_key=key,
        recipient_ref=key,
        email="traveller@example.test",
        channels=["email"],
        country="GB",
        template_key="itinerary-change",
        variables=VARIABLES,
    )
    return await intents.prepared(committed, cipher, request, "email")


async def test_a_retried_send_of_an_accepted_email_sends_nothing_and_is_counted(
    clean_sink: SmtpSink, committed, cipher, tmp_path: Path
) -> None:
    sink = clean_sink
    email = EmailActivities(
        SmtpEmail(host="127.0.0.1", port=sink.port),
        committed,
        cipher,
        ArtifactStore(tmp_path),
        public_base_url="http://127.0.0.1:9",
        unsubscribe_secret="test-unsubscribe-secret",
    )
    token = await prepared_email(committed, cipher)
    duplicates = DUPLICATES_SUPPRESSED.labels("send_already_submitted", "email")
    before = duplicates._value.get()

    first = await email.send_email(SubmitInput(token))
    again = await email.send_email(SubmitInput(token))  # the activity retried after a crash

    assert first.state == "sent" and first.remote_id
    assert (again.state, again.remote_id) == (first.state, first.remote_id)
    assert len(sink.messages) == 1
    assert duplicates._value.get() == before + 1
