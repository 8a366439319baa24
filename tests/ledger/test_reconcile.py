"""Reconciliation finds each kind of trouble, with its age, and files each once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, update

from domain.states import AttemptState
from ledger import observations, operator_actions, reconcile, review_items
from ledger import repository as repo
from ledger.models import Attempt, Intent, ReviewItem
from ledger.observations import ObservationFacts
from tests.conftest import unique
from tests.ledger.conftest import fields, make_attempt

pytestmark = pytest.mark.ledger

# An hour ahead of the wall clock: make_attempt stamps prepared_at with the real time, which
# must stay before T0's observations however late in a long suite this module runs.
T0 = datetime.now(UTC) + timedelta(hours=1)
LATER = T0 + timedelta(hours=2)
"""`find` runs two hours after everything below was recorded."""


def _intent(db, cipher, **overrides) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    key = unique("class-opening:c-9081")
    intent_id = repo.record_intent(db, fields(db, cipher, key, **overrides)).intent_id
    # Pin the creation time: the ages below must not depend on when the test runs.
    db.query(Intent).filter(Intent.id == intent_id).update({Intent.created_at: T0})
    return intent_id, key


def _observe(db, token, state, *, at=T0, remote_id=None, source="webhook"):  # type: ignore[no-untyped-def]
    return observations.record_observation(
        db,
        ObservationFacts(
            source=source,
            raw_status=state.value,
            normalized=state,
            observed_at=at,
            dedupe_key=unique("obs"),
            remote_id=remote_id,
        ),
        token=token,
    )


def _decide(db, intent_id, outcome, next_eligible_at=None):  # type: ignore[no-untyped-def]
    repo.record_decision(
        db,
        intent_id=intent_id,
        channel="sms",
        policy_version=repo.active_policy(db).version,
        outcome=outcome,
        rule="test",
        reason="test",
        inputs={},
        next_eligible_at=next_eligible_at,
        decided_at=T0,
    )


def _found(db, subject: str, **kw) -> list[review_items.ReviewRow]:  # type: ignore[no-untyped-def]
    return [r for r in reconcile.find(db, now=LATER, limit=100_000, **kw) if r.subject == subject]


def _only(db, subject: str, kind: str, **kw) -> review_items.ReviewRow:  # type: ignore[no-untyped-def]
    rows = _found(db, subject, **kw)
    assert [r.kind for r in rows] == [kind]
    assert rows[0].age == LATER - rows[0].since and rows[0].age > timedelta(0)
    return rows[0]


def test_an_intent_never_authorized_is_found_with_its_age(db, cipher):
    intent_id, key = _intent(db, cipher)
    row = _only(db, f"intent:{intent_id}", "intent_without_attempt")
    assert row.business_key == key and row.detail["last_decision"] is None
    assert timedelta(hours=1, minutes=59) < row.age < timedelta(hours=2, minutes=1)
    assert row.as_dict()["age"].startswith("1h5") or row.as_dict()["age"].startswith("2h")


def test_a_denied_a_cancelled_or_a_still_deferred_intent_is_not_trouble(db, cipher):
    denied, _ = _intent(db, cipher)
    _decide(db, denied, "deny")
    deferred, _ = _intent(db, cipher)
    _decide(db, deferred, "defer", next_eligible_at=LATER + timedelta(hours=1))
    cancelled, _ = _intent(db, cipher)
    operator_actions.record_operator_action(
        db,
        intent_id=cancelled,
        action="cancel",
        operator="op",
        reason="r",
        outcome="accepted",
        at=T0,
    )
    scheduled, _ = _intent(db, cipher, send_at=LATER + timedelta(days=1))
    for intent_id in (denied, deferred, cancelled, scheduled):
        assert _found(db, f"intent:{intent_id}") == []


def test_a_deferral_whose_next_eligible_time_passed_long_ago_is_trouble(db, cipher):
    intent_id, _ = _intent(db, cipher)
    eligible = T0 + timedelta(minutes=30)
    _decide(db, intent_id, "defer", next_eligible_at=eligible)
    row = _only(db, f"intent:{intent_id}", "intent_without_attempt")
    assert row.since == eligible and row.detail["last_decision"] == "defer"


def test_a_prepared_attempt_without_a_remote_id_is_found(db, cipher):
    intent_id, key = _intent(db, cipher)
    attempt = make_attempt(db, cipher, intent_id, key)
    row = _only(db, f"attempt:{attempt.id}", "prepared_without_remote_id")
    assert row.detail["token"] == attempt.token and row.since == attempt.prepared_at
    assert _found(db, f"intent:{intent_id}") == []  # it has an attempt


def test_a_submitted_attempt_not_heard_from_past_its_check_is_found(db, cipher):
    intent_id, key = _intent(db, cipher)
    attempt = make_attempt(db, cipher, intent_id, key)
    _observe(db, attempt.token, AttemptState.SUBMITTED, remote_id=unique("SM"), source="send")
    heard = T0 + timedelta(minutes=10)
    _observe(db, attempt.token, AttemptState.SENT, at=heard)
    row = _only(db, f"attempt:{attempt.id}", "submitted_past_check")
    assert row.since == heard and row.detail["state"] == "sent"
    assert _found(db, f"attempt:{attempt.id}", submitted_check_after=timedelta(hours=3)) == []


def test_an_email_sent_is_final_and_not_past_any_check(db, cipher):
    intent_id, key = _intent(db, cipher)
    attempt = make_attempt(db, cipher, intent_id, key, channel="email", destination="a@b.org")
    db.execute(update(Attempt).where(Attempt.id == attempt.id).values(message_id="<m@h>"))
    _observe(db, attempt.token, AttemptState.SENT, source="send")
    assert _found(db, f"attempt:{attempt.id}") == []


def test_conflicting_terminal_observations_are_found(db, cipher):
    intent_id, key = _intent(db, cipher)
    attempt = make_attempt(db, cipher, intent_id, key)
    _observe(db, attempt.token, AttemptState.SUBMITTED, remote_id=unique("SM"), source="send")
    _observe(db, attempt.token, AttemptState.UNDELIVERED)
    conflict = _observe(db, attempt.token, AttemptState.DELIVERED)
    assert conflict.verdict == "conflict"
    row = _only(db, f"observation:{conflict.observation_id}", "conflicting_observation")
    assert row.detail["state"] == "undelivered" and row.detail["observed_status"] == "delivered"


def test_a_delivery_receipt_after_a_cancel_is_found(db, cipher):
    intent_id, key = _intent(db, cipher)
    attempt = make_attempt(db, cipher, intent_id, key)
    _observe(db, attempt.token, AttemptState.SUBMITTED, remote_id=unique("SM"), source="send")
    cancelled_at = T0 + timedelta(minutes=1)
    operator_actions.record_operator_action(
        db,
        intent_id=intent_id,
        action="cancel",
        operator="op",
        reason="r",
        outcome="accepted",
        at=cancelled_at,
    )
    delivered_at = T0 + timedelta(minutes=3)
    _observe(db, attempt.token, AttemptState.DELIVERED, at=delivered_at)
    rows = _found(db, f"attempt:{attempt.id}")
    assert [r.kind for r in rows] == ["cancelled_then_delivered"]
    assert rows[0].since == delivered_at and rows[0].detail["cancelled_at"] is not None


def test_a_delivery_before_the_cancel_is_not_a_race(db, cipher):
    intent_id, key = _intent(db, cipher)
    attempt = make_attempt(db, cipher, intent_id, key)
    _observe(db, attempt.token, AttemptState.SUBMITTED, remote_id=unique("SM"), source="send")
    _observe(db, attempt.token, AttemptState.DELIVERED, at=T0)
    operator_actions.record_operator_action(
        db,
        intent_id=intent_id,
        action="cancel",
        operator="op",
        reason="r",
        outcome="accepted",
        at=T0 + timedelta(minutes=1),
    )
    assert _found(db, f"attempt:{attempt.id}") == []


def test_an_unknown_outcome_older_than_the_threshold_is_found(db, cipher):
    intent_id, key = _intent(db, cipher)
    attempt = make_attempt(db, cipher, intent_id, key)
    _observe(db, attempt.token, AttemptState.SUBMITTED, remote_id=unique("SM"), source="send")
    became = T0 + timedelta(minutes=20)
    _observe(db, attempt.token, AttemptState.UNKNOWN, at=became, source="horizon")
    row = _only(db, f"attempt:{attempt.id}", "unknown_outcome")
    assert row.since == became
    assert _found(db, f"attempt:{attempt.id}", unknown_older_than=timedelta(hours=2)) == []


def test_an_orphan_observation_is_found(db):
    result = observations.record_observation(
        db,
        ObservationFacts(
            source="webhook",
            raw_status="delivered",
            normalized=AttemptState.DELIVERED,
            observed_at=T0,
            dedupe_key=unique("orphan"),
            remote_id=unique("SM"),
        ),
    )
    assert result.verdict == "orphan"
    row = _only(db, f"observation:{result.observation_id}", "orphan_observation")
    assert row.intent_id is None and row.detail["attempt_now_known"] is None


def test_recording_review_items_twice_inserts_each_once(db, cipher):
    intent_id, key = _intent(db, cipher)
    attempt = make_attempt(db, cipher, intent_id, key)
    _observe(db, attempt.token, AttemptState.SUBMITTED, remote_id=unique("SM"), source="send")
    _observe(db, attempt.token, AttemptState.UNKNOWN, source="horizon")
    other, _ = _intent(db, cipher)
    rows = reconcile.find(db, now=LATER, limit=100_000)
    mine = [r for r in rows if r.intent_id in (intent_id, other)]
    assert {r.kind for r in mine} == {"unknown_outcome", "intent_without_attempt"}

    first = review_items.record_review_items(db, rows, LATER)
    second = review_items.record_review_items(db, reconcile.find(db, now=LATER), LATER)
    assert first >= len(mine) and second == 0
    for row in mine:
        assert (
            db.scalar(
                select(func.count())
                .select_from(ReviewItem)
                .where(ReviewItem.kind == row.kind, ReviewItem.subject == row.subject)
            )
            == 1
        )
    assert review_items.record_review_items(db, [], LATER) == 0


def test_find_refuses_a_naive_time(db):
    with pytest.raises(ValueError, match="timezone"):
        reconcile.find(db, now=datetime.now())
