"""The attempt state lattice: examples, a stateful model test and an ordering property."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from domain.states import (
    RANK,
    RETRYABLE_FAILURES,
    TERMINAL,
    AttemptState,
    Transition,
    Verdict,
    apply,
    is_terminal,
    normalize_provider_status,
)

S = AttemptState
REAL = [s for s in AttemptState if s != S.UNKNOWN]
NON_TERMINAL_REAL = [S.PREPARED, S.SUBMITTED, S.SENT]


def test_a_receipt_moves_an_attempt_forward() -> None:
    assert apply(S.SUBMITTED, S.DELIVERED) == Transition(Verdict.APPLIED, S.DELIVERED)


def test_a_stale_poll_never_moves_an_attempt_backward() -> None:
    result = apply(S.SENT, S.SUBMITTED)
    assert result == Transition(Verdict.STALE, S.SENT)
    assert not result.changed


def test_a_duplicate_observation_is_stale() -> None:
    assert apply(S.DELIVERED, S.DELIVERED).verdict == Verdict.STALE


def test_a_late_unknown_never_replaces_delivered() -> None:
    assert apply(S.DELIVERED, S.UNKNOWN) == Transition(Verdict.STALE, S.DELIVERED)


def test_the_horizon_verdict_applies_to_an_unresolved_attempt() -> None:
    assert apply(S.SENT, S.UNKNOWN) == Transition(Verdict.APPLIED, S.UNKNOWN)
    assert apply(S.PREPARED, S.UNKNOWN).state == S.UNKNOWN


def test_a_late_receipt_settles_unknown() -> None:
    result = apply(S.UNKNOWN, S.DELIVERED)
    assert result == Transition(Verdict.SETTLES_UNKNOWN, S.DELIVERED)
    assert result.changed


def test_a_late_non_terminal_observation_leaves_unknown_a_question() -> None:
    assert apply(S.UNKNOWN, S.SENT) == Transition(Verdict.STALE, S.UNKNOWN)
    assert apply(S.UNKNOWN, S.SUBMITTED) == Transition(Verdict.STALE, S.UNKNOWN)


def test_prepared_never_settles_unknown() -> None:
    assert apply(S.UNKNOWN, S.PREPARED) == Transition(Verdict.STALE, S.UNKNOWN)


def test_a_different_terminal_is_a_conflict_and_the_first_stands() -> None:
    assert apply(S.DELIVERED, S.FAILED) == Transition(Verdict.CONFLICT, S.DELIVERED)
    assert apply(S.UNDELIVERED, S.DELIVERED) == Transition(Verdict.CONFLICT, S.UNDELIVERED)


def test_terminal_and_retryable_sets_are_consistent() -> None:
    assert RETRYABLE_FAILURES <= TERMINAL
    assert all(is_terminal(s) for s in TERMINAL)
    assert not is_terminal(S.UNKNOWN)
    assert S.UNKNOWN not in RANK


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("queued", S.SUBMITTED),
        (" Accepted ", S.SUBMITTED),
        ("sent", S.SENT),
        ("DELIVERED", S.DELIVERED),
        ("read", S.DELIVERED),
        ("undelivered", S.UNDELIVERED),
        ("partially_delivered", S.UNDELIVERED),
        ("failed", S.FAILED),
        ("canceled", S.CANCELLED),
        ("received", None),
    ],
)
def test_every_provider_status_word_maps_to_a_state(raw: str, expected: S | None) -> None:
    assert normalize_provider_status(raw) == expected


def test_an_unknown_provider_status_word_raises() -> None:
    with pytest.raises(ValueError, match="unknown provider status"):
        normalize_provider_status("teleported")


class AttemptModel(RuleBasedStateMachine):
    """Drives `apply` with random observations against a simple, independent model.

    The model keeps the first terminal seen, the best non-terminal seen and whether the
    horizon verdict is pending; the real state is just whatever `apply` returned.
    """

    def __init__(self) -> None:
        super().__init__()
        self.state = S.PREPARED
        self.first_terminal: S | None = None
        self.best = S.PREPARED
        self.unknown = False
        self.last: S | None = None

    def expected(self) -> S:
        if self.unknown:
            return S.UNKNOWN
        return self.first_terminal or self.best

    def _observe(self, observed: S) -> None:
        before = self.state
        result = apply(before, observed)
        # Model: what should happen, written without looking at apply's branches.
        expected_verdict: Verdict
        if observed == S.UNKNOWN:
            if self.first_terminal is not None or self.unknown:
                expected_verdict = Verdict.STALE
            else:
                self.unknown = True
                expected_verdict = Verdict.APPLIED
        elif self.unknown:
            if observed not in TERMINAL:
                expected_verdict = Verdict.STALE  # a late `sent` answers nothing
            else:
                self.unknown = False
                self.first_terminal = observed
                expected_verdict = Verdict.SETTLES_UNKNOWN
        elif self.first_terminal is not None:
            conflicting = observed in TERMINAL and observed != self.first_terminal
            expected_verdict = Verdict.CONFLICT if conflicting else Verdict.STALE
        elif observed in TERMINAL:
            self.first_terminal = observed
            expected_verdict = Verdict.APPLIED
        elif RANK[observed] > RANK[self.best]:
            self.best = observed
            expected_verdict = Verdict.APPLIED
        else:
            expected_verdict = Verdict.STALE

        assert result.verdict == expected_verdict, (before, observed, result)
        assert result.state == self.expected(), (before, observed, result)
        assert result.changed == (result.state != before)
        if result.verdict in (Verdict.STALE, Verdict.CONFLICT):
            assert result.state == before
        if before in TERMINAL:
            # A terminal is never replaced; a different one is flagged, not applied.
            assert result.state == before
            if observed in TERMINAL and observed != before:
                assert result.verdict == Verdict.CONFLICT
        if result.state != S.UNKNOWN and before != S.UNKNOWN:
            assert RANK[result.state] >= RANK[before]
        self.state = result.state
        self.last = observed

    @rule(observed=st.sampled_from(list(AttemptState)))
    def observe(self, observed: S) -> None:
        self._observe(observed)

    @rule(observed=st.sampled_from(NON_TERMINAL_REAL))
    def stale_poll(self, observed: S) -> None:
        self._observe(observed)

    @rule()
    def horizon_reached(self) -> None:
        self._observe(S.UNKNOWN)

    @rule(observed=st.sampled_from(sorted(TERMINAL)))
    def late_receipt(self, observed: S) -> None:
        self._observe(observed)

    @precondition(lambda self: self.last is not None)
    @rule()
    def duplicate_of_the_last_observation(self) -> None:
        assert self.last is not None
        before = self.state
        result = apply(before, self.last)
        assert not result.changed
        assert result.state == before

    @invariant()
    def state_matches_the_model(self) -> None:
        assert self.state == self.expected()


TestAttemptModel = AttemptModel.TestCase
TestAttemptModel.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)


@st.composite
def non_conflicting_observations(draw: st.DrawFn) -> list[S]:
    """Real observations with at most one distinct terminal (and no horizon verdict)."""
    items = draw(st.lists(st.sampled_from(NON_TERMINAL_REAL), max_size=8))
    terminal = draw(st.none() | st.sampled_from(sorted(TERMINAL)))
    if terminal is not None:
        items += [terminal] * draw(st.integers(min_value=1, max_value=3))
    return items


def _fold(observations: list[S]) -> S:
    state = S.PREPARED
    for observed in observations:
        state = apply(state, observed).state
    return state


@given(observations=non_conflicting_observations(), data=st.data())
@settings(deadline=None)
def test_the_final_state_does_not_depend_on_the_order_of_observations(
    observations: list[S], data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(observations))
    assert _fold(shuffled) == _fold(observations)
    terminals = [o for o in observations if o in TERMINAL]
    expected = (
        terminals[0] if terminals else max([S.PREPARED, *observations], key=lambda s: RANK[s])
    )
    assert _fold(observations) == expected
