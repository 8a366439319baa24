"""A circuit breaker per provider, as pure transitions (its state lives in the ledger).

closed --(threshold consecutive failures within the window)--> open
open --(cool-down passed; the next send is the one probe)--> half_open
half_open --(the probe succeeds)--> closed; --(it fails)--> open again

A failure is the provider failing to serve: a definitive provider-side refusal (a refusal
about the account included: bad credentials, a suspension), a connection refused, a 5xx,
a timeout. Anything the provider answered for itself counts as
a success, a refusal about the destination included (the provider is up); a 429 counts as
neither (it is the rate budget, not an outage). While open, a send costs one fast local
refusal (``circuit_open``) instead of a timeout per message, and failover moves on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum


class CircuitState(StrEnum):
    """Where one provider's breaker stands."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Outcome(StrEnum):
    """What one provider call says about the provider's health."""

    SUCCESS = "success"
    FAILURE = "failure"
    NEUTRAL = "neutral"


@dataclass(frozen=True)
class BreakerSettings:
    """Thresholds (settings: ``HERALD_CIRCUIT_*``)."""

    failure_threshold: int = 5
    """Consecutive failures that open the circuit."""
    window: timedelta = timedelta(seconds=60)
    """They must fall within this window (an old failure does not add to a new one)."""
    cool_down: timedelta = timedelta(seconds=30)
    """How long it stays open before one probe may try (half-open)."""
    probe_timeout: timedelta = timedelta(seconds=60)
    """A probe that never reported back frees the half-open slot after this long."""


@dataclass(frozen=True)
class Circuit:
    """One provider's breaker, as the ledger keeps it."""

    provider: str
    state: CircuitState = CircuitState.CLOSED
    failures: int = 0
    """Consecutive failures in the current window."""
    first_failure_at: datetime | None = None
    opened_at: datetime | None = None
    probe_at: datetime | None = None
    """When the half-open probe was let through (one at a time)."""

    def next_probe_at(self, settings: BreakerSettings) -> datetime | None:
        """When a refused send may try again (the next-eligible time of a deferral).

        Open: when it half-opens. Half-open with the probe out: one cool-down after the
        probe left (by then it has answered: closed, the send goes; open again, the send is
        the next probe), or when a lost probe's slot frees, whichever comes first.
        """
        if self.state == CircuitState.OPEN and self.opened_at is not None:
            return self.opened_at + settings.cool_down
        if self.state == CircuitState.HALF_OPEN and self.probe_at is not None:
            return self.probe_at + min(settings.cool_down, settings.probe_timeout)
        return None


@dataclass(frozen=True)
class Admission:
    """Whether a send may go, and the breaker after asking."""

    allowed: bool
    circuit: Circuit
    """The breaker after the admission (half-open with the probe taken, say)."""
    probe: bool = False
    """This send is the half-open probe."""


def admit(circuit: Circuit, now: datetime, settings: BreakerSettings) -> Admission:
    """May a send go to this provider now?

    Open refuses until the cool-down, then lets exactly one probe through (half-open).
    """
    if circuit.state == CircuitState.CLOSED:
        return Admission(True, circuit)
    if circuit.state == CircuitState.OPEN:
        assert circuit.opened_at is not None
        if now < circuit.opened_at + settings.cool_down:
            return Admission(False, circuit)
        return Admission(True, replace(circuit, state=CircuitState.HALF_OPEN, probe_at=now), True)
    # Half-open: one probe at a time; a probe lost with its worker frees the slot.
    if circuit.probe_at is not None and now < circuit.probe_at + settings.probe_timeout:
        return Admission(False, circuit)
    return Admission(True, replace(circuit, probe_at=now), True)


def record(circuit: Circuit, outcome: Outcome, now: datetime, settings: BreakerSettings) -> Circuit:
    """The breaker after one call's outcome."""
    if outcome == Outcome.NEUTRAL:
        return circuit
    if outcome == Outcome.SUCCESS:
        return Circuit(circuit.provider)
    if circuit.state == CircuitState.HALF_OPEN:
        return replace(circuit, state=CircuitState.OPEN, opened_at=now, probe_at=None, failures=1)
    if circuit.state == CircuitState.OPEN:
        return circuit  # a straggler from before it opened
    in_window = (
        circuit.first_failure_at is not None and now - circuit.first_failure_at <= settings.window
    )
    failures = circuit.failures + 1 if in_window else 1
    first = circuit.first_failure_at if in_window else now
    if failures >= settings.failure_threshold:
        return Circuit(
            circuit.provider,
            CircuitState.OPEN,
            failures=failures,
            first_failure_at=first,
            opened_at=now,
        )
    return replace(circuit, failures=failures, first_failure_at=first)


__all__ = [
    "Admission",
    "BreakerSettings",
    "Circuit",
    "CircuitState",
    "Outcome",
    "admit",
    "record",
]
