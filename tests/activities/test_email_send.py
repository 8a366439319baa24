"""The email send activity against the real ledger and a real SMTP server (the sink): a
retried send of an attempt the relay already accepted sends nothing and is counted."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from activities.contracts import SubmitInput
from activities.email import EmailActivities
from domain.requests import NotificationRequest
from ledger.artifacts import FolderArtifactStore
from ledger.metrics import DUPLICATES_SUPPRESSED
from simulators.smtp import SmtpSink
from tests.activities import intents
from transports.smtp import SmtpEmail

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
        FolderArtifactStore(tmp_path),
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


# --- through SendGrid (the simulator): 202 is `submitted`; a lost answer is never resent ---


@pytest.fixture
async def sendgrid_sim():  # type: ignore[no-untyped-def]
    from simulators.sendgrid import SendGridSimulatorServer, SimEmailDelays

    server = SendGridSimulatorServer(
        api_key="SG.test", delays=SimEmailDelays(step=0.01, batch=0.01, hang=30.0)
    )
    await server.start()
    yield server
    await server.stop()


def sendgrid_activities(server, committed, cipher, tmp_path: Path) -> EmailActivities:  # type: ignore[no-untyped-def]
    from transports.sendgrid import SendGridEmail

    return EmailActivities(
        SendGridEmail(api_key="SG.test", base_url=server.url, read_timeout=0.5),
        committed,
        cipher,
        FolderArtifactStore(tmp_path),
        public_base_url="http://127.0.0.1:9",
        unsubscribe_secret="test-unsubscribe-secret",
    )


async def prepared_to(committed, cipher, address: str) -> str:  # type: ignore[no-untyped-def]
    key = f"itinerary-change:t-{uuid.uuid4().hex[:8]}"
    request = NotificationRequest(
        business_key=key,
        recipient_ref=key,
        email=address,
        channels=["email"],
        country="GB",
        template_key="itinerary-change",
        variables=VARIABLES,
    )
    return await intents.prepared(committed, cipher, request, "email")


def attempt_of(committed, token: str):  # type: ignore[no-untyped-def]
    from ledger import repository as repo

    with committed() as session:
        return repo.attempt_by_token(session, token)


async def test_a_sendgrid_acceptance_is_submitted_with_its_message_id_and_sent_once(
    sendgrid_sim, committed, cipher, tmp_path: Path
) -> None:
    email = sendgrid_activities(sendgrid_sim, committed, cipher, tmp_path)
    token = await prepared_to(committed, cipher, "ada@example.test")
    first = await email.send_email(SubmitInput(token))
    again = await email.send_email(SubmitInput(token))
    assert first.state == "submitted" and first.remote_id
    assert (again.state, again.remote_id) == (first.state, first.remote_id)
    assert attempt_of(committed, token).remote_id == first.remote_id
    assert sendgrid_sim.sim.stats()["by_token"] == {token: 1}


async def test_a_sendgrid_timeout_ends_unknown_and_is_never_sent_again(
    sendgrid_sim, committed, cipher, tmp_path: Path
) -> None:
    email = sendgrid_activities(sendgrid_sim, committed, cipher, tmp_path)
    token = await prepared_to(committed, cipher, "timeout@example.test")
    first = await email.send_email(SubmitInput(token))
    again = await email.send_email(SubmitInput(token))
    assert first.state == "unknown" and "a person settles it" in first.reason
    assert "reconcil" not in first.reason  # approve-resend stays refused until settled
    assert again.state == "unknown"
    assert sendgrid_sim.sim.stats()["by_token"] == {token: 1}


async def test_a_send_whose_earlier_try_was_lost_is_unknown_without_a_request(
    sendgrid_sim, committed, cipher, tmp_path: Path
) -> None:
    from datetime import UTC, datetime

    from ledger.models import Attempt

    email = sendgrid_activities(sendgrid_sim, committed, cipher, tmp_path)
    token = await prepared_to(committed, cipher, "ada@example.test")
    with committed.begin() as session:  # a worker died after starting the request
        session.query(Attempt).filter(Attempt.token == token).update(
            {Attempt.send_started_at: datetime.now(UTC)}
        )
    outcome = await email.send_email(SubmitInput(token))
    assert outcome.state == "unknown"
    assert sendgrid_sim.sim.stats()["total"] == 0


async def test_a_sendgrid_refusal_is_permanent_and_a_rate_limit_is_retried_later(
    sendgrid_sim, committed, cipher, tmp_path: Path
) -> None:
    from temporalio.exceptions import ApplicationError

    email = sendgrid_activities(sendgrid_sim, committed, cipher, tmp_path)
    refused = await prepared_to(committed, cipher, "refuse@example.test")
    with pytest.raises(ApplicationError) as caught:
        await email.send_email(SubmitInput(refused))
    assert caught.value.non_retryable and "@" not in str(caught.value)
    assert attempt_of(committed, refused).state == "failed"

    limited = await prepared_to(committed, cipher, "ratelimit@example.test")
    with pytest.raises(ApplicationError) as retried:
        await email.send_email(SubmitInput(limited))
    assert not retried.value.non_retryable
    assert retried.value.next_retry_delay is not None
    # The claim was released: the next try sends.
    assert attempt_of(committed, limited).send_started_at is None


async def test_the_horizon_verdict_answers_an_event_the_workflow_was_never_signalled(
    sendgrid_sim, committed, cipher, tmp_path: Path
) -> None:
    from datetime import UTC, datetime

    from activities.contracts import VerdictInput
    from activities.ledger import LedgerActivities
    from domain.states import AttemptState
    from ledger import observations
    from ledger.observations import ObservationFacts

    email = sendgrid_activities(sendgrid_sim, committed, cipher, tmp_path)
    token = await prepared_to(committed, cipher, "ada@example.test")
    assert (await email.send_email(SubmitInput(token))).state == "submitted"
    with committed.begin() as session:  # the ingress recorded it; its signal was lost
        observations.record_observation(
            session,
            ObservationFacts(
                source="webhook",
                raw_status="delivered",
                normalized=AttemptState.DELIVERED,
                observed_at=datetime.now(UTC),
                dedupe_key=f"sendgrid:test-{token}",
            ),
            token=token,
        )
    ledger = LedgerActivities(committed, cipher)
    verdict = VerdictInput(token, "sent", "horizon", "no event", answer_state=True)
    assert await ledger.record_verdict(verdict) == "delivered"
    assert attempt_of(committed, token).state == "delivered"
    plain = VerdictInput(token, "sent", "horizon", "no event")
    assert await ledger.record_verdict(plain) == "duplicate"


async def test_a_wrong_sendgrid_key_is_handed_back_as_a_deferral_not_a_failure(
    sendgrid_sim, committed, cipher, tmp_path: Path
) -> None:
    from sqlalchemy import select
    from temporalio.exceptions import ApplicationError

    from ledger.models import PolicyDecision
    from transports.sendgrid import SendGridEmail

    email = EmailActivities(
        SendGridEmail(api_key="SG.rotated", base_url=sendgrid_sim.url),
        committed,
        cipher,
        FolderArtifactStore(tmp_path),
        public_base_url="http://127.0.0.1:9",
        unsubscribe_secret="test-unsubscribe-secret",
    )
    token = await prepared_to(committed, cipher, "ada@example.test")
    with pytest.raises(ApplicationError) as caught:
        await email.send_email(SubmitInput(token))
    # About the account: the workflow defers (a new attempt later), never ends the intent.
    assert caught.value.type == "ProviderRefused" and caught.value.non_retryable
    assert list(caught.value.details)[:2] == ["401", "provider"]
    attempt = attempt_of(committed, token)
    assert (attempt.state, attempt.error_code) == ("failed", "401")
    with committed() as session:
        decision = session.scalars(
            select(PolicyDecision)
            .where(PolicyDecision.intent_id == attempt.intent_id)
            .order_by(PolicyDecision.id.desc())
            .limit(1)
        ).one()
    assert (decision.outcome, decision.rule) == ("defer", "provider.refused")
    assert sendgrid_sim.sim.stats()["total"] == 0


async def test_an_attachment_in_the_postgres_store_reaches_the_sink_intact(
    clean_sink: SmtpSink, committed, cipher
) -> None:
    """The email activity reads the attachment through the configured store: here the
    ledger's table, which a worker on any host reaches."""
    from ledger import artifacts
    from ledger.artifacts import PostgresArtifactStore

    store = PostgresArtifactStore(committed)
    data = b"session_id,hands\n" + uuid.uuid4().hex.encode()
    ref = store.put(data, media_type="text/csv", filename="session-report.csv")
    with committed.begin() as session:
        artifacts.register(session, ref)
    key = f"itinerary-change:t-{uuid.uuid4().hex[:8]}"
    token = await intents.prepared(
        committed,
        cipher,
        NotificationRequest(
            business_key=key,
            recipient_ref=key,
            email="traveller@example.test",
            channels=["email"],
            country="GB",
            template_key="itinerary-change",
            variables=VARIABLES,
            artifact_sha256=ref.sha256,
        ),
        "email",
    )
    email = EmailActivities(
        SmtpEmail(host="127.0.0.1", port=clean_sink.port),
        committed,
        cipher,
        store,
        public_base_url="http://127.0.0.1:9",
        unsubscribe_secret="test-unsubscribe-secret",
    )

    sent = await email.send_email(SubmitInput(token))

    assert sent.state == "sent"
    (received,) = await clean_sink.wait_for(1)
    (part,) = list(received.message.iter_attachments())
    assert part.get_filename() == "session-report.csv"
    assert part.get_content_type() == "text/csv"
    assert part.get_payload(decode=True) == data
