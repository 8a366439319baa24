"""Email provider events read through one table; complaints suppress one category only;
a bounce after delivered is evidence, never a regression or a conflict."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain import email_events
from domain.email_events import SuppressionEffect
from domain.policy import Outcome, Policy, PolicyRequest, Suppression, evaluate, fallback_for
from domain.states import AttemptState, Verdict, apply
from tests.domain.test_policy import consents_for

NOW = datetime(2026, 12, 15, 17, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("event", "bounce_type", "state", "effect"),
    [
        ("processed", None, AttemptState.SUBMITTED, SuppressionEffect.NONE),
        ("deferred", None, AttemptState.SUBMITTED, SuppressionEffect.NONE),
        ("delivered", None, AttemptState.DELIVERED, SuppressionEffect.NONE),
        ("bounce", "bounce", AttemptState.UNDELIVERED, SuppressionEffect.SUPPRESS_CHANNEL),
        ("bounce", None, AttemptState.UNDELIVERED, SuppressionEffect.SUPPRESS_CHANNEL),
        ("bounce", "blocked", None, SuppressionEffect.COUNT_BLOCK),
        ("dropped", None, AttemptState.UNDELIVERED, SuppressionEffect.NONE),
        ("open", None, None, SuppressionEffect.NONE),
        ("click", None, None, SuppressionEffect.NONE),
        ("spamreport", None, None, SuppressionEffect.SUPPRESS_CATEGORY),
        ("unsubscribe", None, None, SuppressionEffect.SUPPRESS_CATEGORY),
        ("group_unsubscribe", None, None, SuppressionEffect.SUPPRESS_CATEGORY),
        ("group_resubscribe", None, None, SuppressionEffect.LIFT_CATEGORY),
    ],
)
def test_each_event_word_means_one_state_and_one_effect(event, bounce_type, state, effect):
    meaning = email_events.meaning(event, bounce_type=bounce_type)
    assert (meaning.state, meaning.effect) == (state, effect)


def test_an_unknown_event_word_raises():
    with pytest.raises(ValueError, match="unknown email event"):
        email_events.meaning("teleported")


def test_opens_and_clicks_never_move_a_state():
    for word in email_events.DIAGNOSTIC_WORDS:
        assert email_events.meaning(word).state is None


def test_a_bounce_after_delivered_is_stale_evidence_not_a_conflict():
    bounce = email_events.meaning("bounce").state
    assert bounce is not None
    email = apply(AttemptState.DELIVERED, bounce, evidence_after_delivered=True)
    assert (email.verdict, email.state) == (Verdict.STALE, AttemptState.DELIVERED)
    # Without the flag (an SMS receipt) the same pair stays a conflict for review.
    sms = apply(AttemptState.DELIVERED, bounce)
    assert (sms.verdict, sms.state) == (Verdict.CONFLICT, AttemptState.DELIVERED)
    # A bounce before delivered applies as the end of the attempt.
    assert apply(AttemptState.SUBMITTED, bounce, evidence_after_delivered=True).state == bounce


def test_delivered_after_a_bounce_is_still_a_conflict():
    transition = apply(
        AttemptState.UNDELIVERED, AttemptState.DELIVERED, evidence_after_delivered=True
    )
    assert transition.verdict == Verdict.CONFLICT


def test_blocks_suppress_only_at_the_threshold():
    assert not email_events.blocks_suppress(2, 3)
    assert email_events.blocks_suppress(3, 3)
    assert not email_events.blocks_suppress(100, 0)


def test_a_complaint_denies_its_category_only(default_policy: Policy):
    complaint = Suppression(
        channel="email", reason="complaint", at=NOW - timedelta(hours=1), category="operational"
    )
    operational = PolicyRequest("email", "operational", "US", "America/New_York")
    transactional = PolicyRequest("email", "transactional", "US", "America/New_York")
    consents = consents_for("service", "marketing")
    denied = evaluate(
        default_policy, operational, consents=consents, suppressions=[complaint], recent=[], now=NOW
    )
    assert (denied.outcome, denied.rule) == (Outcome.DENY, "suppression.complaint")
    assert "for operational messages" in denied.reason
    allowed = evaluate(
        default_policy,
        transactional,
        consents=consents,
        suppressions=[complaint],
        recent=[],
        now=NOW,
    )
    assert allowed.outcome == Outcome.ALLOW


def test_a_hard_bounce_denies_every_category(default_policy: Policy):
    bounce = Suppression(channel="email", reason="hard_bounce", at=NOW - timedelta(hours=1))
    for category in ("transactional", "operational", "promotional"):
        request = PolicyRequest("email", category, "US", "America/New_York")
        decision = evaluate(
            default_policy,
            request,
            consents=consents_for("service", "marketing"),
            suppressions=[bounce],
            recent=[],
            now=NOW,
        )
        assert (decision.outcome, decision.rule) == (Outcome.DENY, "suppression.hard_bounce")


def test_the_email_event_timings_have_defaults_a_policy_may_override(default_policy: Policy):
    rule = fallback_for(default_policy, "US", "transactional")
    assert rule.email_events_horizon_seconds > 0
    assert rule.email_blocks_to_suppress >= 0
