"""The refusals of an operator's resend and settlement (domain.operator_requests), judged
from what a run holds: states, error codes and the settlement that stands, never prose."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from domain.operator_requests import Latest, resend_refusal, settle_refusal
from domain.settlement import (
    Evidence,
    SettlementClaim,
    SettlementOutcome,
    SettlementRule,
    Standing,
)
from domain.states import AttemptState

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
LOST = SettlementRule("lost", SettlementOutcome.NOT_DELIVERED, Evidence.REFERENCE, True)


def resend(latest: Latest | None, **kw: object) -> str | None:
    args: dict[str, object] = {"cancelled": False, "in_flight": False, "standing": None}
    args.update(kw)
    return resend_refusal("sms", latest, **args)  # type: ignore[arg-type]


def test_a_retryable_failure_may_be_resent() -> None:
    assert resend(Latest("k:sms:1", "failed", "20429")) is None


def test_a_resend_is_refused_on_a_cancelled_intent_an_unknown_channel_or_no_attempt() -> None:
    failed = Latest("k:sms:1", "failed")
    assert resend(failed, cancelled=True) == "the intent is cancelled"
    assert "pigeon" in (
        resend_refusal("pigeon", failed, cancelled=False, in_flight=False, standing=None) or ""
    )
    assert resend(None) == "no finished sms attempt to resend"
    assert resend(failed, in_flight=True) == "a sms attempt is still in flight"


def test_a_permanent_failure_is_refused_unless_a_settlement_allows_a_resend() -> None:
    bounced = Latest("k:sms:1", "failed", "30005")
    refused = resend(bounced)
    assert refused is not None and "30005 is permanent" in refused
    assert resend(bounced, standing=Standing("lost", True)) is None
    assert resend(bounced, standing=Standing("gone", False)) == (
        "settled under rule gone, which does not allow a resend"
    )


def test_an_unknown_attempt_needs_a_settlement_and_a_channel_end_has_nothing_to_resend() -> None:
    assert "settle it first" in (resend(Latest("k:sms:1", "unknown")) or "")
    assert resend(Latest("k:sms:1", "delivered")) == (
        "the attempt is delivered; a resend needs a retryable failure or a settlement"
    )
    assert resend(Latest("k:sms:1", "expired")) == (
        "latest sms attempt is expired; nothing to resend"
    )


def settle(claim: SettlementClaim, **kw: object) -> str | None:
    args: dict[str, object] = {
        "token": "k:sms:1",
        "offered": [LOST],
        "current": AttemptState.UNKNOWN,
        "current_by_operator": False,
        "busy": False,
        "now": NOW,
        "window_until": NOW + timedelta(hours=1),
    }
    args.update(kw)
    return settle_refusal("sms", claim, **args)  # type: ignore[arg-type]


def test_a_settlement_under_an_offered_rule_with_its_evidence_is_accepted() -> None:
    assert settle(SettlementClaim("lost", "carrier says gone", "T-1")) is None


def test_a_settlement_is_refused_before_the_rules_are_asked() -> None:
    claim = SettlementClaim("lost", "carrier says gone", "T-1")
    assert settle(claim, window_until=None) == "the intent is not waiting for a settlement"
    assert settle(claim, busy=True) == (
        "another settlement of this intent is being recorded; try again"
    )
    assert settle(claim, token=None) == "no sms attempt to settle"
    assert settle(SettlementClaim("other", "x", "T-1")) == (
        "no settlement rule 'other' offered for this attempt (lost)"
    )
    assert settle(claim, offered=[]) == (
        "no settlement rule 'lost' offered for this attempt (none)"
    )


def test_a_settlement_is_judged_by_the_rule_it_names() -> None:
    assert settle(SettlementClaim("lost", "gone")) == (
        "rule lost needs a reference (e.g. a carrier ticket)"
    )
    assert "closed" in (
        settle(SettlementClaim("lost", "gone", "T-1"), window_until=NOW - timedelta(1)) or ""
    )
