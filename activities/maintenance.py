"""Maintenance activities run by the reconcile and purge schedules: each one reads or
writes the ledger and returns counts (never ids of people, never destinations).

Their input and result (`MaintenanceInput`, `MaintenanceResult`) are in
`activities/contracts.py`, which `workflows/maintenance.py` imports through the sandbox's
passthrough block, as it does for the notification workflow.
"""

from __future__ import annotations

import asyncio
from functools import partial

from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities import now_utc
from activities.contracts import PURGE, RECONCILE, MaintenanceInput, MaintenanceResult
from ledger import reconcile, retention, settlements


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


PURGE_BATCH = 1000
"""Intents per purge transaction, so a large backlog never holds locks for long."""


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
                recorded = reconcile.record_review_items(session, rows, now)
                # The lifecycle's other half: items whose attempt a later observation
                # settled are closed, saying which observation did.
                closed = settlements.close_settled_items(session, at=now)
            if closed:
                activity.logger.info("reconcile closed %d settled review item(s)", len(closed))
            by_kind: dict[str, int] = {}
            for row in rows:
                by_kind[row.kind] = by_kind.get(row.kind, 0) + 1
            return MaintenanceResult(
                RECONCILE, rows_by_kind=by_kind, review_items_recorded=recorded
            )

        result = await asyncio.to_thread(work)
        # A terminated workflow recorded nothing: find the open intents it left.
        closed = await reconcile.reconcile_workflows(
            self._sessions, partial(workflow_status, activity.client()), now=now_utc()
        )
        if closed:
            result.rows_by_kind[reconcile.WORKFLOW_CLOSED_INTENT_OPEN] = len(closed)
            result.review_items_recorded += len(closed)
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
