"""The arithmetic behind `herald bench`'s figures."""

from __future__ import annotations

import pytest

from bench.harness import BenchOptions, ahead_of_budget, percentile


def test_a_stall_and_its_catch_up_stay_on_the_budget_line() -> None:
    # 13 then 27 in one-second bins is one late batch, not a burst above the budget.
    assert ahead_of_budget([20, 20, 13, 27, 20], 20) == 0
    assert ahead_of_budget([19, 19, 19], 20) == 0


def test_running_ahead_of_the_budget_is_reported_at_its_peak() -> None:
    assert ahead_of_budget([29, 11, 20], 20) == 9
    assert ahead_of_budget([21, 21, 21, 10], 20) == 3


def test_percentiles_interpolate_between_ranks() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([], 99) is None


def test_the_default_poll_interval_asks_a_quarter_more_than_the_budget() -> None:
    assert BenchOptions(open=5000, budget=20).poll_interval() == 200
    assert BenchOptions(open=300, budget=20).poll_interval() == 12
    assert BenchOptions(open=50, budget=20).poll_interval() == 10  # never below 10 s
    assert BenchOptions(poll_every=7).poll_interval() == 7
