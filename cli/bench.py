"""`herald bench`: the benchmark script (bench/harness.py) as a subcommand."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import settings as settings_module


async def cmd_bench(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    import sys

    from bench.harness import run_bench
    from bench.openloop import arrival_offsets
    from bench.stack import BenchOptions

    if args.rate is not None and args.rate_sweep:
        print("herald bench: --rate and --rate-sweep exclude each other", file=sys.stderr)
        return 2
    if args.workers < 1:
        print("herald bench: --workers must be at least 1", file=sys.stderr)
        return 2
    if args.rate is not None:
        try:
            arrival_offsets(args.rate, args.duration)
        except ValueError as err:
            print(f"herald bench: {err}", file=sys.stderr)
            return 2

    opts = BenchOptions(
        intents=args.intents,
        concurrency=args.concurrency,
        sample=args.sample,
        warmup=args.warmup,
        rounds=args.rounds,
        poll_budget=args.poll_budget,
        open=args.open,
        budget=args.budget,
        poll_every=args.poll_every,
        window=args.window,
        rate=args.rate,
        duration=args.duration,
        rate_sweep=args.rate_sweep,
        drain=args.drain,
        breakdown=args.breakdown,
        workers=args.workers,
        out=Path(args.out) if args.out else BenchOptions.out,
        profile=Path(args.profile) if args.profile else None,
    )
    if opts.profile is not None and (opts.poll_budget or args.rate is not None or args.rate_sweep):
        print("herald bench: --profile applies to the throughput mode only", file=sys.stderr)
        return 2
    try:
        return await run_bench(opts, as_json=args.json)
    except RuntimeError as err:
        # A worker that exits at start, an opening that times out: one line, no traceback
        # (the stack is already stopped and its folder removed).
        print(f"herald bench: {err}", file=sys.stderr)
        return 1


def register(add: Any) -> dict[str, Any]:
    bench = add(
        "bench",
        "measure Herald end to end on a throwaway embedded stack, against a bare-Temporal "
        "baseline (or, with --poll-budget, polling against the SMS queue's rate budget)",
        example="herald bench --intents 200 --rate-sweep",
    )
    bench.add_argument("--intents", type=int, default=200, help="intents end to end")
    bench.add_argument("--concurrency", type=int, default=16, help="starts in flight")
    bench.add_argument("--sample", type=int, default=20, help="histories to inspect")
    bench.add_argument("--warmup", type=int, default=10, help="warm-up intents")
    bench.add_argument("--rounds", type=int, default=4, help="alternating rounds")
    bench.add_argument(
        "--poll-budget",
        action="store_true",
        help="measure status lookups/s against the SMS queue's budget instead",
    )
    bench.add_argument("--open", type=int, default=5000, help="unresolved messages")
    bench.add_argument("--budget", type=float, default=20.0, help="SMS activities/s")
    bench.add_argument(
        "--poll-every",
        type=float,
        default=None,
        help="poll interval per message, s (default: open / (1.25 x budget), at least 10)",
    )
    bench.add_argument("--window", type=float, default=30.0, help="measurement window, s")
    bench.add_argument(
        "--rate",
        type=float,
        default=None,
        help="open loop: arrivals per second, independent of completions",
    )
    bench.add_argument(
        "--duration", type=float, default=30.0, help="open loop: seconds of arrivals"
    )
    bench.add_argument(
        "--rate-sweep",
        action="store_true",
        help="closed loop for the peak (--intents), then open loop at 25/50/75 %% of it",
    )
    bench.add_argument(
        "--drain",
        type=float,
        default=60.0,
        help="open loop: seconds to wait for the last intents after the arrivals",
    )
    bench.add_argument(
        "--breakdown",
        type=int,
        nargs="?",
        const=20,
        default=0,
        help="open loop: median time per history step over N intents (20 when N is left "
        "out; default: no breakdown)",
    )
    bench.add_argument(
        "--workers",
        type=int,
        default=1,
        help="Herald worker processes on the same Temporal and Postgres, any mode",
    )
    bench.add_argument("--out", help="results folder (default: bench/results)")
    bench.add_argument(
        "--profile",
        metavar="DIR",
        help="throughput mode: one more Herald round under py-spy after the measured ones; "
        "flame graphs (worker.svg, driver+ingress.svg) into DIR",
    )
    return {"bench": cmd_bench}
