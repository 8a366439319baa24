"""`herald bench`: measure Herald end to end on the embedded stack, against a baseline.

Two modes, each on its own throwaway stack (temp data folder, free ports, headless, the
worker in its own process, the carrier simulator with fast receipts in another):

- **throughput** (default): N intents end to end (record, authorize, submit, signed
  receipt, delivered). Reports intents/s, p50/p95/p99 from intent to submitted and to
  delivered (from the ledger), Temporal history events and actions per intent (from a
  sample of histories), ledger rows per intent and the worker's RSS; then, on the same
  Temporal server, a bare workflow with the same number of no-op activities
  (bench/baseline.py, in-process worker, own task queue), so the headline is a
  ratio Herald / baseline rather than an absolute number.
- **poll budget** (`--poll-budget`): K messages that never resolve, polled far more
  often than the SMS task queue's budget allows (`max_task_queue_activities_per_second`,
  enforced by the Temporal server). Reports the lookups per second the carrier actually
  received over a fixed window, against the budget.

Every mode takes `--workers N`: N Herald worker processes on the same Temporal server and
Postgres (the stack's own and N - 1 started the same way, each with its own log and
metrics ports), all stopped at the end whatever happens.

Results are printed and written as JSON to bench/results/<timestamp>.json. What the modes
share (the options, the stack and its workers, the meters, one round of intents) is in
bench/stack.py; the open loop is bench/openloop.py.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import platform
import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench.openloop import rate_mode, render_rates
from bench.stack import (
    REPO_ROOT,
    Bench,
    BenchOptions,
    CpuMeter,
    RssSampler,
    bounded,
    distinct_numbers,
    history_counts,
    in_bare_worker_units,
    run_baseline,
    run_herald,
    seed_consents,
    seed_round,
    start_bench,
    summary,
    worker_cpu_parts,
)
from devstack import ChildProcess
from domain.requests import NotificationRequest
from ledger.templates import seed_policy


def ledger_figures(bench: Bench, key_prefix: str) -> dict[str, Any]:
    like = f"{key_prefix}%"
    with bench.client.sessions() as session:
        rows = session.execute(
            text(
                "SELECT extract(epoch FROM a.submitted_at - i.created_at), "
                "       extract(epoch FROM a.terminal_at - i.created_at), a.state "
                "FROM attempt a JOIN intent i ON i.id = a.intent_id "
                "WHERE i.business_key LIKE :like"
            ),
            {"like": like},
        ).all()
        counts = {}
        for table, where in (
            ("intent", "business_key LIKE :like"),
            ("outbox", "intent_id IN (SELECT id FROM intent WHERE business_key LIKE :like)"),
            (
                "policy_decision",
                "intent_id IN (SELECT id FROM intent WHERE business_key LIKE :like)",
            ),
            ("attempt", "intent_id IN (SELECT id FROM intent WHERE business_key LIKE :like)"),
            (
                "observation",
                "attempt_id IN (SELECT a.id FROM attempt a JOIN intent i ON i.id = a.intent_id "
                "WHERE i.business_key LIKE :like)",
            ),
            (
                "operator_action",
                "intent_id IN (SELECT id FROM intent WHERE business_key LIKE :like)",
            ),
        ):
            counts[table] = session.execute(
                text(f"SELECT count(*) FROM {table} WHERE {where}"),  # noqa: S608 - fixed names
                {"like": like},
            ).scalar_one()
    intents = max(counts["intent"], 1)
    submitted = [float(r[0]) for r in rows if r[0] is not None]
    delivered = [float(r[1]) for r in rows if r[1] is not None and r[2] == "delivered"]
    return {
        "intent_to_submitted_s": summary(submitted),
        "intent_to_delivered_s": summary(delivered),
        "attempt_states": dict(Counter(r[2] for r in rows)),
        "ledger_rows_per_intent": round(sum(counts.values()) / intents, 2),
        "ledger_rows_by_table": {k: round(v / intents, 2) for k, v in counts.items()},
    }


async def throughput(opts: BenchOptions, log: Callable[[str], None]) -> dict[str, Any]:
    bench = await start_bench(sms_rate=opts.sms_rate, log=log, workers=opts.workers)
    baseline_workers: list[ChildProcess] = []
    try:
        bench.numbers = distinct_numbers(opts.intents + opts.warmup + profiled_size(opts))
        run_id = uuid.uuid4().hex[:8]
        task_queue = f"bench-baseline-{run_id}"
        cfg = bench.stack.cfg
        # The baseline workers are processes of their own, as many as Herald's: the same
        # shape, so the ratio compares the work done, not who shares a CPU with the driver.
        for n in range(1, opts.workers + 1):
            baseline_worker = ChildProcess(
                "baseline-worker" if n == 1 else f"baseline-worker-{n}",
                [
                    sys.executable,
                    "-m",
                    "bench.baseline",
                    cfg.temporal_target,
                    cfg.temporal_namespace,
                    task_queue,
                ],
                log_path=cfg.data_path
                / ("baseline-worker.log" if n == 1 else f"baseline-worker-{n}.log"),
                cwd=REPO_ROOT,
            )
            baseline_workers.append(baseline_worker)  # before start: stopped whatever happens
            baseline_worker.start()
        log(f"warm-up: {opts.warmup} Herald intents and {opts.warmup} baseline workflows ...")
        await seed_round(bench, f"w{run_id}", 0, opts.warmup)
        _, warm_ids = await run_herald(bench, f"w{run_id}", 0, opts.warmup, opts.concurrency)
        warm = await history_counts(bench.client.temporal, warm_ids)
        activities = max(1, round(warm.get("activities", 3) + warm.get("local_activities", 0)))
        await run_baseline(bench, task_queue, opts.warmup, activities, opts.concurrency)

        # Alternate rounds so both sides see the same machine (this one is shared).
        rounds = max(1, min(opts.rounds, opts.intents))
        sizes = [
            opts.intents // rounds + (1 if r < opts.intents % rounds else 0) for r in range(rounds)
        ]
        base_s = herald_s = 0.0
        base_ids: list[str] = []
        herald_ids: list[str] = []
        offset = opts.warmup
        stack = bench.stack
        assert stack.temporal is not None and stack.postgres is not None
        assert stack.temporal.pid is not None and stack.postgres.pid is not None
        baseline_pids = [w.pid for w in baseline_workers if w.pid is not None]
        workers_part, per_worker = worker_cpu_parts(bench.worker_pids())
        cpu = CpuMeter(
            {
                "driver+ingress": (os.getpid(), False),
                "carrier_simulator": (bench.carrier.pid, True),
                "worker": workers_part,
                "baseline_worker": (baseline_pids, True),
                "temporal": (stack.temporal.pid, True),
                "postgres": (stack.postgres.pid, True),
            },
            detail=per_worker,
        )
        with RssSampler(bench.worker_pids()) as rss:
            for r, size in enumerate(sizes, 1):
                log(
                    f"round {r}/{rounds}: baseline {size} workflows x {activities} no-op "
                    f"activities, then {size} Herald intents ..."
                )
                before = cpu.snapshot()
                seconds, ids = await run_baseline(
                    bench, task_queue, size, activities, opts.concurrency
                )
                cpu.add("baseline", before, cpu.snapshot())
                base_s += seconds
                base_ids += ids
                await seed_round(bench, run_id, offset, size)
                before = cpu.snapshot()
                seconds, ids = await run_herald(bench, run_id, offset, size, opts.concurrency)
                cpu.add("herald", before, cpu.snapshot())
                herald_s += seconds
                herald_ids += ids
                offset += size
        profiled = await profile_round(bench, opts, run_id, offset, log)
        sample = herald_ids[:: max(1, len(herald_ids) // opts.sample)][: opts.sample]
        herald_hist = await history_counts(bench.client.temporal, sample)
        base_hist = await history_counts(
            bench.client.temporal,
            base_ids[:: max(1, len(base_ids) // opts.sample)][: opts.sample],
        )
        figures = await asyncio.to_thread(ledger_figures, bench, f"bench:{run_id}:")
        herald_ips = opts.intents / herald_s
        base_ips = opts.intents / base_s
        return {
            "mode": "throughput",
            "workers": opts.workers,
            "intents": opts.intents,
            "concurrency": opts.concurrency,
            "rounds": rounds,
            "herald": {
                "seconds": round(herald_s, 2),
                "intents_per_s": round(herald_ips, 2),
                **figures,
                "history_per_intent": herald_hist,
                "worker_rss": rss.report(),
                "cpu_ms_per_intent": cpu.per_unit("herald", opts.intents),
                "cpu_ms_per_intent_by_worker": cpu.per_unit_detail("herald", opts.intents),
            },
            "baseline": {
                "activities_per_workflow": activities,
                "seconds": round(base_s, 2),
                "workflows_per_s": round(base_ips, 2),
                "history_per_workflow": base_hist,
                "cpu_ms_per_workflow": cpu.per_unit("baseline", opts.intents),
            },
            "cpu_per_intent_in_bare_worker_units": in_bare_worker_units(
                cpu.per_unit("herald", opts.intents), cpu.per_unit("baseline", opts.intents)
            ),
            "ratio_herald_to_baseline": round(herald_ips / base_ips, 3),
            **({"profile": profiled} if profiled else {}),
            "simulator": {
                "creates": await bench.carrier.count("create"),
                "lookups": await bench.carrier.count("lookup"),
            },
        }
    finally:
        try:
            await asyncio.gather(*(asyncio.to_thread(w.stop) for w in baseline_workers))
        finally:
            await bench.close()


def profiled_size(opts: BenchOptions) -> int:
    """Intents in the profiled round (none without --profile): as many as the measured
    rounds together, so the graphs hold enough samples."""
    return opts.intents if opts.profile is not None else 0


async def profile_round(
    bench: Bench, opts: BenchOptions, run_id: str, offset: int, log: Callable[[str], None]
) -> dict[str, Any] | None:
    """With --profile: one more round of Herald intents (as many as the measured run) with
    py-spy sampling each worker and the driver + ingress; not part of any figure."""
    if opts.profile is None:
        return None
    from bench.profile import Profiler

    size = profiled_size(opts)
    pids = bench.worker_pids()
    # Named as the CPU figures name them (worker_cpu_parts): "worker", or worker-1..N.
    targets = [(f"worker-{n}" if len(pids) > 1 else "worker", p) for n, p in enumerate(pids, 1)]
    targets.append(("driver+ingress", os.getpid()))
    log(f"profiled round: {size} Herald intents under py-spy, graphs into {opts.profile} ...")
    await seed_round(bench, f"p{run_id}", offset, size)
    with Profiler(opts.profile, targets) as profiler:
        await run_herald(bench, f"p{run_id}", offset, size, opts.concurrency)
    return {"intents": size, "svg": profiler.written(), "errors": profiler.errors()}


# --- poll-budget mode ------------------------------------------------------------------


def bench_policy(poll_every: float) -> str:
    """The demo policy with polls every `poll_every` seconds and a long horizon."""
    import policies

    document = policies.load_packaged("demo")
    document = re.sub(
        r'^version = ".*"$',
        f'version = "bench-poll-{int(poll_every)}s.{uuid.uuid4().hex[:6]}"',
        document,
        flags=re.M,
    )
    fallback = (
        "[fallback]\n"
        "email_after_seconds = false\n"
        "email_on_permanent_failure = false\n"
        "sms_poll_horizon_seconds = 7200\n"
        f"poll_initial_seconds = {poll_every}\n"
        f"poll_max_seconds = {poll_every}\n"
        "expiry_seconds = 14400\n"
    )
    document, n = re.subn(
        r"^\[fallback\]\n(?:[^\[\n][^\n]*\n|\n)*", fallback + "\n", document, flags=re.M
    )
    if n != 1:
        raise RuntimeError("the demo policy has no [fallback] table to adapt")
    return document


def ahead_of_budget(per_second: list[int], budget: float) -> float:
    """The most lookups made beyond `budget x elapsed seconds`, at any whole second of
    the window: 0 means the running total never went above the budget line."""
    total, ahead = 0, 0.0
    for elapsed, count in enumerate(per_second, 1):
        total += count
        ahead = max(ahead, total - budget * elapsed)
    return round(ahead, 1)


def count_submitted(bench: Bench, key_prefix: str) -> int:
    with bench.client.sessions() as session:
        return session.execute(
            text(
                "SELECT count(*) FROM attempt a JOIN intent i ON i.id = a.intent_id "
                "WHERE i.business_key LIKE :like AND a.remote_id IS NOT NULL"
            ),
            {"like": f"{key_prefix}%"},
        ).scalar_one()


async def poll_budget(opts: BenchOptions, log: Callable[[str], None]) -> dict[str, Any]:
    numbers = distinct_numbers(opts.open)
    bench = await start_bench(
        sms_rate=opts.open_rate, never_resolves=numbers, log=log, workers=opts.workers
    )
    try:
        bench.numbers = numbers
        poll_every = opts.poll_interval()
        document = bench_policy(poll_every)

        def activate() -> str:
            with bench.client.sessions.begin() as session:
                return seed_policy(session, document, name="bench-poll", activate=True)

        policy_version = await asyncio.to_thread(activate)
        run_id = uuid.uuid4().hex[:8]
        prefix = f"bench:{run_id}:"
        log(f"opening {opts.open} messages that never resolve (SMS budget {opts.open_rate}/s) ...")
        opened = time.monotonic()
        recipients = [f"b-{run_id}-{i}" for i in range(opts.open)]
        await asyncio.to_thread(seed_consents, bench, recipients)

        async def one(i: int) -> None:
            key = f"{prefix}i-{i}"
            if i and i % 500 == 0:
                log(f"  {i} recorded and started ({time.monotonic() - opened:.0f} s)")
            await bench.client.notify(
                NotificationRequest(
                    business_key=key,
                    recipient_ref=recipients[i],
                    template_key="demo",
                    phone=numbers[i],
                    variables={"n": i, "intent_id": key},
                )
            )

        await bounded(opts.concurrency, [functools.partial(one, i) for i in range(opts.open)])
        deadline = time.monotonic() + opts.timeout
        reported = time.monotonic()
        while (submitted := await asyncio.to_thread(count_submitted, bench, prefix)) < opts.open:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {submitted} of {opts.open} opened in time")
            if time.monotonic() - reported >= 30:
                reported = time.monotonic()
                log(f"  {submitted} submitted ({reported - opened:.0f} s)")
            await asyncio.sleep(1)
        open_s = time.monotonic() - opened
        log(
            f"all {opts.open} submitted in {open_s:.0f} s; {opts.workers} worker process(es) "
            f"restarted with budget {opts.budget}/s ..."
        )
        await bench.restart_workers(opts.budget)
        await bench.wait_for_workers()
        restarted = time.monotonic()
        while await bench.carrier.count("lookup", restarted) == 0:
            if time.monotonic() > restarted + 60:
                raise RuntimeError("no lookup reached the carrier after the worker restart")
            await asyncio.sleep(0.2)
        await asyncio.sleep(opts.settle)
        polls_before = await bench.activities_by_worker("poll_sms")
        start = time.monotonic()
        log(f"measuring lookups for {opts.window:.0f} s ...")
        await asyncio.sleep(opts.window)
        end = start + opts.window
        polls_after = await bench.activities_by_worker("poll_sms")
        arrivals = await bench.carrier.arrivals("lookup")
        lookups = sum(1 for at in arrivals if start <= at < end)
        per_second = [
            sum(1 for at in arrivals if start + s <= at < start + s + 1)
            for s in range(int(opts.window))
        ]
        rate = lookups / opts.window
        return {
            "mode": "poll-budget",
            "workers": opts.workers,
            "open_messages": opts.open,
            "policy_version": policy_version,
            "poll_every_s": poll_every,
            "demand_lookups_per_s": round(opts.open / poll_every, 1),
            "budget_per_s": opts.budget,
            "window_s": opts.window,
            "lookups_in_window": lookups,
            "lookups_per_s": round(rate, 2),
            "ratio_to_budget": round(rate / opts.budget, 3),
            "max_in_one_second": max(per_second) if per_second else 0,
            "max_per_s_over_5s": max(
                (sum(per_second[i : i + 5]) / 5 for i in range(len(per_second) - 4)),
                default=0,
            ),
            "max_ahead_of_budget": ahead_of_budget(per_second, opts.budget),
            "lookups_each_second": per_second,
            "polls_in_window_by_worker": [
                None if a is None or b is None else round(a - b)
                for b, a in zip(polls_before, polls_after, strict=True)
            ],
            "creates_in_window": await bench.carrier.count("create", start, end),
            "open_phase_s": round(open_s, 1),
        }
    finally:
        await bench.close()


# --- entry point -----------------------------------------------------------------------


def write_result(result: dict[str, Any], opts: BenchOptions) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    result = {
        "at": datetime.now(UTC).isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(opts).items()},
        **result,
    }
    opts.out.mkdir(parents=True, exist_ok=True)
    path = opts.out / f"{stamp}-{result['mode']}.json"
    path.write_text(json.dumps(result, indent=2))
    return path


def render(result: dict[str, Any]) -> str:
    if result["mode"] in ("open-loop", "rate-sweep"):
        return render_rates(result)
    if result["mode"] == "poll-budget":
        by_worker = result.get("polls_in_window_by_worker") or []
        return (
            f"poll budget: {result.get('workers', 1)} worker process(es), "
            f"{result['open_messages']} open messages, demand "
            f"~{result['demand_lookups_per_s']} lookups/s, budget {result['budget_per_s']}/s\n"
            f"  measured {result['lookups_per_s']} lookups/s over {result['window_s']:.0f} s "
            f"({result['ratio_to_budget']:.1%} of the budget; max {result['max_in_one_second']} "
            f"in one second, {result['max_per_s_over_5s']:.1f}/s over the busiest 5 s; "
            f"{result['creates_in_window']} creates in the window)\n"
            f"  the running total was never more than {result['max_ahead_of_budget']:g} "
            f"lookups above budget x elapsed seconds"
            + (
                "\n  polls run in the window by each worker (its SDK metrics): "
                + ", ".join("?" if n is None else str(n) for n in by_worker)
                if len(by_worker) > 1
                else ""
            )
        )
    h, b = result["herald"], result["baseline"]
    hist, bhist = h["history_per_intent"], b["history_per_workflow"]
    per_worker = h.get("cpu_ms_per_intent_by_worker") or {}
    return "\n".join(
        [
            f"workers: {result.get('workers', 1)} Herald worker process(es) "
            f"(and as many baseline workers)",
            f"herald:   {result['intents']} intents in {h['seconds']} s = "
            f"{h['intents_per_s']} intents/s",
            f"baseline: {result['intents']} workflows x {b['activities_per_workflow']} no-op "
            f"activities in {b['seconds']} s = {b['workflows_per_s']} workflows/s",
            f"ratio herald/baseline: {result['ratio_herald_to_baseline']}",
            f"intent -> submitted: p50 {h['intent_to_submitted_s']['p50']} s  "
            f"p95 {h['intent_to_submitted_s']['p95']} s  p99 {h['intent_to_submitted_s']['p99']} s",
            f"intent -> delivered: p50 {h['intent_to_delivered_s']['p50']} s  "
            f"p95 {h['intent_to_delivered_s']['p95']} s  p99 {h['intent_to_delivered_s']['p99']} s",
            f"history events per intent: {hist.get('events')} (baseline {bhist.get('events')}); "
            f"actions per intent: {hist.get('actions')} (baseline {bhist.get('actions')}; "
            f"+{hist.get('search_attribute_upserts', 0)} search-attribute upserts)",
            f"ledger rows per intent: {h['ledger_rows_per_intent']} {h['ledger_rows_by_table']}",
            f"worker RSS: peak {h['worker_rss']['peak_mib']} MiB, "
            f"end {h['worker_rss']['end_mib']} MiB",
            "CPU ms per intent: " + _parts(h["cpu_ms_per_intent"]),
            *(["  of which, by worker: " + _parts(per_worker)] if per_worker else []),
            "CPU ms per baseline workflow: " + _parts(b["cpu_ms_per_workflow"]),
            "CPU per intent in bare-worker units (its CPU per workflow in this run = 1): "
            + _parts(result.get("cpu_per_intent_in_bare_worker_units") or {}),
            *(
                [f"flame graphs ({result['profile']['intents']} intents, not measured): "]
                + [f"  {svg}" for svg in result["profile"]["svg"]]
                + [f"  failed: {e}" for e in result["profile"]["errors"]]
                if result.get("profile")
                else []
            ),
        ]
    )


def _parts(ms: dict[str, float]) -> str:
    return ", ".join(f"{name} {value}" for name, value in ms.items() if value or name == "total")


async def run_bench(opts: BenchOptions, *, as_json: bool = False) -> int:
    def log(message: str) -> None:
        print(f"herald bench: {message}", file=sys.stderr, flush=True)

    if opts.poll_budget:
        mode = poll_budget
    elif opts.rate is not None or opts.rate_sweep:
        mode = rate_mode
    else:
        mode = throughput
    result = await asyncio.wait_for(mode(opts, log), timeout=opts.timeout + 300)
    path = write_result(result, opts)
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        print(render(result))
        print(f"written to {path}")
    return 0
