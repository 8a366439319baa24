"""The sign-in throttle's rule: five refusals for a name (twenty from an address) within
15 minutes block, each later refusal blocks twice as long up to 15 minutes, and a quiet
15 minutes forgets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from domain.sign_in_throttle import (
    LONGEST_BLOCK,
    WINDOW,
    Counter,
    CounterKind,
    current,
    refused,
    retry_after,
)

T0 = datetime(2026, 12, 7, 1, 0, tzinfo=UTC)


def refuse(
    n: int, kind: CounterKind, *, start: Counter | None = None, at: datetime = T0
) -> Counter:
    counter = start or Counter()
    for _ in range(n):
        counter = refused(counter, kind, at)
    return counter


def test_four_refusals_of_a_name_do_not_block_and_the_fifth_does_for_a_minute():
    four = refuse(4, CounterKind.NAME)
    assert retry_after(four, T0) is None
    fifth = refused(four, CounterKind.NAME, T0)
    assert retry_after(fifth, T0) == 60
    assert retry_after(fifth, T0 + timedelta(seconds=59)) == 1
    assert retry_after(fifth, T0 + timedelta(seconds=60)) is None


def test_an_address_blocks_after_twenty():
    assert retry_after(refuse(19, CounterKind.ADDRESS), T0) is None
    assert retry_after(refuse(20, CounterKind.ADDRESS), T0) == 60


def test_each_refusal_after_a_block_doubles_the_wait_up_to_fifteen_minutes():
    counter = refuse(5, CounterKind.NAME)
    waits = [retry_after(counter, T0)]
    at = T0
    for _ in range(6):
        assert counter.blocked_until is not None
        at = counter.blocked_until  # waited it out, then refused again
        counter = refused(counter, CounterKind.NAME, at)
        waits.append(retry_after(counter, at))
    assert waits == [60, 120, 240, 480, 900, 900, 900]
    assert timedelta(seconds=waits[-1]) == LONGEST_BLOCK


def test_a_quiet_window_after_the_last_block_forgets_the_counter():
    counter = refuse(5, CounterKind.NAME)
    assert counter.blocked_until is not None
    still = counter.blocked_until + WINDOW
    assert current(counter, still) == counter
    later = still + timedelta(seconds=1)
    assert current(counter, later) == Counter()
    assert retry_after(refused(counter, CounterKind.NAME, later), later) is None
