"""A worker process for the graceful-shutdown test: worker.py's own signal handling and
shutdown (`run_until_signalled`), with one slow activity instead of Herald's.

    python -m tests.ops.grace_worker ADDRESS TASK_QUEUE GRACE_SECONDS
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, Worker


@activity.defn(name="slow_step")
async def slow_step(seconds: float) -> int:
    """Takes `seconds` on its first attempt (heartbeating), returns its attempt number."""
    info = activity.info()
    if info.attempt == 1:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while loop.time() < end:
            activity.heartbeat()
            await asyncio.sleep(0.2)
    return info.attempt


@workflow.defn(name="GraceWorkflow")
class GraceWorkflow:
    @workflow.run
    async def run(self, seconds: float) -> int:
        return await workflow.execute_activity(
            slow_step,
            seconds,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200)),
        )


def build(client: Client, queue: str, grace: float) -> Worker:
    return Worker(
        client,
        task_queue=queue,
        workflows=[GraceWorkflow],
        activities=[slow_step],
        workflow_runner=UnsandboxedWorkflowRunner(),
        graceful_shutdown_timeout=timedelta(seconds=grace),
    )


async def main(address: str, queue: str, grace: float) -> None:
    import worker
    from runtime.logs import configure_logging

    configure_logging()
    client = await Client.connect(address)
    print("ready", flush=True)
    await worker.run_until_signalled([build(client, queue, grace)])
    print("stopped", flush=True)
    worker.exit_now(0)  # as worker.main() does


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
