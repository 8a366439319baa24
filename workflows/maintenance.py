"""MaintenanceWorkflow: one run of a periodic ledger job (reconcile or purge).

Started by the Temporal Schedules that the worker creates at start-up
(`runtime/schedules.py`), so every run is visible in the Web UI with its result, and
runnable by hand (`herald schedules trigger reconcile`). The work itself is one activity.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.maintenance import (
        PURGE,
        RECONCILE,
        MaintenanceActivities,
        MaintenanceInput,
        MaintenanceResult,
    )

JOB_TIMEOUT = timedelta(minutes=10)
"""Start-to-close bound of one job's activity; the schedule's next run comes anyway."""
JOB_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5),
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=5,
)


@workflow.defn
class MaintenanceWorkflow:
    @workflow.run
    async def run(self, input: MaintenanceInput) -> MaintenanceResult:
        if input.job == RECONCILE:
            method = MaintenanceActivities.reconcile
        elif input.job == PURGE:
            method = MaintenanceActivities.purge
        else:
            raise ApplicationError(f"unknown maintenance job {input.job!r}", non_retryable=True)
        return await workflow.execute_activity_method(
            method,
            input,
            start_to_close_timeout=JOB_TIMEOUT,
            retry_policy=JOB_RETRY,
        )
