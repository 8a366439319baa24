"""What the workflow sandbox costs per run of NotificationWorkflow, in CPU time.

For every workflow run (and every replay of one after a worker evicts it) the SDK's
sandbox builds a fresh instance: a new importer, the workflow's module imported afresh
under it (every module not passed through is executed again, `@workflow.defn`
validating the class again), then the in-sandbox runner and the workflow object. This
script has Herald's runner (runtime.sandbox) create such instances with the SDK's fake
run info and prints the CPU time of one (`time.process_time`, which a busy shared machine
disturbs far less than wall time; many repetitions, median and quartiles), the Python
function calls per instance (the same on a busy machine as on an idle one) and Herald's
modules imported afresh. `--profile N` prints where the time goes (cProfile of N
instances, sorted by cumulative time). A benchmark, not a test: docs/bench.md holds the
figures.

    python -m bench.sandbox_import                 # 300 instances, after 20 warm-up ones
    python -m bench.sandbox_import --profile 200   # and a cProfile of 200 more
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import sys
import time
from typing import Any

import temporalio.converter
import temporalio.workflow
from temporalio.api.common.v1 import Payloads
from temporalio.api.failure.v1 import Failure
from temporalio.worker import WorkflowInstanceDetails, WorkflowRunner
from temporalio.worker.workflow_sandbox._runner import _fake_info

from runtime.sandbox import sandbox_runner

# The workflow as the worker registers it (only worker.py and starter import workflows/).
from worker import NotificationWorkflow, ensure_workflow_bytecode

CALL_COUNT_RUNS = 50
"""Instances the function calls are counted over (under cProfile, untimed)."""

HERALD_PACKAGES = {"workflows", "activities", "domain", "runtime"}


def details(defn: temporalio.workflow._Definition) -> WorkflowInstanceDetails:
    """What the worker hands the runner for a run: here the SDK's own fake run info, as
    `SandboxedWorkflowRunner.prepare_workflow` uses to validate a workflow at start-up."""
    default = temporalio.converter.DataConverter.default
    return WorkflowInstanceDetails(
        payload_converter_factory=default._new_payload_converter,
        failure_converter_class=default.failure_converter_class,
        interceptor_classes=[],
        defn=defn,
        info=_fake_info,
        randomness_seed=-1,
        extern_functions={},
        disable_eager_activity_execution=False,
        worker_level_failure_exception_types=[],
        patch_activation_callback=None,
        last_completion_result=Payloads(),
        last_failure=Failure(),
    )


def instance_cpu_ms(runner: WorkflowRunner, det: WorkflowInstanceDetails, runs: int) -> list[float]:
    """CPU milliseconds of each of `runs` fresh sandboxed instances."""
    times = []
    for _ in range(runs):
        start = time.process_time()
        runner.create_instance(det)
        times.append((time.process_time() - start) * 1000)
    return times


def fresh_modules(runner: WorkflowRunner, det: WorkflowInstanceDetails) -> list[str]:
    """Herald's modules a sandboxed instance imported afresh: those in its module table
    that are not the worker's own module objects (a passed-through module is shared)."""
    instance = runner.create_instance(det)
    sandboxed: Any = getattr(instance, "_inner", instance)  # runtime.sandbox wraps the SDK's
    return sorted(
        name
        for name, module in sandboxed.importer.new_modules.items()
        if name.split(".")[0] in HERALD_PACKAGES and sys.modules.get(name) is not module
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sandbox_import", description=__doc__)
    parser.add_argument("--runs", type=int, default=300, help="instances timed (default 300)")
    parser.add_argument("--warmup", type=int, default=20, help="instances first untimed")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile N more")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0 or args.profile < 0:
        parser.error("--runs must be at least 1, --warmup and --profile at least 0")

    asyncio.run(measure(args))
    return 0


async def measure(args: argparse.Namespace) -> None:
    """Print the figures; a coroutine because a workflow instance is built on a running
    event loop (the worker's, in production)."""
    # As the worker does at start: without it (PYTHONDONTWRITEBYTECODE=1) every instance
    # would compile the fresh modules from source, half of the time measured here.
    if not ensure_workflow_bytecode():
        print("could not write the workflow modules' bytecode; each instance compiles them")
    runner = sandbox_runner()
    det = details(temporalio.workflow._Definition.must_from_class(NotificationWorkflow))
    instance_cpu_ms(runner, det, args.warmup)
    times = instance_cpu_ms(runner, det, args.runs)
    q1, median, q3 = statistics.quantiles(times, n=4)
    print(
        f"sandboxed NotificationWorkflow instance: median {median:.2f} ms CPU "
        f"(quartiles {q1:.2f} / {q3:.2f}, min {min(times):.2f}, {args.runs} runs)"
    )
    # Python function calls do not depend on what else the machine runs: the figure to
    # compare two commits by when the CPU medians are within each other's spread.
    profile = cProfile.Profile()
    profile.enable()
    instance_cpu_ms(runner, det, CALL_COUNT_RUNS)
    profile.disable()
    print(f"Python function calls per instance: {profile_calls(profile) / CALL_COUNT_RUNS:,.0f}")
    print("imported afresh per run:", " ".join(fresh_modules(runner, det)))
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        instance_cpu_ms(runner, det, args.profile)
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


def profile_calls(profile: cProfile.Profile) -> int:
    """All function calls `profile` saw (recursive ones included)."""
    return int(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]


if __name__ == "__main__":
    raise SystemExit(main())
