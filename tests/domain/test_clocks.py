"""Backoff, poll schedules and the three clocks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.clocks import MAX_POLLS, Clocks, backoff_delay, poll_schedule

START = datetime(2026, 12, 15, 12, 0, tzinfo=UTC)
unit_floats = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)


def fixed(value: float):
    return lambda: value


def test_backoff_doubles_up_to_the_maximum_without_jitter() -> None:
    delays = [backoff_delay(n, initial=1, maximum=10, jitter=0, rand=fixed(0.5)) for n in range(6)]
    assert delays == [1, 2, 4, 8, 10, 10]


def test_jitter_only_ever_shortens_a_delay() -> None:
    assert backoff_delay(3, initial=1, maximum=100, jitter=0.2, rand=fixed(0.0)) == 8
    assert backoff_delay(3, initial=1, maximum=100, jitter=0.2, rand=fixed(0.999999)) == (
        pytest.approx(6.4, rel=1e-4)
    )


def test_a_huge_retry_number_is_capped_not_an_overflow() -> None:
    assert backoff_delay(10_000, initial=1, maximum=60, jitter=0, rand=fixed(0)) == 60


@pytest.mark.parametrize(
    "kwargs",
    [dict(retry=-1), dict(initial=-1), dict(multiplier=0.5), dict(jitter=1.5)],
)
def test_backoff_refuses_arguments_out_of_range(kwargs: dict) -> None:
    arguments = dict(retry=0, initial=1.0, maximum=10.0, multiplier=2.0, jitter=0.2) | kwargs
    retry = arguments.pop("retry")
    with pytest.raises(ValueError):
        backoff_delay(retry, rand=fixed(0.5), **arguments)


@given(
    retry=st.integers(min_value=0, max_value=2000),
    initial=st.floats(min_value=0, max_value=1e4),
    maximum=st.floats(min_value=0, max_value=1e5),
    multiplier=st.floats(min_value=1, max_value=10),
    jitter=st.floats(min_value=0, max_value=1),
    draw=st.floats(min_value=-1, max_value=2),
)
def test_every_backoff_delay_lies_within_its_documented_bounds(
    retry: int, initial: float, maximum: float, multiplier: float, jitter: float, draw: float
) -> None:
    delay = backoff_delay(
        retry,
        initial=initial,
        maximum=maximum,
        multiplier=multiplier,
        jitter=jitter,
        rand=fixed(draw),
    )
    assert 0 <= delay <= maximum
    try:
        base = min(maximum, initial * multiplier**retry)
    except OverflowError:
        base = maximum
    assert base * (1 - jitter) - 1e-9 <= delay <= base + 1e-9


def test_a_poll_schedule_backs_off_and_ends_with_a_look_at_the_horizon() -> None:
    horizon = START + timedelta(seconds=60)
    times = poll_schedule(
        start=START, horizon=horizon, initial=1, maximum=5, jitter=0, rand=fixed(0)
    )
    offsets = [(t - START).total_seconds() for t in times]
    assert offsets[:5] == [1, 3, 7, 12, 17]
    assert offsets[-1] == 60
    assert all(b - a <= 5 for a, b in zip(offsets, offsets[1:], strict=False))


def test_a_horizon_before_the_start_gives_no_polls() -> None:
    assert poll_schedule(start=START, horizon=START, initial=1, maximum=5, rand=fixed(0)) == []


def test_a_schedule_is_capped_at_max_polls() -> None:
    times = poll_schedule(
        start=START, horizon=START + timedelta(days=365), initial=1, maximum=1, rand=fixed(0)
    )
    assert len(times) == MAX_POLLS
    assert times[-1] == START + timedelta(days=365)


def test_the_earliest_closing_clock_wins() -> None:
    clocks = Clocks(
        business_expiry=START + timedelta(hours=2),
        cooldown_until=None,
        transport_window_end=START + timedelta(hours=1),
    )
    assert clocks.earliest_closing() == ("transport_window_end", START + timedelta(hours=1))
    assert clocks.bound(START + timedelta(hours=3)) == START + timedelta(hours=1)
    assert clocks.bound(START) == START
    assert Clocks(None, None, None).earliest_closing() is None
    assert Clocks(None, None, None).bound(START) == START


def test_a_tie_between_clocks_names_the_business_expiry() -> None:
    clocks = Clocks(START, START, START)
    assert clocks.earliest_closing() == ("business_expiry", START)


optional_offsets = st.none() | st.integers(min_value=-600, max_value=7200)


@given(
    horizon_s=st.integers(min_value=0, max_value=7200),
    initial=st.floats(min_value=0.5, max_value=60),
    spread=st.floats(min_value=1, max_value=20),
    jitter=st.floats(min_value=0, max_value=0.9),
    draws=st.lists(unit_floats, min_size=1, max_size=20),
    clock_offsets=st.tuples(optional_offsets, optional_offsets, optional_offsets),
)
@settings(max_examples=150, deadline=None)
def test_a_schedule_never_passes_its_horizon_or_the_earliest_clock(
    horizon_s: int,
    initial: float,
    spread: float,
    jitter: float,
    draws: list[float],
    clock_offsets: tuple[int | None, int | None, int | None],
) -> None:
    clocks = Clocks(*(None if o is None else START + timedelta(seconds=o) for o in clock_offsets))
    horizon = START + timedelta(seconds=horizon_s)
    bounded = clocks.bound(horizon)
    sequence = iter(draws * 1000)
    times = poll_schedule(
        start=START,
        horizon=bounded,
        initial=initial,
        maximum=initial * spread,
        jitter=jitter,
        rand=lambda: next(sequence),
    )
    assert all(START < t <= horizon for t in times)
    closing = clocks.earliest_closing()
    if closing is not None:
        assert all(t <= closing[1] for t in times)
    assert times == sorted(set(times))


def test_iso_utc_writes_any_zone_in_utc_and_keeps_none():
    from datetime import UTC, datetime, timedelta, timezone

    from domain.clocks import iso_utc

    paris = timezone(timedelta(hours=1))
    assert iso_utc(datetime(2026, 3, 1, 10, 30, tzinfo=paris)) == "2026-03-01T09:30:00+00:00"
    assert iso_utc(datetime(2026, 3, 1, 9, 30, tzinfo=UTC)) == "2026-03-01T09:30:00+00:00"
    assert iso_utc(None) is None
