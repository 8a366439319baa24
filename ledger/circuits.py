"""Provider circuit breakers in the ledger: every worker and the console see one state.

A call that changes the breaker reads the provider's row under a lock (`SELECT ... FOR
UPDATE`, the row made on first use), applies the pure transition (`domain.circuit`) and
writes the result in the same transaction, so two workers can never both take the one
half-open probe. A call that changes nothing (a send admitted by a closed circuit, a
success on a healthy one: every send of a healthy provider, twice) is decided on a plain
read and takes no lock: it is ordered as if it ran just before whatever commits next, and
every send no longer queues behind the others on the one row.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from domain.circuit import (
    Admission,
    BreakerSettings,
    Circuit,
    CircuitState,
    Outcome,
    admit,
    record,
)
from ledger.models import ProviderCircuit


def _locked(session: Session, provider: str, now: datetime) -> ProviderCircuit:
    session.execute(
        insert(ProviderCircuit)
        .values(provider=provider, state=CircuitState.CLOSED.value, failures=0, updated_at=now)
        .on_conflict_do_nothing(index_elements=["provider"])
    )
    return session.execute(
        select(ProviderCircuit).where(ProviderCircuit.provider == provider).with_for_update()
    ).scalar_one()


_PEEK = select(
    ProviderCircuit.provider,
    ProviderCircuit.state,
    ProviderCircuit.failures,
    ProviderCircuit.first_failure_at,
    ProviderCircuit.opened_at,
    ProviderCircuit.probe_at,
)


def _circuit(row: Any) -> Circuit:
    return Circuit(
        row.provider,
        CircuitState(row.state),
        row.failures,
        row.first_failure_at,
        row.opened_at,
        row.probe_at,
    )


def _write(row: ProviderCircuit, circuit: Circuit, now: datetime) -> None:
    row.state = circuit.state.value
    row.failures = circuit.failures
    row.first_failure_at = circuit.first_failure_at
    row.opened_at = circuit.opened_at
    row.probe_at = circuit.probe_at
    row.updated_at = now


def admit_send(
    session: Session, provider: str, now: datetime, settings: BreakerSettings
) -> Admission:
    """May a send go to `provider` now (and is it the half-open probe)?"""
    seen = current(session, provider)
    if seen is not None:
        admission = admit(seen, now, settings)
        if admission.circuit == seen:
            return admission  # nothing to write (closed, or open and cooling down)
    row = _locked(session, provider, now)
    before = _circuit(row)
    admission = admit(before, now, settings)
    if admission.circuit != before:
        _write(row, admission.circuit, now)
    return admission


def note_outcome(
    session: Session, provider: str, outcome: Outcome, now: datetime, settings: BreakerSettings
) -> Circuit:
    """Record what one call said about the provider's health; the breaker after it."""
    if outcome == Outcome.NEUTRAL:
        return current(session, provider) or Circuit(provider)
    seen = current(session, provider)
    if seen is not None and record(seen, outcome, now, settings) == seen:
        return seen  # nothing to write (a success on a healthy provider)
    row = _locked(session, provider, now)
    before = _circuit(row)
    after = record(before, outcome, now, settings)
    if after != before:
        _write(row, after, now)
    return after


def current(session: Session, provider: str) -> Circuit | None:
    """The provider's breaker as last committed, read without a lock (None: never used).

    A plain row, not an ORM object: a locked read after it in the same session must not be
    handed this one from the identity map.
    """
    row = session.execute(_PEEK.where(ProviderCircuit.provider == provider)).one_or_none()
    return _circuit(row) if row is not None else None


def all_circuits(session: Session) -> list[Circuit]:
    """Every provider's breaker (the console's overview, the metric)."""
    rows = session.execute(select(ProviderCircuit).order_by(ProviderCircuit.provider)).scalars()
    return [_circuit(r) for r in rows]


__all__ = ["admit_send", "all_circuits", "current", "note_outcome"]
