"""Settling ambiguity: rules as policy, the transition's one exception, resend after a
settlement, the proof of the acting principal, and a stateful property test."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from domain import proof
from domain.policy import PolicyError, load_policy
from domain.settlement import (
    Evidence,
    SettlementClaim,
    SettlementOutcome,
    SettlementPolicy,
    SettlementRule,
    Standing,
    refusal,
    resend_refusal,
)
from domain.states import TERMINAL, AttemptState, Verdict, apply

S = AttemptState
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
POLICIES = Path(__file__).resolve().parents[2] / "policies"

RESEND = SettlementRule("lost", SettlementOutcome.NOT_DELIVERED, Evidence.REFERENCE, True)
NO_RESEND = SettlementRule("gone", SettlementOutcome.UNDELIVERABLE, Evidence.REFERENCE, False)
LOOKUP = SettlementRule("looked", SettlementOutcome.NOT_DELIVERED, Evidence.PROVIDER_LOOKUP, True)
RECEIVED = SettlementRule("said-so", SettlementOutcome.DELIVERED, Evidence.RECIPIENT_WORD, False)
POLICY = SettlementPolicy(600, (RESEND, NO_RESEND, LOOKUP, RECEIVED))


def judge(claim: SettlementClaim, **kw: object) -> str | None:
    args: dict[str, object] = dict(
        current=S.UNKNOWN,
        current_by_operator=False,
        provider_has_lookup=True,
        now=NOW,
        window_until=NOW + timedelta(minutes=5),
    )
    args.update(kw)
    return refusal(POLICY, claim, **args)  # type: ignore[arg-type]


def test_both_packaged_policies_ship_settlement_rules_for_every_outcome() -> None:
    for name in ("default", "demo"):
        pol = load_policy((POLICIES / f"{name}.toml").read_text())
        outcomes = {r.outcome for r in pol.settlement.rules}
        assert outcomes == set(SettlementOutcome)
        assert any(r.resend_allowed for r in pol.settlement.rules)
        assert any(r.evidence == Evidence.PROVIDER_LOOKUP for r in pol.settlement.rules)


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ('outcome = "lost"\nevidence = "reference"\nresend_allowed = true', "outcome"),
        ('outcome = "not_delivered"\nevidence = "hunch"\nresend_allowed = true', "evidence"),
        ('outcome = "not_delivered"\nevidence = "reference"\nresend_allowed = 1', "resend_allowed"),
        ('outcome = "delivered"\nevidence = "reference"\nresend_allowed = true', "resend_allowed"),
        ('outcome = "delivered"\nevidence = "reference"\nresend_allowed = false\nx = 1', "'x'"),
    ],
)
def test_a_malformed_settlement_rule_is_refused_naming_its_field(table: str, field: str) -> None:
    text = (POLICIES / "demo.toml").read_text().split("[settlement]")[0]
    text += f"[settlement]\nwindow_seconds = 60\n[settlement.rules.r1]\n{table}\n"
    with pytest.raises(PolicyError, match=f"settlement.rules.r1.*{field}"):
        load_policy(text)


def test_an_operator_settlement_settles_unknown() -> None:
    assert apply(S.UNKNOWN, S.UNDELIVERED, by_operator=True).verdict == Verdict.SETTLES_UNKNOWN


def test_an_operator_never_overrides_the_providers_terminal() -> None:
    t = apply(S.DELIVERED, S.UNDELIVERED, by_operator=True)
    assert (t.verdict, t.state) == (Verdict.CONFLICT, S.DELIVERED)
    assert not t.changed


def test_an_operator_never_decides_an_attempt_the_provider_is_still_reporting_on() -> None:
    assert apply(S.SENT, S.DELIVERED, by_operator=True).verdict == Verdict.STALE


def test_a_superseding_settlement_corrects_an_earlier_one() -> None:
    t = apply(S.UNDELIVERED, S.DELIVERED, by_operator=True, current_by_operator=True)
    assert (t.verdict, t.state) == (Verdict.SUPERSEDES, S.DELIVERED)


def test_a_later_differing_provider_terminal_replaces_a_settlement_and_is_flagged() -> None:
    t = apply(S.UNDELIVERED, S.DELIVERED, current_by_operator=True)
    assert (t.verdict, t.state) == (Verdict.REPLACES_SETTLEMENT, S.DELIVERED)
    assert t.changed and t.conflict


def test_the_provider_agreeing_with_a_settlement_changes_nothing() -> None:
    assert apply(S.UNDELIVERED, S.UNDELIVERED, current_by_operator=True).verdict == Verdict.STALE
    assert apply(S.UNDELIVERED, S.SENT, current_by_operator=True).verdict == Verdict.STALE


def test_an_operator_cannot_settle_to_a_non_terminal_state() -> None:
    with pytest.raises(ValueError, match="operator settles"):
        apply(S.UNKNOWN, S.SENT, by_operator=True)


def test_a_settlement_is_judged_by_its_rule() -> None:
    assert judge(SettlementClaim("lost", "ticket says lost", reference="T-1")) is None
    assert "no settlement rule 'nope'" in (judge(SettlementClaim("nope", "r")) or "")
    assert "needs a reference" in (judge(SettlementClaim("lost", "r")) or "")
    assert "a reason" in (judge(SettlementClaim("lost", " ", reference="T-1")) or "")
    assert "lookup first" in (judge(SettlementClaim("looked", "r")) or "")
    stale = SettlementClaim("looked", "r", lookup_at=NOW - timedelta(hours=1))
    assert "last 30 minutes" in (judge(stale) or "")
    fresh = SettlementClaim("looked", "r", lookup_at=NOW - timedelta(minutes=1))
    assert judge(fresh) is None
    assert "has none" in (judge(fresh, provider_has_lookup=False) or "")
    word = judge(SettlementClaim("said-so", "r"))
    assert word is not None and "recipient gave their word" in word


def test_a_settlement_after_the_window_is_refused_with_the_reason() -> None:
    late = judge(SettlementClaim("lost", "r", reference="T"), window_until=NOW)
    assert late is not None and "expired unsettled" in late
    idle = judge(SettlementClaim("lost", "r", reference="T"), window_until=None)
    assert idle is not None and "not waiting" in idle


def test_only_an_unknown_or_an_operators_settlement_can_be_settled() -> None:
    claim = SettlementClaim("lost", "r", reference="T")
    assert "not unknown" in (judge(claim, current=S.DELIVERED) or "")
    assert (
        judge(
            SettlementClaim("said-so", "r", reference="call"),
            current=S.UNDELIVERED,
            current_by_operator=True,
        )
        is None
    )
    again = judge(claim, current=S.UNDELIVERED, current_by_operator=True)
    assert again is not None and "already settled" in again


def test_resend_follows_a_settlement_iff_its_rule_allows_whatever_the_state() -> None:
    assert resend_refusal(S.UNKNOWN, None) is not None
    assert resend_refusal(S.UNDELIVERED, Standing("lost", True)) is None
    assert resend_refusal(S.DELIVERED, Standing("odd", True)) is None
    refused = resend_refusal(S.FAILED, Standing("gone", False))
    assert refused == "settled under rule gone, which does not allow a resend"
    assert resend_refusal(S.UNDELIVERED, None) is None  # the provider's retryable failure
    assert resend_refusal(S.FAILED, None, permanent_error="permanent") == "permanent"


class SettlementMachine(RuleBasedStateMachine):
    """An SMS attempt that the carrier may or may not report on, an operator who settles
    under any rule, and a resend asked for at any moment."""

    def __init__(self) -> None:
        super().__init__()
        self.state = S.SUBMITTED
        self.standing: Standing | None = None
        self.was_unknown = False
        self.provider_terminal: AttemptState | None = None
        self.lookup_at: datetime | None = None

    def _provider(self, observed: AttemptState) -> None:
        before = self.state
        t = apply(self.state, observed, current_by_operator=self.standing is not None)
        if t.changed:
            self.state = t.state
            if self.standing is not None:
                assert t.verdict == Verdict.REPLACES_SETTLEMENT and t.conflict
                self.standing = None
        if observed in TERMINAL and observed != S.CANCELLED and t.changed:
            self.provider_terminal = observed
        if self.state == S.UNKNOWN:
            self.was_unknown = True
        if t.verdict == Verdict.REPLACES_SETTLEMENT:
            assert before != observed and self.state == observed

    @rule(observed=st.sampled_from([S.SENT, S.DELIVERED, S.UNDELIVERED, S.FAILED]))
    def receipt(self, observed: AttemptState) -> None:
        self._provider(observed)

    @rule(observed=st.sampled_from([S.SUBMITTED, S.SENT, S.DELIVERED, S.UNDELIVERED]))
    def poll(self, observed: AttemptState) -> None:
        self._provider(observed)

    @rule()
    def horizon(self) -> None:
        self._provider(S.UNKNOWN)

    @rule()
    def lookup(self) -> None:
        self.lookup_at = NOW

    @rule(
        chosen=st.sampled_from(POLICY.rules),
        reference=st.sampled_from(["", "T-9"]),
        open_window=st.booleans(),
    )
    def settle(self, chosen: SettlementRule, reference: str, open_window: bool) -> None:
        claim = SettlementClaim(chosen.name, "the operator's reason", reference, self.lookup_at)
        why = refusal(
            POLICY,
            claim,
            current=self.state,
            current_by_operator=self.standing is not None,
            provider_has_lookup=True,
            now=NOW,
            window_until=NOW + timedelta(minutes=1) if open_window else NOW,
        )
        if why is not None:
            return
        t = apply(
            self.state,
            chosen.outcome.state,
            by_operator=True,
            current_by_operator=self.standing is not None,
        )
        assert t.changed, "a settlement the rules accept must apply"
        self.state = t.state
        self.standing = Standing(chosen.name, chosen.resend_allowed)

    @invariant()
    def no_resend_before_an_approved_settlement(self) -> None:
        if resend_refusal(self.state, self.standing) is not None:
            return
        if self.standing is not None:
            assert self.standing.resend_allowed
            return
        # No settlement stands: only the provider's own retryable failure opens a resend.
        assert self.state in (S.FAILED, S.UNDELIVERED)
        assert self.provider_terminal == self.state

    @invariant()
    def a_standing_settlement_is_a_terminal_the_provider_has_not_contradicted(self) -> None:
        if self.standing is not None:
            assert self.state in TERMINAL
            assert self.was_unknown

    @invariant()
    def unknown_alone_never_allows_a_resend(self) -> None:
        if self.state == S.UNKNOWN:
            assert resend_refusal(self.state, self.standing) is not None


TestSettlementMachine = SettlementMachine.TestCase
TestSettlementMachine.settings = settings(max_examples=300, stateful_step_count=30, deadline=None)


def test_a_proof_holds_only_for_its_claim_its_key_and_its_time() -> None:
    key = b"k" * 32
    claim = proof.ActingClaim("settle", "i-1", "ops-1", "operator", "lost", "tok|lost")
    made = proof.sign(key, claim, now=NOW)
    assert proof.verify(key, claim, made, now=NOW + timedelta(minutes=1))
    assert not proof.verify(b"x" * 32, claim, made, now=NOW)
    assert not proof.verify(key, claim, made, now=NOW + timedelta(hours=2))
    forged = proof.ActingClaim("settle", "i-1", "root", "admin", "lost", "tok|lost")
    assert not proof.verify(key, forged, made, now=NOW)
    assert not proof.verify(key, claim, "", now=NOW)
    assert not proof.verify(key, claim, "v1:abc:def", now=NOW)
