"""MaintenanceWorkflow: one run of a periodic ledger job (reconcile, purge or archive).

Started by the Temporal Schedules that the worker creates at start-up
(`runtime/schedules.py`), so every run is visible in the Web UI with its result, and
runnable by hand (`herald schedules trigger reconcile`). The work itself is one activity.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        ARCHIVE,
        MAINTENANCE_WORKFLOW,
        PURGE,
        RECONCILE,
        MaintenanceInput,
        MaintenanceResult,
    )

ACTIVITY_OF_JOB = {
    RECONCILE: "maintenance_reconcile",
    PURGE: "maintenance_purge",
    ARCHIVE: "maintenance_archive",
}
"""Each job's activity, by name (`activities.maintenance.MaintenanceActivities`)."""

JOB_TIMEOUT = timedelta(minutes=10)
"""Start-to-close bound of one job's activity; the schedule's next run comes anyway."""
JOB_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5),
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=5,
)


# One activity, closed in seconds: nothing to pin, so each run takes the deployment's
# current build (a schedule's runs move to a new build as soon as it is current).
@workflow.defn(name=MAINTENANCE_WORKFLOW, versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class MaintenanceWorkflow:
    @workflow.run
    async def run(self, input: MaintenanceInput) -> MaintenanceResult:
        activity = ACTIVITY_OF_JOB.get(input.job)
        if activity is None:
            raise ApplicationError(f"unknown maintenance job {input.job!r}", non_retryable=True)
        return await workflow.execute_activity(
            activity,
            input,
            result_type=MaintenanceResult,
            start_to_close_timeout=JOB_TIMEOUT,
            retry_policy=JOB_RETRY,
        )
