"""The per-provider circuit breaker's transitions, against a simple model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from domain.circuit import (
    BreakerSettings,
    Circuit,
    CircuitState,
    Outcome,
    admit,
    record,
)

T0 = datetime(2026, 12, 7, tzinfo=UTC)
S = BreakerSettings(
    failure_threshold=3,
    window=timedelta(seconds=60),
    cool_down=timedelta(seconds=30),
    probe_timeout=timedelta(seconds=60),
)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def failures(circuit: Circuit, *times: float) -> Circuit:
    for t in times:
        circuit = record(circuit, Outcome.FAILURE, at(t), S)
    return circuit


def test_consecutive_failures_within_the_window_open_it_and_open_refuses_at_once() -> None:
    c = failures(Circuit("twilio"), 0, 1, 2)
    assert c.state == CircuitState.OPEN and c.opened_at == at(2)
    assert not admit(c, at(10), S).allowed
    assert c.next_probe_at(S) == at(32)


def test_failures_spread_beyond_the_window_do_not_open_it() -> None:
    c = failures(Circuit("twilio"), 0, 1, 70, 71)
    assert c.state == CircuitState.CLOSED and c.failures == 2


def test_a_success_or_a_destination_refusal_resets_the_count() -> None:
    c = failures(Circuit("twilio"), 0, 1)
    c = record(c, Outcome.SUCCESS, at(2), S)
    c = failures(c, 3, 4)
    assert c.state == CircuitState.CLOSED


def test_a_429_counts_for_nothing() -> None:
    c = failures(Circuit("twilio"), 0, 1)
    c = record(c, Outcome.NEUTRAL, at(2), S)
    assert c.failures == 2


def test_after_the_cool_down_exactly_one_probe_goes_and_its_success_closes_it() -> None:
    c = failures(Circuit("twilio"), 0, 1, 2)
    probe = admit(c, at(32), S)
    assert probe.allowed and probe.probe and probe.circuit.state == CircuitState.HALF_OPEN
    assert not admit(probe.circuit, at(33), S).allowed  # one probe at a time
    closed = record(probe.circuit, Outcome.SUCCESS, at(34), S)
    assert closed == Circuit("twilio")


def test_a_send_refused_while_the_probe_is_out_comes_back_one_cool_down_after_it() -> None:
    # By then the probe has answered: closed (the send goes) or open again (the send is the
    # next probe). Not the probe timeout: a deferred notification would idle a minute
    # after its provider recovered.
    c = failures(Circuit("twilio"), 0, 1, 2)
    probe = admit(c, at(32), S).circuit
    assert probe.next_probe_at(S) == at(62)
    short = BreakerSettings(cool_down=timedelta(seconds=30), probe_timeout=timedelta(seconds=5))
    assert probe.next_probe_at(short) == at(37)  # a lost probe frees the slot sooner


def test_a_failed_probe_opens_it_again_for_another_cool_down() -> None:
    c = failures(Circuit("twilio"), 0, 1, 2)
    probe = admit(c, at(40), S).circuit
    reopened = record(probe, Outcome.FAILURE, at(41), S)
    assert reopened.state == CircuitState.OPEN and reopened.opened_at == at(41)
    assert not admit(reopened, at(70), S).allowed and admit(reopened, at(71), S).allowed


def test_a_probe_lost_with_its_worker_frees_the_slot_after_the_probe_timeout() -> None:
    probe = admit(failures(Circuit("twilio"), 0, 1, 2), at(32), S).circuit
    assert not admit(probe, at(91), S).allowed
    assert admit(probe, at(92), S).allowed


class BreakerModel(RuleBasedStateMachine):
    """The breaker against a model: open exactly when the last `threshold` outcomes that
    counted were failures inside one window (or a probe failed), and while open no more
    than one send passes per cool-down."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.circuit = Circuit("p")
        self.streak: list[float] = []

    @rule(dt=st.floats(min_value=0, max_value=50))
    def wait(self, dt: float) -> None:
        self.now += dt

    @rule(outcome=st.sampled_from(list(Outcome)))
    def report(self, outcome: Outcome) -> None:
        before = self.circuit.state
        self.circuit = record(self.circuit, outcome, at(self.now), S)
        if outcome == Outcome.SUCCESS:
            self.streak = []
            assert self.circuit.state == CircuitState.CLOSED
        elif before != CircuitState.CLOSED:
            self.streak = []
        elif outcome == Outcome.FAILURE and before == CircuitState.CLOSED:
            # A streak counts within one window from its first failure.
            if self.streak and self.now - self.streak[0] > S.window.total_seconds():
                self.streak = []
            self.streak.append(self.now)
            expected_open = len(self.streak) >= S.failure_threshold
            assert (self.circuit.state == CircuitState.OPEN) == expected_open
        elif outcome == Outcome.FAILURE and before == CircuitState.HALF_OPEN:
            assert self.circuit.state == CircuitState.OPEN

    @rule()
    def send(self) -> None:
        before = self.circuit
        admission = admit(before, at(self.now), S)
        self.circuit = admission.circuit
        if before.state == CircuitState.OPEN:
            assert before.opened_at is not None
            assert admission.allowed == (at(self.now) >= before.opened_at + S.cool_down)
        if admission.allowed and before.state != CircuitState.CLOSED:
            assert admission.probe
        if before.state == CircuitState.CLOSED:
            assert admission.allowed and not admission.probe

    @invariant()
    def open_means_no_probe_out(self) -> None:
        if self.circuit.state == CircuitState.OPEN:
            assert self.circuit.opened_at is not None and self.circuit.probe_at is None
        if self.circuit.state == CircuitState.CLOSED and self.circuit.failures == 0:
            assert self.circuit.opened_at is None


BreakerModel.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestBreakerModel = BreakerModel.TestCase
