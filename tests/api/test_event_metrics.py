"""The seed metrics (ledger.metrics) move when the ledger learns their facts, on /metrics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from domain.states import AttemptState
from ledger import observations
from ledger import repository as repo
from ledger.models import Attempt, Intent
from ledger.observations import ObservationFacts
from tests.api.conftest import post_signed, random_mobile, submitted_attempt
from tests.api.test_metrics import samples, value
from tests.ledger.conftest import fields

pytestmark = pytest.mark.ledger


def labels_of(committed, attempt_id: int) -> dict[str, str]:  # type: ignore[no-untyped-def]
    with committed() as session:
        attempt = session.get(Attempt, attempt_id)
        intent = session.get(Intent, attempt.intent_id)
        return dict(
            channel=attempt.channel,
            region=intent.region,
            template_key=attempt.template_key,
            template_version=str(attempt.template_version),
        )


async def scrape(http):  # type: ignore[no-untyped-def]
    answer = await http.get("/metrics")
    assert answer.status_code == 200
    return samples(answer.text)


async def test_a_submit_and_its_receipts_move_the_seed_metrics(http, committed, cipher):
    before = await scrape(http)
    phone = random_mobile()
    sent = submitted_attempt(committed, cipher, phone=phone)
    labels = labels_of(committed, sent.attempt_id)
    receipt = {"MessageSid": sent.remote_id, "MessageStatus": "delivered"}
    for _ in range(2):  # the second is a redelivery: absorbed, counted as a duplicate
        await post_signed(http, f"/v1/receipts/sms?token={sent.token}", receipt)
    after = await scrape(http)

    def moved(name: str, **extra: str) -> float:
        return value(after, name, **extra) - value(before, name, **extra)

    assert moved("herald_scheduled_to_submitted_seconds_count", **labels) == 1
    assert moved("herald_scheduled_to_submitted_seconds_bucket", le="+Inf", **labels) == 1
    assert moved("herald_submitted_to_delivered_seconds_count", **labels) == 1
    # Loopback receipts: delivered within 5 s of the submit.
    assert moved("herald_submitted_to_delivered_seconds_bucket", le="5.0", **labels) == 1
    assert (
        moved("herald_duplicates_suppressed_total", kind="observation_redelivery", channel="sms")
        == 1
    )
    for _, label_values in after:
        for _, label_value in label_values:
            for secret in (phone, phone[1:], sent.token, sent.remote_id, sent.intent_id):
                assert secret not in label_value


async def test_an_unknown_outcome_settled_later_is_counted_with_its_age(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    labels = labels_of(committed, sent.attempt_id)
    became_unknown = datetime.now(UTC) - timedelta(minutes=2)
    before = await scrape(http)
    with committed.begin() as session:
        observations.record_observation(
            session,
            ObservationFacts(
                source="horizon",
                raw_status="unknown",
                normalized=AttemptState.UNKNOWN,
                observed_at=became_unknown,
                dedupe_key=f"horizon:{sent.token}",
            ),
            token=sent.token,
        )
    with committed.begin() as session:
        observations.record_observation(
            session,
            ObservationFacts(
                source="poll",
                raw_status="delivered",
                normalized=AttemptState.DELIVERED,
                observed_at=datetime.now(UTC),
                dedupe_key=f"poll:{sent.token}:delivered",
                remote_id=sent.remote_id,
            ),
            token=sent.token,
        )
        # The same status again, by another path: kept as evidence, suppressed.
        observations.record_observation(
            session,
            ObservationFacts(
                source="webhook",
                raw_status="delivered",
                normalized=AttemptState.DELIVERED,
                observed_at=datetime.now(UTC),
                dedupe_key=f"webhook:{sent.token}:delivered",
                remote_id=sent.remote_id,
            ),
            token=sent.token,
        )
    after = await scrape(http)

    def moved(name: str, **extra: str) -> float:
        return value(after, name, **extra) - value(before, name, **extra)

    assert moved("herald_unknown_outcomes_total", **labels) == 1
    assert moved("herald_unknown_age_at_settlement_seconds_count", **labels) == 1
    # Unknown for about two minutes: above 60 s, within 300 s.
    assert moved("herald_unknown_age_at_settlement_seconds_bucket", le="60.0", **labels) == 0
    assert moved("herald_unknown_age_at_settlement_seconds_bucket", le="300.0", **labels) == 1
    assert moved("herald_duplicates_suppressed_total", kind="stale_observation", channel="sms") == 1


async def test_a_rolled_back_transition_counts_nothing(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    labels = labels_of(committed, sent.attempt_id)
    before = await scrape(http)
    with committed() as session:
        observations.record_observation(
            session,
            ObservationFacts(
                source="poll",
                raw_status="delivered",
                normalized=AttemptState.DELIVERED,
                observed_at=datetime.now(UTC),
                dedupe_key=f"poll:{sent.token}:delivered",
                remote_id=sent.remote_id,
            ),
            token=sent.token,
        )
        session.rollback()
    with committed() as session:
        state = session.execute(
            select(Attempt.state).where(Attempt.id == sent.attempt_id)
        ).scalar_one()
    after = await scrape(http)
    assert state == AttemptState.SUBMITTED.value
    assert value(after, "herald_submitted_to_delivered_seconds_count", **labels) == value(
        before, "herald_submitted_to_delivered_seconds_count", **labels
    )


async def test_an_intent_recorded_twice_is_a_suppressed_duplicate(http, committed, cipher):
    before = await scrape(http)
    key = f"order-created:o-{datetime.now(UTC).timestamp()}"
    for _ in range(2):
        with committed.begin() as session:
            repo.record_intent(session, fields(session, cipher, key))
    after = await scrape(http)
    kind = dict(kind="business_key_existing", channel="sms")
    moved = value(after, "herald_duplicates_suppressed_total", **kind) - value(
        before, "herald_duplicates_suppressed_total", **kind
    )
    assert moved == 1
