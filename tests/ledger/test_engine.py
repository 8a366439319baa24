"""The ledger engine pings a pooled connection only after it sat idle past the threshold,
and a connection killed under the pool (what a Postgres restart does) is replaced by that
ping, with the rest of the pool, before any transaction sees it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from ledger.engine import ledger_engine

pytestmark = pytest.mark.ledger

THRESHOLD = 1.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def pinged(pg_url: str, clock: Clock) -> Iterator[tuple[Engine, list[Any]]]:
    engine = ledger_engine(pg_url, idle_ping_seconds=THRESHOLD, clock=clock, pool_size=4)
    pings: list[Any] = []
    real_ping = engine.dialect.do_ping

    def counting_ping(dbapi_connection: Any) -> bool:
        pings.append(dbapi_connection)
        return real_ping(dbapi_connection)

    engine.dialect.do_ping = counting_ping  # type: ignore[method-assign]
    yield engine, pings
    engine.dispose()


def backend_pid(engine: Engine) -> int:
    with engine.begin() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def terminate(pg_url: str, *pids: int) -> None:
    """Kill server backends from outside the pool, as a restart would."""
    killer = ledger_engine(pg_url)
    with killer.begin() as conn:
        for pid in pids:
            assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
    killer.dispose()


def test_a_connection_in_steady_use_is_not_pinged(pinged, clock) -> None:  # type: ignore[no-untyped-def]
    engine, pings = pinged
    pid = backend_pid(engine)
    for _ in range(20):
        clock.now += THRESHOLD / 2
        assert backend_pid(engine) == pid
    assert pings == []
    clock.now += THRESHOLD + 0.01
    assert backend_pid(engine) == pid
    assert len(pings) == 1


def test_an_idle_connection_killed_under_the_pool_is_replaced_with_the_rest(  # type: ignore[no-untyped-def]
    pinged, clock, pg_url
) -> None:
    engine, pings = pinged
    first, second = engine.connect(), engine.connect()
    pids = [c.execute(text("SELECT pg_backend_pid()")).scalar_one() for c in (first, second)]
    first.close()
    second.close()
    terminate(pg_url, *pids)
    clock.now += THRESHOLD + 0.01

    # Both pooled connections are dead; neither transaction may see it.
    a, b = engine.connect(), engine.connect()
    new = [c.execute(text("SELECT pg_backend_pid()")).scalar_one() for c in (a, b)]
    a.close()
    b.close()
    assert set(new).isdisjoint(pids)
    # One failed ping invalidated the pool: the second dead connection was recycled
    # without a ping of its own.
    assert len(pings) == 1


def test_within_the_threshold_a_killed_connection_fails_once(pinged, clock, pg_url) -> None:  # type: ignore[no-untyped-def]
    """The boundary docs/operations.md states: a restart shorter than the threshold costs
    one failed transaction per process, after which the pool is replaced."""
    engine, pings = pinged
    terminate(pg_url, backend_pid(engine))
    clock.now += THRESHOLD / 2
    with pytest.raises(OperationalError):
        backend_pid(engine)
    backend_pid(engine)
    assert pings == []
