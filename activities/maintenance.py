"""Maintenance activities run by the reconcile, purge and archive schedules: each one
reads or writes the ledger and returns counts (never ids of people, never destinations).

Their input and result (`MaintenanceInput`, `MaintenanceResult`) are in
`activities/contracts.py`, which `workflows/maintenance.py` imports through the sandbox's
passthrough block, as it does for the notification workflow.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from functools import partial

from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities import now_utc
from activities.contracts import ARCHIVE, PURGE, RECONCILE, MaintenanceInput, MaintenanceResult
from ledger import archive, reconcile, retention, review_items

NOTIFICATION_WORKFLOW = "NotificationWorkflow"
"""The notification workflow's type (workflows/notification/), as Temporal lists it."""
RUNNING_NOTIFICATIONS = f"WorkflowType = '{NOTIFICATION_WORKFLOW}' AND ExecutionStatus = 'Running'"


async def workflow_status(client: Client, workflow_id: str) -> reconcile.WorkflowStatus | None:
    """The status of the latest run of `workflow_id`, None when Temporal has none."""
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    status = described.status.name if described.status else "UNKNOWN"
    return status, described.close_time


async def running_notifications(client: Client, limit: int) -> list[tuple[str, datetime | None]]:
    """Up to `limit` running notification workflows: (workflow id, start time)."""
    return [
        (execution.id, execution.start_time)
        async for execution in client.list_workflows(RUNNING_NOTIFICATIONS, limit=limit)
    ]


async def listing_works(client: Client) -> bool:
    """Whether this Temporal answers a visibility list query.

    The time-skipping test server does not: there the comparison of running workflows
    with the ledger is skipped, with a warning (a real server always answers).
    """
    try:
        await running_notifications(client, 1)
    except RPCError as err:
        activity.logger.warning(
            "cannot list running workflows (%s): running workflows are not compared with "
            "the ledger this time",
            err.status.name if err.status else err,
        )
        return False
    return True


PURGE_BATCH = 1000
"""Intents per purge transaction, so a large backlog never holds locks for long."""
ARCHIVE_BATCH = 200
"""Intents per archive transaction (each is exported whole, rows and all)."""


class MaintenanceActivities:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    @activity.defn(name="maintenance_reconcile")
    async def reconcile(self, input: MaintenanceInput) -> MaintenanceResult:
        """Find what needs review and file each row as a review item (once)."""

        def work() -> MaintenanceResult:
            now = now_utc()
            with self._sessions.begin() as session:
                rows = reconcile.find(session, now=now)
                recorded = review_items.record_review_items(session, rows, now)
                # The lifecycle's other half: items whose attempt a later observation
                # settled are closed, saying which observation did.
                closed = review_items.close_settled_items(session, at=now)
            if closed:
                activity.logger.info("reconcile closed %d settled review item(s)", len(closed))
            by_kind: dict[str, int] = {}
            for row in rows:
                by_kind[row.kind] = by_kind.get(row.kind, 0) + 1
            return MaintenanceResult(
                RECONCILE, rows_by_kind=by_kind, review_items_recorded=recorded
            )

        result = await asyncio.to_thread(work)
        # A terminated workflow recorded nothing, and a restore leaves one side without
        # the other: find the open intents without a live workflow, and the running
        # workflows without an intent.
        client = activity.client()
        differences = await reconcile.reconcile_workflows(
            self._sessions,
            partial(workflow_status, client),
            now=now_utc(),
            running=partial(running_notifications, client) if await listing_works(client) else None,
        )
        for row in differences:
            result.rows_by_kind[row.kind] = result.rows_by_kind.get(row.kind, 0) + 1
        result.review_items_recorded += len(differences)
        activity.logger.info(
            "reconcile found %d row(s), filed %d new review item(s)",
            sum(result.rows_by_kind.values()),
            result.review_items_recorded,
        )
        return result

    @activity.defn(name="maintenance_purge")
    async def purge(self, input: MaintenanceInput) -> MaintenanceResult:
        """Remove readable PII whose retention has passed, in short transactions."""

        def work() -> MaintenanceResult:
            report = retention.purge_in_batches(
                self._sessions.begin, now=now_utc(), batch=PURGE_BATCH
            )
            return MaintenanceResult(
                PURGE,
                intents_purged=report.intents_purged,
                attempts_purged=report.attempts_purged,
                held=report.held,
                batches=report.batches,
                idempotency_keys_expired=report.idempotency_keys_expired,
            )

        result = await asyncio.to_thread(work)
        activity.logger.info(
            "purge removed PII of %d intent(s) and %d attempt(s); %d on legal hold; "
            "%d expired idempotency key(s) deleted",
            result.intents_purged,
            result.attempts_purged,
            result.held,
            result.idempotency_keys_expired,
        )
        return result

    @activity.defn(name="maintenance_archive")
    async def archive(self, input: MaintenanceInput) -> MaintenanceResult:
        """Move closed intents past the policy's evidence retention to the archive."""

        def work() -> MaintenanceResult:
            report = archive.archive_in_batches(
                self._sessions.begin, now=now_utc(), batch=ARCHIVE_BATCH
            )
            return MaintenanceResult(
                ARCHIVE,
                intents_archived=report.archived,
                held=report.held,
                batches=report.batches,
            )

        result = await asyncio.to_thread(work)
        activity.logger.info(
            "archive moved %d closed intent(s) past the evidence retention; %d on legal hold",
            result.intents_archived,
            result.held,
        )
        return result
