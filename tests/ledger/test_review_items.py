"""Review items an operator opens on demand, in the real ledger: the kind follows the
attempt's state, the principal is recorded (action and audit row), an open item refuses a
second one, a closed one is reopened with its history, a final outcome and a viewer are
refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from domain.principals import Principal, Role
from domain.states import AttemptState
from ledger import observations, reconcile, review_items
from ledger import repository as repo
from ledger.errors import NotAllowed, NotFound
from ledger.models import AuditEvent, OperatorAction, ReviewItem
from ledger.observations import ObservationFacts
from tests.conftest import unique
from tests.ledger.conftest import fields, make_attempt

pytestmark = pytest.mark.ledger

NOW = datetime.now(UTC) + timedelta(hours=1)
OPERATOR = Principal("ops-7", Role.OPERATOR)


def _attempt(db, cipher, *states: AttemptState):  # type: ignore[no-untyped-def]
    key = unique("class-opening:c-9081")
    intent_id = repo.record_intent(db, fields(db, cipher, key)).intent_id
    attempt = make_attempt(db, cipher, intent_id, key)
    for n, state in enumerate(states):
        observations.record_observation(
            db,
            ObservationFacts(
                source="horizon" if state == AttemptState.UNKNOWN else "webhook",
                raw_status=state.value,
                normalized=state,
                observed_at=NOW - timedelta(minutes=10 - n),
                dedupe_key=unique("obs"),
            ),
            token=attempt.token,
        )
    return intent_id, attempt


def _open(db, intent_id, *, by=OPERATOR, reason="recipient says nothing came", at=NOW):  # type: ignore[no-untyped-def]
    return review_items.open_review_item(
        db, intent_id=intent_id, channel="sms", reason=reason, by=by, at=at
    )


def _items(db, attempt_id):  # type: ignore[no-untyped-def]
    return list(
        db.execute(
            select(ReviewItem).where(ReviewItem.subject == f"attempt:{attempt_id}")
        ).scalars()
    )


def _actions(db, intent_id):  # type: ignore[no-untyped-def]
    return list(
        db.execute(
            select(OperatorAction)
            .where(OperatorAction.intent_id == intent_id)
            .order_by(OperatorAction.id)
        ).scalars()
    )


def test_an_operator_opens_an_unknown_outcome_item_at_once_recorded_under_their_name(db, cipher):
    intent_id, attempt = _attempt(db, cipher, AttemptState.SUBMITTED, AttemptState.UNKNOWN)
    opened = _open(db, intent_id)
    assert opened.refused == "" and not opened.reopened
    [item] = _items(db, attempt.id)
    assert (item.id, item.kind, item.resolved_at) == (
        opened.item_id,
        review_items.UNKNOWN_OUTCOME,
        None,
    )
    assert item.detail is not None
    assert (item.detail["opened_by"], item.detail["filed_by"], item.detail["intent_id"]) == (
        "ops-7",
        "operator",
        intent_id,
    )
    assert item.event_type is not None  # joins its set's exposure like the sweep's items
    assert item.intent_id == intent_id  # the intent page finds it by this column
    [action] = _actions(db, intent_id)
    assert (action.action, action.outcome, action.operator, action.operator_role) == (
        "open-review",
        "accepted",
        "ops-7",
        "operator",
    )
    assert action.reason == "recipient says nothing came"
    assert action.detail is not None and action.detail["item"] == item.id
    audit = db.execute(
        select(AuditEvent).where(AuditEvent.subject == f"review_item:{item.id}")
    ).scalar_one()
    assert (audit.action, audit.actor, audit.actor_role) == (
        "review_item.opened",
        "ops-7",
        "operator",
    )
    # The sweep finds the same attempt later and files nothing new: one item per subject.
    review_items.record_review_items(db, reconcile.find(db, now=NOW + timedelta(hours=2)), NOW)
    assert len(_items(db, attempt.id)) == 1


def test_a_later_observation_that_settles_the_attempt_closes_it_in_the_sweep(db, cipher):
    intent_id, attempt = _attempt(db, cipher, AttemptState.SUBMITTED)
    opened = _open(db, intent_id)
    observations.record_observation(
        db,
        ObservationFacts(
            source="webhook",
            raw_status="delivered",
            normalized=AttemptState.DELIVERED,
            observed_at=NOW,
            dedupe_key=unique("obs"),
        ),
        token=attempt.token,
    )
    closed = dict(review_items.close_settled_items(db, at=NOW))
    assert "the attempt is now delivered" in closed[opened.item_id]  # type: ignore[index]


def test_a_second_request_while_the_item_is_open_is_refused_and_recorded(db, cipher):
    intent_id, attempt = _attempt(db, cipher, AttemptState.SUBMITTED, AttemptState.UNKNOWN)
    first = _open(db, intent_id)
    again = _open(db, intent_id, reason="twice")
    assert again.item_id is None
    assert again.refused == (
        f"review item #{first.item_id} (unknown_outcome) is already open for the sms attempt #1"
    )
    assert len(_items(db, attempt.id)) == 1
    assert [(a.outcome, (a.detail or {}).get("why")) for a in _actions(db, intent_id)] == [
        ("accepted", None),
        ("refused", again.refused),
    ]


def test_a_closed_item_is_reopened_with_its_earlier_resolution_kept(db, cipher):
    intent_id, attempt = _attempt(db, cipher, AttemptState.SUBMITTED, AttemptState.UNKNOWN)
    first = _open(db, intent_id)
    review_items.close_items(db, attempt_id=attempt.id, at=NOW, by="ana", note="no action: known")
    later = NOW + timedelta(minutes=5)
    again = _open(db, intent_id, reason="the recipient called again", at=later)
    assert (again.refused, again.item_id, again.reopened) == ("", first.item_id, True)
    [item] = _items(db, attempt.id)
    db.refresh(item)
    assert (item.resolved_at, item.resolved_by, item.resolution_note) == (None, None, None)
    assert item.found_at == later
    assert item.detail is not None
    [earlier] = item.detail["history"]
    assert (earlier["resolved_by"], earlier["resolution_note"]) == ("ana", "no action: known")
    assert item.detail["reason"] == "the recipient called again"
    audits = db.execute(
        select(AuditEvent.action).where(AuditEvent.subject == f"review_item:{item.id}")
    ).scalars()
    assert list(audits) == ["review_item.opened", "review_item.reopened"]


def test_the_kind_follows_the_attempts_state_as_the_sweep_files_it(db, cipher):
    intent_id, attempt = _attempt(db, cipher, AttemptState.SUBMITTED)
    opened = _open(db, intent_id)
    assert opened.kind == review_items.SUBMITTED_PAST_CHECK
    assert _items(db, attempt.id)[0].kind == review_items.SUBMITTED_PAST_CHECK
    prepared_intent, _ = _attempt(db, cipher)
    assert _open(db, prepared_intent).kind == review_items.PREPARED_WITHOUT_REMOTE_ID
    # An SMS `sent` still waits for its receipt; an email `sent` is final (SMTP says no more).
    assert review_items.kind_for("sms", "sent") == review_items.SUBMITTED_PAST_CHECK
    assert review_items.kind_for("email", "sent") is None


def test_a_final_outcome_or_no_attempt_is_refused_in_words(db, cipher):
    intent_id, attempt = _attempt(db, cipher, AttemptState.SUBMITTED, AttemptState.DELIVERED)
    refused = _open(db, intent_id)
    assert refused.refused == (
        "the sms attempt #1 is delivered: its outcome is final, so no review item of the "
        "reconciliation sets applies to it"
    )
    assert _items(db, attempt.id) == []
    [action] = _actions(db, intent_id)
    assert (action.action, action.outcome) == ("open-review", "refused")
    email = review_items.open_review_item(
        db, intent_id=intent_id, channel="email", reason="r", by=OPERATOR, at=NOW
    )
    assert email.refused == "the intent has no email attempt: there is nothing to review"


@pytest.mark.parametrize("role", [Role.VIEWER, Role.APP])
def test_a_viewer_or_an_app_cannot_open_one_and_nothing_is_written(db, cipher, role):
    intent_id, attempt = _attempt(db, cipher, AttemptState.SUBMITTED, AttemptState.UNKNOWN)
    with pytest.raises(NotAllowed, match="needs the operator role"):
        _open(db, intent_id, by=Principal("vic", role))
    assert _items(db, attempt.id) == [] and _actions(db, intent_id) == []


def test_no_such_intent_is_not_found(db):
    with pytest.raises(NotFound):
        _open(db, "no-such-intent")
