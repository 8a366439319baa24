"""The arithmetic behind `herald bench`'s figures."""

from __future__ import annotations

import pytest

from bench.harness import ahead_of_budget
from bench.stack import BenchOptions, in_bare_worker_units, percentile


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


def test_cpu_per_intent_is_also_given_in_units_of_the_bare_worker_of_the_same_run() -> None:
    herald = {"driver+ingress": 10.0, "worker": 35.0, "carrier_simulator": 0.0, "total": 90.0}
    baseline = {"baseline_worker": 20.0, "temporal": 30.0, "total": 50.0}
    assert in_bare_worker_units(herald, baseline) == {
        "driver+ingress": 0.5,
        "worker": 1.75,
        "total": 4.5,
    }
    # The same run on a machine a fifth slower reads the same.
    slower = {k: v * 1.2 for k, v in herald.items()}
    assert in_bare_worker_units(slower, {"baseline_worker": 24.0}) == in_bare_worker_units(
        herald, baseline
    )
    assert in_bare_worker_units(herald, {"temporal": 30.0}) == {}
