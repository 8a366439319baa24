"""The outbox relay: starts workflows for committed intents whose fast-path start never
happened (the app used `record`, or crashed between commit and start).

It runs inside every worker process (`worker.py`) and alone as `herald relay`.

Crash safety and "never two runs" rest on three things:

- Rows are claimed with `SELECT ... FOR UPDATE SKIP LOCKED` and the row lock is *held*
  while the workflow is started and until `started_at` is written in the same
  transaction: two relays (two workers, or a worker and `herald relay`) never start one
  row at the same time; the other one skips it.
- The workflow id comes from the business key, and the start uses `USE_EXISTING` for a
  running run and `REJECT_DUPLICATE` for a closed one: a start repeated after a crash
  between "started" and "marked" finds the run that exists instead of making another.
- Only rows older than `FAST_PATH_GRACE` are claimed, so the client's own fast path
  (`notify` -> `start`) normally marks its row first and the relay finds nothing to do.

A row that cannot be started (Temporal unreachable) keeps `started_at` NULL, has its
`tries` counted and `last_error` set (an error type, never a message: messages can carry
payload details), and is tried again on the next round.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ledger.models import Intent, Outbox
from starter.client import HeraldClient

log = logging.getLogger("herald.relay")

FAST_PATH_GRACE = timedelta(seconds=2)
"""Give the client's own fast path a moment before the relay steps in."""
RELAY_EVERY_SECONDS = 1.0
"""Pause between rounds when the last round found nothing to do."""
BATCH = 50
"""Rows claimed (and locked) per transaction."""
START_RPC_TIMEOUT = timedelta(seconds=5)
"""Bound on one start call, so a stalled frontend cannot hold row locks for long."""


def _claim(session: Session, cutoff: datetime, limit: int) -> list[tuple[str, str]]:
    rows = session.execute(
        select(Outbox.intent_id, Intent.workflow_id)
        .join(Intent, Intent.id == Outbox.intent_id)
        .where(Outbox.started_at.is_(None), Outbox.created_at <= cutoff)
        .order_by(Outbox.id)
        .limit(limit)
        .with_for_update(of=Outbox, skip_locked=True)
    ).all()
    return [(intent_id, workflow_id) for intent_id, workflow_id in rows]


def _settle(session: Session, started: list[str], failed: dict[str, str], at: datetime) -> None:
    if started:
        session.execute(
            update(Outbox)
            .where(Outbox.intent_id.in_(started), Outbox.started_at.is_(None))
            .values(started_at=at, tries=Outbox.tries + 1, last_error=None)
        )
    for intent_id, error in failed.items():
        session.execute(
            update(Outbox)
            .where(Outbox.intent_id == intent_id)
            .values(tries=Outbox.tries + 1, last_error=error)
        )


async def relay_once(
    client: HeraldClient, *, limit: int = BATCH, grace: timedelta = FAST_PATH_GRACE
) -> int:
    """One round: claim up to `limit` unstarted rows, start their workflows, mark them.

    Returns how many rows were marked started by this round.
    """
    cutoff = datetime.now(UTC) - grace
    # The session lives across awaits on purpose: its transaction holds the row locks
    # while the starts happen. It is only ever used by one thread at a time.
    session = client.sessions()
    try:
        claimed = await asyncio.to_thread(_claim, session, cutoff, limit)
        if not claimed:
            await asyncio.to_thread(session.rollback)
            return 0
        started: list[str] = []
        failed: dict[str, str] = {}
        for intent_id, workflow_id in claimed:
            try:
                await client.start_workflow(intent_id, workflow_id, rpc_timeout=START_RPC_TIMEOUT)
                started.append(intent_id)
            except Exception as err:  # noqa: BLE001 - keep the others; retried next round
                failed[intent_id] = type(err).__name__
                log.warning(
                    "relay could not start a workflow",
                    extra={"intent_id": intent_id, "error_type": type(err).__name__},
                )
                if len(failed) >= 3 and not started:
                    # Temporal is most likely down: stop hammering it and release the
                    # locks; the rows not tried are left as they are for the next round.
                    break

        def settle() -> None:
            _settle(session, started, failed, datetime.now(UTC))
            session.commit()

        await asyncio.to_thread(settle)
        return len(started)
    except BaseException:
        await asyncio.to_thread(session.rollback)
        raise
    finally:
        await asyncio.to_thread(session.close)


async def run_relay(
    client: HeraldClient, stop: asyncio.Event, *, every: float = RELAY_EVERY_SECONDS
) -> None:
    """Relay until `stop` is set; a failed round (database restarting) is logged and retried."""
    log.info("outbox relay running")
    while not stop.is_set():
        count = 0
        try:
            count = await relay_once(client)
            if count:
                log.info("relay started %d workflow(s)", count)
        except Exception:  # noqa: BLE001 - the database may be restarting; try again
            log.exception("relay round failed")
        if count >= BATCH:
            continue  # a backlog: go on at once
        try:
            await asyncio.wait_for(stop.wait(), timeout=every)
        except TimeoutError:
            pass
    log.info("outbox relay stopped")
