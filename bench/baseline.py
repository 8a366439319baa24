"""The baseline for `herald bench`: a bare Temporal workflow running N no-op activities in
sequence, on its own task queue, so Herald's throughput can be read as a ratio to what
the same Temporal server does with the same number of activities and no work in them.

Standard library and `temporalio` only, like a Herald workflow module (the sandbox
re-imports it on every run).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow


@dataclass
class BaselineInput:
    activities: int
    """How many no-op activities to run, one after the other."""


@activity.defn(name="baseline_noop")
async def noop(step: int) -> int:
    return step


@workflow.defn(name="BaselineWorkflow")
class BaselineWorkflow:
    @workflow.run
    async def run(self, input: BaselineInput) -> int:
        done = 0
        for step in range(input.activities):
            await workflow.execute_activity(
                noop, step, start_to_close_timeout=timedelta(seconds=30)
            )
            done += 1
        return done


async def serve(address: str, namespace: str, task_queue: str) -> None:
    """Run the baseline worker until SIGTERM (a process of its own, like Herald's worker)."""
    import asyncio
    import signal

    from temporalio.client import Client
    from temporalio.worker import Worker

    client = await Client.connect(address, namespace=namespace)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with Worker(
        client, task_queue=task_queue, workflows=[BaselineWorkflow], activities=[noop]
    ):
        await stop.wait()


if __name__ == "__main__":
    import asyncio
    import sys

    asyncio.run(serve(*sys.argv[1:4]))
