"""The Temporal Schedules that run ledger maintenance: reconcile every 5 minutes, purge
hourly, archive daily. Each starts a `MaintenanceWorkflow` on the main task queue.

Every worker calls :func:`ensure_schedules` at start-up: it creates a missing schedule
and brings an existing one to the spec below, keeping its paused/unpaused state (an
operator who paused a job in the Web UI keeps it paused across deploys). Any number of
workers may race at start-up: the loser of a create updates instead.

Schedule ids are `<task_queue>-<job>` (`herald-reconcile`, `herald-purge`,
`herald-archive`), so two Herald
deployments sharing a namespace on different task queues keep their own schedules.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)

from activities.contracts import (
    ARCHIVE,
    MAINTENANCE_WORKFLOW,
    PURGE,
    RECONCILE,
    MaintenanceInput,
)

log = logging.getLogger("herald.schedules")

RECONCILE_EVERY = timedelta(minutes=5)
"""How often reconciliation files review items (module constant; see docs/operations.md)."""
PURGE_EVERY = timedelta(hours=1)
"""How often the retention purge runs."""
ARCHIVE_EVERY = timedelta(days=1)
"""How often the archive moves closed intents past the evidence retention (counted in
days, so once a day is soon enough; each run is bounded batches)."""
INTERVALS = {RECONCILE: RECONCILE_EVERY, PURGE: PURGE_EVERY, ARCHIVE: ARCHIVE_EVERY}


@dataclass(frozen=True)
class JobSchedule:
    job: str
    schedule_id: str
    every: timedelta


def schedule_id(task_queue: str, job: str) -> str:
    return f"{task_queue}-{job}"


def job_schedules(task_queue: str) -> list[JobSchedule]:
    return [
        JobSchedule(job, schedule_id(task_queue, job), every) for job, every in INTERVALS.items()
    ]


def desired(task_queue: str, job: JobSchedule) -> Schedule:
    return Schedule(
        action=ScheduleActionStartWorkflow(
            MAINTENANCE_WORKFLOW,
            MaintenanceInput(job.job),
            # Temporal appends the scheduled time to this id for each run.
            id=job.schedule_id,
            task_queue=task_queue,
            execution_timeout=timedelta(minutes=30),
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=job.every)]),
        # A slow run is never doubled: the next one is skipped while it still runs.
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )


async def ensure_schedules(client: Client, task_queue: str) -> list[str]:
    """Create the maintenance schedules, or update existing ones; return their ids."""
    ids: list[str] = []
    for job in job_schedules(task_queue):
        schedule = desired(task_queue, job)
        try:
            await client.create_schedule(job.schedule_id, schedule)
            log.info("schedule created", extra={"schedule_id": job.schedule_id})
        except ScheduleAlreadyRunningError:

            def keep_state(
                input: ScheduleUpdateInput, schedule: Schedule = schedule
            ) -> ScheduleUpdate:
                schedule.state = input.description.schedule.state
                return ScheduleUpdate(schedule=schedule)

            await client.get_schedule_handle(job.schedule_id).update(keep_state)
            log.info("schedule up to date", extra={"schedule_id": job.schedule_id})
        ids.append(job.schedule_id)
    return ids
