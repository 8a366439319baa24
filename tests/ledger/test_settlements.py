"""Settlements in the real ledger: evidence (observation, action, audit row), refusals, the
provider's later terminal, the waiting window and the review item lifecycle."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from domain.settlement import SettlementClaim
from domain.states import AttemptState
from ledger import observations, reconcile, review_items, settlements
from ledger import repository as repo
from ledger.models import AuditEvent, Intent, Observation, OperatorAction, ReviewItem
from ledger.observations import ObservationFacts
from tests.conftest import unique
from tests.ledger.conftest import fields, make_attempt

pytestmark = pytest.mark.ledger

NOW = datetime.now(UTC) + timedelta(hours=1)
WINDOW = NOW + timedelta(hours=1)


def _observe(db, token, state, *, source="webhook", at=NOW):  # type: ignore[no-untyped-def]
    return observations.record_observation(
        db,
        ObservationFacts(
            source=source,
            raw_status=state.value if state else "not_found",
            normalized=state,
            observed_at=at,
            dedupe_key=unique("obs"),
        ),
        token=token,
    )


def _unknown_attempt(db, cipher, *, channel="sms"):  # type: ignore[no-untyped-def]
    key = unique("class-opening:c-9081")
    intent_id = repo.record_intent(db, fields(db, cipher, key)).intent_id
    attempt = make_attempt(db, cipher, intent_id, key, channel=channel)
    _observe(db, attempt.token, AttemptState.SUBMITTED, at=NOW - timedelta(minutes=40))
    _observe(
        db, attempt.token, AttemptState.UNKNOWN, source="horizon", at=NOW - timedelta(minutes=10)
    )
    return intent_id, attempt


def _settle(db, intent_id, token, rule, *, reference="", at=NOW, until=WINDOW):  # type: ignore[no-untyped-def]
    return settlements.record_settlement(
        db,
        intent_id=intent_id,
        token=token,
        claim=SettlementClaim(rule, "the carrier's answer", reference),
        operator="ops-1",
        operator_role="operator",
        at=at,
        window_until=until,
    )


def _waiting(db, cipher, *, channel="sms", at=NOW):  # type: ignore[no-untyped-def]
    """An unknown attempt whose workflow recorded that it waits for a settlement until
    WINDOW: (intent id, attempt, the rules offered)."""
    intent_id, attempt = _unknown_attempt(db, cipher, channel=channel)
    offered = settlements.record_waiting(
        db,
        intent_id=intent_id,
        awaiting="settlement",
        until=WINDOW,
        tokens=[attempt.token],
        expired_unsettled=[],
        at=at,
    )
    return intent_id, attempt, offered


def test_a_settlement_is_evidence_an_action_and_an_audit_row_and_closes_its_item(db, cipher):
    intent_id, attempt, _ = _waiting(db, cipher)
    item = db.execute(
        select(ReviewItem).where(ReviewItem.subject == f"attempt:{attempt.id}")
    ).scalar_one()
    assert item.kind == review_items.UNKNOWN_OUTCOME and item.resolved_at is None  # filed at once
    intent = db.get(Intent, intent_id)
    assert (intent.awaiting, intent.awaiting_until) == ("settlement", WINDOW)

    done = _settle(db, intent_id, attempt.token, "carrier-ticket-not-delivered", reference="T-9")
    assert done.refused == "" and done.state == "undelivered" and done.resend_allowed
    db.refresh(attempt)
    assert (attempt.state, attempt.settled_rule) == ("undelivered", "carrier-ticket-not-delivered")
    obs = db.execute(
        select(Observation).where(
            Observation.attempt_id == attempt.id, Observation.source == "operator"
        )
    ).scalar_one()
    assert (obs.normalized_status, obs.verdict, obs.applied) == (
        "undelivered",
        "settles_unknown",
        True,
    )
    assert obs.detail["policy_version"] == repo.active_policy_version(db)
    action = db.execute(
        select(OperatorAction).where(
            OperatorAction.intent_id == intent_id, OperatorAction.action == "settle"
        )
    ).scalar_one()
    assert (action.operator, action.operator_role, action.outcome) == (
        "ops-1",
        "operator",
        "accepted",
    )
    assert action.detail["rule"] == "carrier-ticket-not-delivered"
    audit = db.execute(
        select(AuditEvent).where(AuditEvent.subject == f"attempt:{attempt.id}")
    ).scalar_one()
    assert (audit.actor, audit.action) == ("ops-1", "attempt.settled")
    assert audit.detail["reason"] == "the carrier's answer"
    db.refresh(item)
    assert item.resolved_at is not None and "carrier-ticket-not-delivered" in item.resolution_note


def test_a_rule_needing_a_lookup_is_refused_without_one_and_changes_nothing(db, cipher):
    intent_id, attempt = _unknown_attempt(db, cipher)
    done = _settle(db, intent_id, attempt.token, "carrier-confirmed-not-delivered")
    assert "needs a provider lookup first" in done.refused
    db.refresh(attempt)
    assert attempt.state == "unknown" and attempt.settled_rule is None
    refused = db.execute(
        select(OperatorAction).where(OperatorAction.intent_id == intent_id)
    ).scalar_one()
    assert refused.outcome == "refused" and "lookup" in refused.detail["why"]
    _observe(db, attempt.token, None, source="lookup", at=NOW - timedelta(minutes=1))
    assert _settle(db, intent_id, attempt.token, "carrier-confirmed-not-delivered").refused == ""


def test_a_settlement_after_its_window_is_refused(db, cipher):
    intent_id, attempt = _unknown_attempt(db, cipher)
    done = _settle(
        db, intent_id, attempt.token, "carrier-ticket-not-delivered", reference="T", until=NOW
    )
    assert "expired unsettled" in done.refused


def test_the_providers_later_terminal_replaces_a_settlement_and_is_flagged(db, cipher):
    intent_id, attempt = _unknown_attempt(db, cipher)
    _settle(db, intent_id, attempt.token, "carrier-ticket-not-delivered", reference="T-1")
    late = _observe(db, attempt.token, AttemptState.DELIVERED, at=NOW + timedelta(minutes=5))
    assert late.verdict == "replaces_settlement" and late.state == "delivered"
    db.refresh(attempt)
    assert (attempt.state, attempt.settled_rule, attempt.settled_resend_allowed) == (
        "delivered",
        None,
        None,
    )
    # Filed at once, not at the next sweep (which would find the flagged row too).
    filed = db.execute(
        select(ReviewItem).where(ReviewItem.subject == f"observation:{late.observation_id}")
    ).scalar_one()
    assert filed.kind == review_items.CONFLICTING_OBSERVATION and filed.resolved_at is None
    assert filed.detail["replaced"] == "an operator's settlement"
    rows = reconcile.find(db, now=NOW + timedelta(minutes=10))
    assert any(
        r.kind == review_items.CONFLICTING_OBSERVATION and r.intent_id == intent_id for r in rows
    )


def test_a_wrong_settlement_is_corrected_by_a_superseding_one(db, cipher):
    intent_id, attempt = _unknown_attempt(db, cipher)
    _settle(db, intent_id, attempt.token, "carrier-ticket-not-delivered", reference="T-1")
    again = _settle(
        db, intent_id, attempt.token, "recipient-confirmed-received", reference="phoned support"
    )
    assert again.verdict == "supersedes" and again.state == "delivered"
    observed = db.execute(
        select(Observation.verdict)
        .where(Observation.attempt_id == attempt.id, Observation.source == "operator")
        .order_by(Observation.id)
    ).scalars()
    assert list(observed) == ["settles_unknown", "supersedes"]  # appended, never edited


def test_the_sweep_closes_an_item_whose_attempt_a_late_receipt_settled(db, cipher):
    intent_id, attempt, _ = _waiting(db, cipher)
    assert review_items.close_settled_items(db, at=NOW) == []  # still unknown: stays open
    receipt = _observe(db, attempt.token, AttemptState.DELIVERED, at=NOW + timedelta(minutes=1))
    closed = dict(review_items.close_settled_items(db, at=NOW + timedelta(minutes=2)))
    item = db.execute(
        select(ReviewItem).where(ReviewItem.subject == f"attempt:{attempt.id}")
    ).scalar_one()
    assert item.id in closed
    assert item.resolved_by == "reconciler"
    assert f"observation #{receipt.observation_id}" in item.resolution_note
    assert "delivered" in item.resolution_note


def test_an_expired_window_is_recorded_and_the_intent_no_longer_waits(db, cipher):
    intent_id, attempt = _unknown_attempt(db, cipher)
    settlements.record_waiting(
        db,
        intent_id=intent_id,
        awaiting=None,
        until=None,
        tokens=[],
        expired_unsettled=[attempt.token],
        at=NOW,
    )
    assert db.get(Intent, intent_id).awaiting is None
    expired = db.execute(
        select(OperatorAction).where(OperatorAction.intent_id == intent_id)
    ).scalar_one()
    assert (expired.action, expired.outcome) == ("settlement-expired", "expired")


def test_rules_needing_a_lookup_are_not_offered_where_the_provider_has_none(db, cipher):
    intent_id, attempt, offered = _waiting(db, cipher, channel="email")
    assert offered and all(r.evidence.value != "provider_lookup" for r in offered)
    done = _settle(db, intent_id, attempt.token, "carrier-confirmed-not-delivered")
    assert "has none" in done.refused


def test_the_unknown_set_lists_what_waits_for_a_settlement_filtered(db, cipher):
    intent_id, attempt, _ = _waiting(db, cipher)
    event_type = db.get(Intent, intent_id).event_type
    members = settlements.unknown_members(db, event_type=event_type)
    assert attempt.token in [m.attempt_token for m in members]
    assert settlements.unknown_members(db, event_type="no-such-event") == []
    _settle(db, intent_id, attempt.token, "carrier-ticket-not-delivered", reference="T")
    assert attempt.token not in [m.attempt_token for m in settlements.unknown_members(db)]
