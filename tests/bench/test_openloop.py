"""The pure parts of `herald bench --rate`: schedule, backlog, rates, history steps."""

from __future__ import annotations

import pytest

from bench.openloop import (
    MAX_ARRIVALS,
    achieved_rate,
    arrival_offsets,
    backlog,
    in_progress,
    median_steps,
    missed,
)


def test_arrivals_are_due_at_fixed_intervals_bounded_by_rate_times_duration() -> None:
    offsets = arrival_offsets(4, 2.5)
    assert offsets == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25]
    assert len(arrival_offsets(2, 3)) == 6


@pytest.mark.parametrize("rate,duration", [(0, 10), (5, 0), (-1, 3), (MAX_ARRIVALS, 2)])
def test_an_unbounded_or_empty_schedule_is_refused(rate: float, duration: float) -> None:
    with pytest.raises(ValueError):
        arrival_offsets(rate, duration)


def test_in_progress_counts_arrived_minus_done_at_each_instant() -> None:
    arrived = [0.0, 1.0, 2.0, 3.0]
    done = [0.5, 2.5, 3.5]
    assert in_progress(arrived, done, [0.0, 0.6, 1.0, 2.0, 2.6, 3.6]) == [1, 0, 1, 2, 1, 1]


def test_a_system_that_keeps_up_has_a_steady_backlog() -> None:
    rate, duration = 10, 20
    arrived = arrival_offsets(rate, duration)
    done = [t + 0.3 for t in arrived]  # every intent takes 300 ms, whenever it comes
    found = backlog(
        rate=rate,
        duration=duration,
        arrived=arrived,
        done=done,
        latencies_in_arrival_order=[0.3] * len(arrived),
    )
    assert found["grew"] is False
    # rate x latency = 3 in progress, early and late alike (within a sampling step)
    assert found["in_progress_early_quarter"] == pytest.approx(3, abs=0.2)
    assert found["in_progress_late_quarter"] == pytest.approx(3, abs=0.2)


def test_a_system_that_falls_behind_has_a_growing_backlog() -> None:
    rate, duration = 10, 20
    arrived = arrival_offsets(rate, duration)
    done = [i / 5 + 0.3 for i in range(len(arrived))]  # serves 5/s while 10/s arrive
    latencies = [d - a for a, d in zip(arrived, done, strict=True)]
    found = backlog(
        rate=rate,
        duration=duration,
        arrived=arrived,
        done=done,
        latencies_in_arrival_order=latencies,
    )
    assert found["grew"] is True
    assert found["in_progress_late_quarter"] > 3 * found["in_progress_early_quarter"]
    assert found["late_half_p50_s"] > found["early_half_p50_s"]


def test_achieved_rate_is_completions_over_their_span() -> None:
    assert achieved_rate([i / 8 for i in range(17)]) == 8
    assert achieved_rate([1.0]) is None
    assert achieved_rate([]) is None


def test_missing_one_second_counts_the_slow_and_the_never_submitted() -> None:
    assert missed([0.2, 0.9, 1.0, 1.01, None]) == 0.4
    assert missed([]) == 0.0


def test_median_steps_compare_only_timelines_of_the_same_shape() -> None:
    a = [("recorded", 0.0), ("started", 0.1), ("submitted", 0.4)]
    b = [("recorded", 10.0), ("started", 10.3), ("submitted", 10.5)]
    c = [("recorded", 20.0), ("started", 20.2), ("submitted", 20.6)]
    odd = [("recorded", 0.0), ("submitted", 5.0)]
    rows = median_steps([a, b, c, odd])
    assert [r["step"] for r in rows] == ["recorded -> started", "started -> submitted"]
    assert rows[0]["median_ms"] == pytest.approx(200.0)
    assert rows[1]["median_ms"] == pytest.approx(300.0)
    assert rows[1]["cumulative_median_ms"] == pytest.approx(500.0)
    assert rows[0]["intents"] == 3 and rows[0]["other_shapes"] == 1
    assert median_steps([]) == []
