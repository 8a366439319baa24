"""A workflow that reads the wall clock, which the sandbox must refuse (test_sandbox.py).

Kept in a module of its own: the sandbox imports a workflow's module afresh for every run."""

from datetime import datetime

from temporalio import workflow
from temporalio.worker.workflow_sandbox import RestrictedWorkflowAccessError


@workflow.defn(failure_exception_types=[RestrictedWorkflowAccessError])
class WallClockWorkflow:
    @workflow.run
    async def run(self, payload: dict[str, str]) -> str:
        return f"{payload['echo']} at {datetime.now().isoformat()}"
