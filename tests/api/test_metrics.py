"""/metrics: Herald's own series, read from the ledger at scrape time, no PII in labels."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families

from domain.states import AttemptState
from ledger import observations
from ledger import repository as repo
from ledger.models import PolicyDecision, ReviewItem
from ledger.observations import ObservationFacts
from tests.api.conftest import post_signed, random_mobile, submitted_attempt

pytestmark = pytest.mark.ledger


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(found, name: str, **labels: str) -> float:  # type: ignore[no-untyped-def]
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_show_heralds_series_after_a_delivered_intent(http, committed, cipher):
    phone = random_mobile()
    sent = submitted_attempt(committed, cipher, phone=phone)
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
        intent = repo.get_intent(session, sent.intent_id)
        session.add(
            PolicyDecision(
                intent_id=sent.intent_id,
                channel="email",
                policy_version=repo.active_policy(session).version,
                outcome="defer",
                rule="quiet_hours",
                reason="test",
                inputs={},
                decided_at=datetime.now(UTC),
            )
        )
        session.add(
            ReviewItem(kind="conflict", subject=f"test:{sent.token}", found_at=datetime.now(UTC))
        )
        region = intent.region
    # A receipt delivered twice: one stored, one absorbed by this process.
    receipt = {"MessageSid": sent.remote_id, "MessageStatus": "delivered"}
    for _ in range(2):
        await post_signed(http, f"/v1/receipts/sms?token={sent.token}", receipt)

    answer = await http.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    found = samples(answer.text)

    assert value(found, "herald_ledger_up") == 1
    assert value(found, "herald_attempts", channel="sms", state="delivered") >= 1
    latency = dict(channel="sms", region=region, template_key="demo", template_version="1")
    assert value(found, "herald_intent_to_submitted_seconds_bucket", le="+Inf", **latency) >= 1
    assert value(found, "herald_intent_to_delivered_seconds_bucket", le="+Inf", **latency) >= 1
    assert value(found, "herald_deferrals_total", channel="email", rule="quiet_hours") >= 1
    assert (
        value(found, "herald_policy_decisions_total", channel="sms", outcome="allow", rule="allow")
        >= 1
    )
    assert value(found, "herald_observations_total", source="poll", verdict="applied") >= 1
    assert value(found, "herald_observations_total", source="webhook", verdict="stale") >= 1
    assert value(found, "herald_review_items_open", kind="conflict") >= 1
    assert value(found, "herald_api_receipts_total", verdict="duplicate") == 1
    assert value(found, "herald_api_duplicates_suppressed_total", kind="webhook_redelivery") == 1
    assert "herald_unknown_outcome_max_age_seconds" in answer.text

    # The intent's state: deferred email after a delivered sms still reads delivered.
    assert value(found, "herald_intents", state="delivered") >= 1

    # No phone number, business key, token or message id in any label.
    for _, labels in found:
        for _, label_value in labels:
            for secret in (phone, phone[1:], sent.token, sent.remote_id, sent.intent_id):
                assert secret not in label_value


async def test_a_ledger_outage_is_reported_not_a_500(committed, cipher):
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    from api.metrics import build_registry

    dead = sessionmaker(create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none"))
    registry, _ = build_registry(dead)
    from prometheus_client import generate_latest

    found = samples(generate_latest(registry).decode())
    assert value(found, "herald_ledger_up") == 0


async def test_each_providers_circuit_state_is_a_metric(http, committed):
    from datetime import timedelta

    from domain.circuit import BreakerSettings, Outcome
    from ledger import circuits
    from tests.conftest import unique

    provider = unique("primary")
    breaker = BreakerSettings(failure_threshold=2, cool_down=timedelta(minutes=5))
    now = datetime.now(UTC)
    with committed.begin() as session:
        for _ in range(2):
            circuits.note_outcome(session, provider, Outcome.FAILURE, now, breaker)
    found = samples((await http.get("/metrics")).text)
    assert value(found, "herald_provider_circuit", provider=provider, state="open") == 1
    assert value(found, "herald_provider_circuit", provider=provider, state="closed") == 0


async def test_only_a_providers_oversized_body_counts_as_a_rejected_webhook(http):
    async def rejected() -> float:
        scraped = samples((await http.get("/metrics")).text)
        return value(scraped, "herald_api_webhooks_rejected_total", reason="too_large")

    before = await rejected()
    big = b"x" * 70_000
    for path in ("/v1/intents", "/v1/consents"):  # an app's or operator's 413 is theirs
        assert (await http.post(path, content=big)).status_code == 413
    assert await rejected() == before
    assert (await http.post("/v1/receipts/sms", content=big)).status_code == 413
    assert await rejected() == before + 1
