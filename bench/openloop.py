"""`herald bench --rate R --duration S` and `--rate-sweep`: Herald under a steady load.

The closed loop (bench/harness.py) keeps 16 starts in flight, so its latencies are mostly
queueing. Here arrivals come at a fixed rate, independent of completions: arrival i is
due at t0 + i / R, each fired as a task of its own through the public client
(`HeraldClient.notify`, record + start), each to a recipient of its own, so a slow
submission never delays the next arrival. Bounded in count (round(R x S)) and time (the
drain waits at most `drain` seconds after the last arrival), then it stops by itself.

Latencies come from the ledger, from the intent's recorded time (`intent.created_at`) to
the attempt's `submitted_at` (the carrier accepted it) and `terminal_at` (delivered).
Whether the backlog grew is read from two angles: the intents in progress (arrived, not
yet accepted by the carrier, counted from the carrier's own arrival times) early and late
in the run, and the late half's median latency against the early half's.

The pure parts (schedule, backlog, achieved rate, breakdown steps) are plain functions
tested in tests/bench/test_openloop.py.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from bench.stack import (
    Bench,
    BenchOptions,
    CpuMeter,
    _round,
    distinct_numbers,
    history_counts,
    run_herald,
    seed_round,
    start_bench,
    summary,
    worker_cpu_parts,
)
from domain.requests import NotificationRequest

MAX_ARRIVALS = 20_000
"""A run never schedules more intents than this (R x S is checked before the stack starts)."""
SWEEP_SHARES = (0.25, 0.50, 0.75)
MISS_SECONDS = 1.0
"""An intent 'missed 1 s' when recorded -> submitted took longer (or never happened)."""
BACKLOG_GROWTH = 2.0
"""The backlog grew when the late quarter holds more than this many times the early one
(and at least 2 x the offered rate more), or the late half's median latency is this
many times the early half's (and at least 0.25 s more)."""


# --- pure parts ----------------------------------------------------------------------


def arrival_offsets(rate: float, duration: float) -> list[float]:
    """Seconds after t0 at which each arrival is due: i / rate, for round(rate x duration)."""
    if rate <= 0 or duration <= 0:
        raise ValueError("rate and duration must be positive")
    count = round(rate * duration)
    if count > MAX_ARRIVALS:
        raise ValueError(
            f"{count} arrivals is more than {MAX_ARRIVALS}; lower --rate or --duration"
        )
    return [i / rate for i in range(count)]


def in_progress(arrived: Sequence[float], done: Sequence[float], at: Sequence[float]) -> list[int]:
    """How many had arrived and were not done yet, at each of the instants `at`."""
    a, d = sorted(arrived), sorted(done)
    out, i, j = [], 0, 0
    for t in at:
        while i < len(a) and a[i] <= t:
            i += 1
        while j < len(d) and d[j] <= t:
            j += 1
        out.append(max(0, i - j))
    return out


def backlog(
    *,
    rate: float,
    duration: float,
    arrived: Sequence[float],
    done: Sequence[float],
    latencies_in_arrival_order: Sequence[float],
    step: float = 0.5,
) -> dict[str, Any]:
    """Did work pile up while arrivals came in? Times are seconds after t0.

    Intents in progress sampled every `step` seconds over the arrival window: the mean of
    its first quarter (after the first second, the ramp-up) against its last quarter; and
    the median latency of the late half of the arrivals against the early half's.
    """
    instants = [step * k for k in range(1, int(duration / step) + 1)]
    series = in_progress(arrived, done, instants)
    warm = [n for t, n in zip(instants, series, strict=True) if t >= min(1.0, duration / 4)]
    quarter = max(1, len(warm) // 4)
    early_q = statistics.fmean(warm[:quarter]) if warm else 0.0
    late_q = statistics.fmean(warm[-quarter:]) if warm else 0.0
    half = len(latencies_in_arrival_order) // 2
    early = list(latencies_in_arrival_order[:half])
    late = list(latencies_in_arrival_order[half:])
    early_p50 = statistics.median(early) if early else None
    late_p50 = statistics.median(late) if late else None
    queue_grew = late_q > BACKLOG_GROWTH * early_q and late_q - early_q >= 2 * rate
    latency_grew = (
        early_p50 is not None
        and late_p50 is not None
        and late_p50 > BACKLOG_GROWTH * early_p50
        and late_p50 - early_p50 >= 0.25
    )
    return {
        "in_progress_early_quarter": round(early_q, 1),
        "in_progress_late_quarter": round(late_q, 1),
        "in_progress_max": max(series, default=0),
        "in_progress_at_end_of_arrivals": series[-1] if series else 0,
        "early_half_p50_s": _round(early_p50),
        "late_half_p50_s": _round(late_p50),
        "grew": bool(queue_grew or latency_grew),
    }


def achieved_rate(times: Sequence[float]) -> float | None:
    """Completions per second: (n - 1) / (last - first). Arrivals spaced 1/R apart give R."""
    if len(times) < 2:
        return None
    ordered = sorted(times)
    span = ordered[-1] - ordered[0]
    return round((len(ordered) - 1) / span, 2) if span > 0 else None


def missed(latencies: Sequence[float | None], limit: float = MISS_SECONDS) -> float:
    """Share of intents over `limit` seconds; None (never got there) counts as missed."""
    if not latencies:
        return 0.0
    late = sum(1 for v in latencies if v is None or v > limit)
    return round(late / len(latencies), 4)


def median_steps(timelines: Sequence[Sequence[tuple[str, float]]]) -> list[dict[str, Any]]:
    """Median time per step across intents whose timelines have the most common shape.

    A timeline is [(label, epoch seconds), ...] in order. Only timelines with the same
    label sequence are comparable step by step; the others are counted, not mixed in.
    """
    shapes = Counter(tuple(label for label, _ in t) for t in timelines)
    if not shapes:
        return []
    shape, n = shapes.most_common(1)[0]
    same = [t for t in timelines if tuple(label for label, _ in t) == shape]
    rows = []
    for k in range(1, len(shape)):
        gaps = [t[k][1] - t[k - 1][1] for t in same]
        since_start = [t[k][1] - t[0][1] for t in same]
        rows.append(
            {
                "step": f"{shape[k - 1]} -> {shape[k]}",
                "median_ms": round(1000 * statistics.median(gaps), 1),
                "max_ms": round(1000 * max(gaps), 1),
                "cumulative_median_ms": round(1000 * statistics.median(since_start), 1),
            }
        )
    if rows:
        rows[0]["intents"] = n
        rows[0]["other_shapes"] = len(timelines) - n
    return rows


# --- one open-loop run -----------------------------------------------------------------


@dataclass
class Arrival:
    key: str
    intended: float
    """time.time() at which it was due"""
    fired: float | None = None
    """time.time() when its task began"""
    returned: float | None = None
    """time.time() when notify() returned (recorded and started)"""
    workflow_id: str | None = None
    error: str | None = None


async def open_loop(
    bench: Bench,
    cpu: CpuMeter,
    *,
    rate: float,
    duration: float,
    drain: float,
    log: Callable[[str], None],
    breakdown: int = 0,
) -> dict[str, Any]:
    """Arrivals at `rate`/s for `duration` s; wait for them (at most `drain` s more)."""
    offsets = arrival_offsets(rate, duration)
    run_id = uuid.uuid4().hex[:8]
    prefix = f"bench:{run_id}:"
    numbers = distinct_numbers(len(offsets) + len(bench.numbers))[len(bench.numbers) :]
    bench.numbers += numbers
    recipients = await seed_round(bench, run_id, 0, len(offsets))
    client = bench.client
    arrivals = [Arrival(f"{prefix}i-{i}", 0.0) for i in range(len(offsets))]

    async def fire(i: int) -> None:
        arrival = arrivals[i]
        arrival.fired = time.time()
        try:
            ref = await client.notify(
                NotificationRequest(
                    business_key=arrival.key,
                    recipient_ref=recipients[i],
                    template_key="demo",
                    phone=numbers[i],
                    variables={"n": i, "intent_id": arrival.key},
                )
            )
            arrival.workflow_id = ref.workflow_id
        except Exception as err:  # noqa: BLE001 - one failed arrival is a figure, not a crash
            arrival.error = type(err).__name__
        arrival.returned = time.time()

    log(f"open loop: {len(offsets)} arrivals at {rate:g}/s for {duration:g} s ...")
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[None]] = []
    cpu_before = cpu.snapshot()
    wall_t0 = time.time() + 0.2
    mono_t0 = loop.time() + 0.2
    for i, offset in enumerate(offsets):
        arrivals[i].intended = wall_t0 + offset
        delay = mono_t0 + offset - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        # A task of its own: the next arrival never waits for this one.
        tasks.append(loop.create_task(fire(i)))
    await asyncio.gather(*tasks)
    handles = [
        client.temporal.get_workflow_handle(a.workflow_id) for a in arrivals if a.workflow_id
    ]
    deadline = drain - max(0.0, time.time() - (wall_t0 + duration))
    done, pending = await asyncio.wait(
        [loop.create_task(h.result()) for h in handles], timeout=max(1.0, deadline)
    )
    for task in pending:
        task.cancel()
    cpu.add(f"rate-{rate:g}", cpu_before, cpu.snapshot())
    if pending:
        log(f"  {len(pending)} of {len(handles)} workflows still open after the drain")

    rows = await asyncio.to_thread(_ledger_times, bench, prefix)
    creates = await bench.carrier.arrivals("create")
    lat_sub: list[float | None] = []
    lat_del: list[float | None] = []
    submitted_at: list[float] = []
    for a in arrivals:
        created, sub, deliv = rows.get(a.key, (None, None, None))
        lat_sub.append(None if created is None or sub is None else sub - created)
        lat_del.append(None if created is None or deliv is None else deliv - created)
        if sub is not None:
            submitted_at.append(sub)
    recorded_at = {a.key: rows[a.key][0] for a in arrivals if a.key in rows}
    recorded = [t for t in recorded_at.values() if t is not None]
    sub_values = [v for v in lat_sub if v is not None]
    del_values = [v for v in lat_del if v is not None]
    # The carrier's clock is time.monotonic(), system-wide on Linux, and so is the loop's.
    done_rel = [at - mono_t0 for at in creates if at >= mono_t0 - 0.2]
    result: dict[str, Any] = {
        "offered_per_s": rate,
        "duration_s": duration,
        "arrivals": len(offsets),
        "recorded": len(recorded),
        "submitted": len(sub_values),
        "delivered": len(del_values),
        "start_errors": dict(Counter(a.error for a in arrivals if a.error)),
        "still_open_after_drain": len(pending),
        "recorded_per_s": achieved_rate(recorded),
        "achieved_per_s": achieved_rate(submitted_at),
        "driver_lag_s": summary([a.fired - a.intended for a in arrivals if a.fired is not None]),
        "intended_to_recorded_s": summary(
            [t - a.intended for a in arrivals if (t := recorded_at.get(a.key)) is not None]
        ),
        "intent_to_submitted_s": summary(sub_values),
        "intent_to_delivered_s": summary(del_values),
        "missed_1s_submitted": missed(lat_sub),
        "missed_1s_delivered": missed(lat_del),
        "backlog": backlog(
            rate=rate,
            duration=duration,
            arrived=offsets,
            done=done_rel,
            latencies_in_arrival_order=[v for v in lat_sub if v is not None],
        ),
        "cpu_ms_per_intent": cpu.per_unit(f"rate-{rate:g}", len(offsets)),
        "cpu_ms_per_intent_by_worker": cpu.per_unit_detail(f"rate-{rate:g}", len(offsets)),
        "history_per_intent": await history_counts(
            client.temporal,
            [a.workflow_id for a in arrivals if a.workflow_id][:: max(1, len(arrivals) // 10)][:10],
        ),
    }
    if breakdown:
        sample = [a for a in arrivals if a.workflow_id][:: max(1, len(arrivals) // breakdown)]
        result["breakdown"] = await intent_breakdown(bench, sample[:breakdown], rows)
    return result


def _ledger_times(
    bench: Bench, prefix: str
) -> dict[str, tuple[float | None, float | None, float | None]]:
    """business key -> (recorded, submitted, delivered) as epoch seconds (first sms attempt)."""
    with bench.client.sessions() as session:
        rows = session.execute(
            text(
                "SELECT i.business_key, extract(epoch FROM i.created_at), "
                "       extract(epoch FROM a.submitted_at), "
                "       CASE WHEN a.state = 'delivered' THEN extract(epoch FROM a.terminal_at) END "
                "FROM intent i LEFT JOIN attempt a ON a.intent_id = i.id AND a.number = 1 "
                "WHERE i.business_key LIKE :like"
            ),
            {"like": f"{prefix}%"},
        ).all()
    return {
        key: tuple(None if v is None else float(v) for v in values)  # type: ignore[misc]
        for key, *values in rows
    }


def _first_decisions(bench: Bench, keys: Sequence[str]) -> dict[str, float]:
    """business key -> when `authorize` began its first decision (its `decided_at`, the
    worker's clock, which on one machine is the server's too), as epoch seconds."""
    with bench.client.sessions() as session:
        rows = session.execute(
            text(
                "SELECT i.business_key, extract(epoch FROM min(d.decided_at)) "
                "FROM intent i JOIN policy_decision d ON d.intent_id = i.id "
                "WHERE i.business_key = ANY(:keys) GROUP BY i.business_key"
            ),
            {"keys": list(keys)},
        ).all()
    return {key: float(at) for key, at in rows}


async def intent_breakdown(
    bench: Bench,
    sample: Sequence[Arrival],
    rows: dict[str, tuple[float | None, float | None, float | None]],
) -> list[dict[str, Any]]:
    """Where one intent's time goes, from its workflow history's event timestamps."""
    timelines = []
    decided = await asyncio.to_thread(_first_decisions, bench, [a.key for a in sample])
    for arrival in sample:
        assert arrival.workflow_id is not None
        history = await bench.client.temporal.get_workflow_handle(
            arrival.workflow_id
        ).fetch_history()
        recorded, submitted, _ = rows.get(arrival.key, (None, None, None))
        timeline = [("intended", arrival.intended)]
        if recorded is not None:
            timeline.append(("recorded", recorded))
        if (began := decided.get(arrival.key)) is not None:
            # Inside the first workflow task: splits it at the second local activity.
            timeline.append(("authorize began (ledger)", began))
        timeline += history_timeline(history.events)
        if submitted is not None:
            timeline.append(("carrier accepted (ledger)", submitted))
        timeline.sort(key=lambda step: step[1])
        timelines.append(timeline)
    return median_steps(timelines)


def history_timeline(events: Sequence[Any]) -> list[tuple[str, float]]:
    """(label, epoch seconds) for each history event of interest, activities named."""
    from temporalio.api.enums.v1 import EventType as E

    scheduled: dict[int, str] = {}
    seen: Counter[str] = Counter()
    out = []
    for event in events:
        t = event.event_type
        at = event.event_time.ToMicroseconds() / 1e6
        if t == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[event.event_id] = name
            label = f"{name} scheduled"
        elif t == E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            name = scheduled.get(
                event.activity_task_started_event_attributes.scheduled_event_id, "?"
            )
            label = f"{name} started"
        elif t == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            name = scheduled.get(
                event.activity_task_completed_event_attributes.scheduled_event_id, "?"
            )
            label = f"{name} completed"
        elif t == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            label = f"signal {event.workflow_execution_signaled_event_attributes.signal_name}"
        else:
            name = E.Name(t).removeprefix("EVENT_TYPE_").lower()
            if name not in {
                "workflow_execution_started",
                "workflow_task_scheduled",
                "workflow_task_started",
                "workflow_task_completed",
                "marker_recorded",
                "workflow_execution_completed",
            }:
                continue
            label = name.replace("_", " ")
        seen[label] += 1
        out.append((label if seen[label] == 1 else f"{label} #{seen[label]}", at))
    return out


# --- the modes -------------------------------------------------------------------------


def _cpu_meter(bench: Bench) -> CpuMeter:
    stack = bench.stack
    assert stack.temporal is not None and stack.postgres is not None
    assert stack.temporal.pid is not None and stack.postgres.pid is not None
    workers_part, per_worker = worker_cpu_parts(bench.worker_pids())
    return CpuMeter(
        {
            "driver+ingress": (os.getpid(), False),
            "carrier_simulator": (bench.carrier.pid, True),
            "worker": workers_part,
            "temporal": (stack.temporal.pid, True),
            "postgres": (stack.postgres.pid, True),
        },
        detail=per_worker,
    )


async def _settle(bench: Bench, seconds: float = 3.0) -> None:
    """Let the previous phase's receipts and workflow tasks finish before measuring."""
    await asyncio.sleep(seconds)


async def rate_mode(opts: BenchOptions, log: Callable[[str], None]) -> dict[str, Any]:
    """`--rate R --duration S` (one rate) or `--rate-sweep` (peak, then 25/50/75 %)."""
    if opts.rate is not None:
        arrival_offsets(opts.rate, opts.duration)  # refuse an unbounded run before starting
    bench = await start_bench(sms_rate=opts.sms_rate, log=log, workers=opts.workers)
    try:
        cpu = _cpu_meter(bench)
        run_id = uuid.uuid4().hex[:8]
        warm = max(1, opts.warmup)
        bench.numbers = distinct_numbers(warm + (opts.intents if opts.rate_sweep else 0))
        log(f"warm-up: {warm} intents ...")
        await seed_round(bench, f"w{run_id}", 0, warm)
        await run_herald(bench, f"w{run_id}", 0, warm, opts.concurrency)
        peak: dict[str, Any] | None = None
        if opts.rate_sweep:
            log(f"closed loop: {opts.intents} intents, {opts.concurrency} in flight ...")
            await seed_round(bench, run_id, warm, opts.intents)
            before = cpu.snapshot()
            seconds, _ = await run_herald(bench, run_id, warm, opts.intents, opts.concurrency)
            cpu.add("closed", before, cpu.snapshot())
            peak = {
                "intents": opts.intents,
                "concurrency": opts.concurrency,
                "seconds": round(seconds, 2),
                "intents_per_s": round(opts.intents / seconds, 2),
                "cpu_ms_per_intent": cpu.per_unit("closed", opts.intents),
                "cpu_ms_per_intent_by_worker": cpu.per_unit_detail("closed", opts.intents),
            }
            rates = [round(peak["intents_per_s"] * share, 2) for share in SWEEP_SHARES]
            log(f"peak {peak['intents_per_s']} intents/s; open loop at {rates} per s")
        else:
            assert opts.rate is not None
            rates = [opts.rate]
        runs = []
        for rate in rates:
            await _settle(bench)
            runs.append(
                await open_loop(
                    bench,
                    cpu,
                    rate=rate,
                    duration=opts.duration,
                    drain=opts.drain,
                    log=log,
                    breakdown=opts.breakdown,
                )
            )
        return {
            "mode": "rate-sweep" if opts.rate_sweep else "open-loop",
            "workers": opts.workers,
            "sms_budget_per_s": opts.sms_rate,
            "closed_loop_peak": peak,
            "runs": runs,
        }
    finally:
        await bench.close()


# --- output ----------------------------------------------------------------------------


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def render_rates(result: dict[str, Any]) -> str:
    lines = [f"workers: {result.get('workers', 1)} Herald worker process(es)"]
    peak = result.get("closed_loop_peak")
    if peak:
        lines.append(
            f"closed loop: {peak['intents']} intents, {peak['concurrency']} in flight: "
            f"peak {peak['intents_per_s']} intents/s; CPU ms per intent: "
            + ", ".join(f"{k} {v}" for k, v in peak["cpu_ms_per_intent"].items())
        )
    header = (
        f"{'offered/s':>9} {'achieved/s':>10} {'n':>5} | "
        f"{'submitted p50':>13} {'p95':>6} {'p99':>6} {'max':>6} | "
        f"{'delivered p50':>13} {'p95':>6} {'p99':>6} {'max':>6} | "
        f"{'>1s sub':>7} {'>1s del':>7} | {'CPU ms':>6} | backlog"
    )
    lines += [header, "-" * len(header)]
    for run in result["runs"]:
        sub, dlv, back = run["intent_to_submitted_s"], run["intent_to_delivered_s"], run["backlog"]
        lines.append(
            f"{run['offered_per_s']:>9g} {run['achieved_per_s'] or 0:>10g} {run['arrivals']:>5} | "
            f"{_s(sub['p50']):>13} {_s(sub['p95']):>6} {_s(sub['p99']):>6} {_s(sub['max']):>6} | "
            f"{_s(dlv['p50']):>13} {_s(dlv['p95']):>6} {_s(dlv['p99']):>6} {_s(dlv['max']):>6} | "
            f"{run['missed_1s_submitted']:>7.1%} {run['missed_1s_delivered']:>7.1%} | "
            f"{run['cpu_ms_per_intent']['total']:>6} | "
            f"{'GREW' if back['grew'] else 'steady'} (in progress "
            f"{back['in_progress_early_quarter']} -> {back['in_progress_late_quarter']})"
        )
    lines.append(
        "latencies in seconds from the intent recorded (ledger); CPU ms per intent by part:"
    )
    for run in result["runs"]:
        parts = ", ".join(f"{k} {v}" for k, v in run["cpu_ms_per_intent"].items() if k != "total")
        if by_worker := run.get("cpu_ms_per_intent_by_worker"):
            parts += " (" + ", ".join(f"{k} {v}" for k, v in by_worker.items()) + ")"
        lag = run["driver_lag_s"]
        lines.append(
            f"  {run['offered_per_s']:g}/s: {parts}; driver lag p99 {_s(lag['p99'])} s"
            + (
                f"; {run['still_open_after_drain']} still open"
                if run["still_open_after_drain"]
                else ""
            )
            + (f"; start errors {run['start_errors']}" if run["start_errors"] else "")
        )
    for run in result["runs"]:
        if run.get("breakdown"):
            rows = run["breakdown"]
            lines.append(
                f"where the time goes at {run['offered_per_s']:g}/s (median over "
                f"{rows[0].get('intents')} intents; {rows[0].get('other_shapes')} of other shapes):"
            )
            width = max(len(r["step"]) for r in rows)
            for r in rows:
                lines.append(
                    f"  {r['step']:<{width}}  {r['median_ms']:>8.1f} ms  "
                    f"(max {r['max_ms']:.1f}, cumulative {r['cumulative_median_ms']:.1f})"
                )
    return "\n".join(lines)


__all__ = [
    "achieved_rate",
    "arrival_offsets",
    "backlog",
    "in_progress",
    "median_steps",
    "missed",
    "rate_mode",
    "render_rates",
]
