"""How long Temporal itself takes to hand a task to a worker, with no Herald in the way.

    python -m bench.dispatch [--rate 5] [--count 60] [--warmup 5]

Starts a throwaway dev server (the same binary and flags as `herald dev`, state in
memory) and the bench's bare baseline worker (bench/baseline.py, in a process of its
own), starts `--count` baseline workflows at `--rate` per second (open loop), and reads
their histories: the median and p90 time from each workflow task *scheduled* to
*started*, by its place in the run (the first goes to the normal task queue, the later
ones to the worker's sticky queue after an activity). `herald bench --breakdown` shows
the same steps for Herald's intents; this is the floor those steps sit on. Loopback
only; it stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path

from bench.baseline import BaselineInput, BaselineWorkflow
from bench.stack import percentile
from devstack import ChildProcess, TemporalDevServer, free_port

ROOT = Path(__file__).resolve().parent.parent
TASK_QUEUE = "dispatch-floor"


async def measure(rate: float, count: int, warmup: int) -> dict[int, list[float]]:
    """Milliseconds from scheduled to started of every workflow task, by its index in the
    run, over the workflows after the first `warmup`."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import Client

    server = TemporalDevServer(None, port=free_port(), ui_port=None)
    address = await asyncio.to_thread(server.start)
    worker = ChildProcess(
        "baseline-worker",
        [sys.executable, "-m", "bench.baseline", address, "default", TASK_QUEUE],
        cwd=ROOT,
    )
    try:
        worker.start()
        client = await Client.connect(address)
        prefix = f"dispatch-{uuid.uuid4().hex[:8]}"
        first = await client.start_workflow(
            BaselineWorkflow.run, BaselineInput(1), id=f"{prefix}-ready", task_queue=TASK_QUEUE
        )
        await asyncio.wait_for(first.result(), 60)  # the worker is polling

        async def one(i: int) -> str:
            handle = await client.start_workflow(
                BaselineWorkflow.run, BaselineInput(3), id=f"{prefix}-{i}", task_queue=TASK_QUEUE
            )
            await handle.result()
            return handle.id

        t0 = time.monotonic()
        runs = []
        for i in range(count):
            await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            runs.append(asyncio.ensure_future(one(i)))
        ids = await asyncio.wait_for(asyncio.gather(*runs), 120 + count / rate)
        waits: dict[int, list[float]] = {}
        for workflow_id in ids[warmup:]:
            scheduled = 0.0
            index = 0
            async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
                at = event.event_time.ToMicroseconds() / 1000
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                    scheduled = at
                elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                    waits.setdefault(index, []).append(at - scheduled)
                    index += 1
        return waits
    finally:
        await asyncio.to_thread(worker.stop)
        await asyncio.to_thread(server.stop)


def report(rate: float, waits: dict[int, list[float]]) -> str:
    lines = [f"workflow task scheduled -> started at {rate:g} workflows/s (ms):"]
    for index, values in sorted(waits.items()):
        where = "normal queue" if index == 0 else "sticky queue, after an activity"
        lines.append(
            f"  task {index + 1} ({where}): median {percentile(values, 50):.1f}  "
            f"p90 {percentile(values, 90):.1f}  n {len(values)}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.dispatch", description=__doc__)
    parser.add_argument("--rate", type=float, default=5.0, help="workflows started per second")
    parser.add_argument("--count", type=int, default=60, help="workflows in all (at most 2000)")
    parser.add_argument("--warmup", type=int, default=5, help="first workflows not counted")
    args = parser.parse_args(argv)
    if not 0 < args.rate <= 100 or not args.warmup < args.count <= 2000:
        parser.error("need 0 < --rate <= 100 and --warmup < --count <= 2000")
    print(report(args.rate, asyncio.run(measure(args.rate, args.count, args.warmup))))


if __name__ == "__main__":
    main()
