"""Provider circuit breakers in the ledger: one state for every worker, and the one
half-open probe taken by exactly one of many concurrent senders."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from domain.circuit import BreakerSettings, CircuitState, Outcome
from ledger import circuits
from tests.conftest import unique

pytestmark = pytest.mark.ledger

S = BreakerSettings(failure_threshold=2, cool_down=timedelta(seconds=30))
T0 = datetime(2026, 12, 7, tzinfo=UTC)


def test_failures_recorded_by_different_workers_open_one_shared_circuit(committed):
    provider = unique("twilio")
    for worker_second in (0, 1):  # two workers, two transactions
        with committed.begin() as session:
            circuits.note_outcome(
                session, provider, Outcome.FAILURE, T0 + timedelta(seconds=worker_second), S
            )
    with committed.begin() as session:
        state = circuits.current(session, provider)
        refused = circuits.admit_send(session, provider, T0 + timedelta(seconds=5), S)
    assert state is not None and state.state == CircuitState.OPEN
    assert not refused.allowed
    with committed() as session:
        assert provider in {c.provider for c in circuits.all_circuits(session)}


def test_a_destination_refusal_counts_as_the_provider_being_up(committed):
    provider = unique("telnyx")
    with committed.begin() as session:
        circuits.note_outcome(session, provider, Outcome.FAILURE, T0, S)
        after = circuits.note_outcome(session, provider, Outcome.SUCCESS, T0, S)
    assert after.state == CircuitState.CLOSED and after.failures == 0


def test_of_twenty_concurrent_senders_after_the_cool_down_exactly_one_is_the_probe(committed):
    provider = unique("twilio")
    with committed.begin() as session:
        for second in (0, 1):
            circuits.note_outcome(
                session, provider, Outcome.FAILURE, T0 + timedelta(seconds=second), S
            )
    later = T0 + timedelta(seconds=60)
    barrier = threading.Barrier(20)

    def send(_: int) -> bool:
        barrier.wait()
        with committed.begin() as session:
            return circuits.admit_send(session, provider, later, S).allowed

    with ThreadPoolExecutor(20) as pool:
        allowed = list(pool.map(send, range(20)))
    assert allowed.count(True) == 1
    with committed() as session:
        state = circuits.current(session, provider)
    assert state is not None and state.state == CircuitState.HALF_OPEN


def test_a_healthy_providers_sends_take_no_lock_on_its_row(committed):
    # Every send of a healthy provider is admitted and then reports a success: neither
    # changes the breaker, so neither may wait for the row's lock (every send of the fleet
    # would queue on that one row). Another transaction holds the lock meanwhile; with
    # a lock taken here, the statement timeout fails the calls.
    from sqlalchemy import select, text

    from ledger.models import ProviderCircuit

    provider = unique("twilio")
    with committed.begin() as session:
        circuits.note_outcome(session, provider, Outcome.FAILURE, T0, S)
        circuits.note_outcome(session, provider, Outcome.SUCCESS, T0, S)  # closed, 0 failures
    with committed.begin() as holder:
        holder.execute(
            select(ProviderCircuit).where(ProviderCircuit.provider == provider).with_for_update()
        )
        with committed.begin() as session:
            session.execute(text("SET LOCAL lock_timeout = '500ms'"))
            admitted = circuits.admit_send(session, provider, T0 + timedelta(seconds=1), S)
            after = circuits.note_outcome(
                session, provider, Outcome.SUCCESS, T0 + timedelta(seconds=2), S
            )
    assert admitted.allowed and not admitted.probe
    assert after.state == CircuitState.CLOSED and after.failures == 0
    # A failure changes the breaker: it does take the lock (and counts).
    with committed.begin() as session:
        failed = circuits.note_outcome(
            session, provider, Outcome.FAILURE, T0 + timedelta(seconds=3), S
        )
    assert failed.failures == 1
