"""The outbox relay: starts workflows for committed intents whose fast-path start never
happened (the app used `record`, or crashed between commit and start).

Rows are claimed with `FOR UPDATE SKIP LOCKED`, so several relays never start one row
twice concurrently; the workflow id and USE_EXISTING / REJECT_DUPLICATE make a repeated
start harmless anyway.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from ledger.models import Intent, Outbox
from starter.client import HeraldClient

log = logging.getLogger("herald.relay")

# Give the client's own fast path a moment before the relay steps in.
FAST_PATH_GRACE = timedelta(seconds=2)


async def relay_once(
    client: HeraldClient, *, limit: int = 100, grace: timedelta = FAST_PATH_GRACE
) -> int:
    cutoff = datetime.now(UTC) - grace

    def claim() -> list[tuple[str, str]]:
        with client.sessions.begin() as session:
            rows = session.execute(
                select(Outbox.intent_id, Intent.workflow_id)
                .join(Intent, Intent.id == Outbox.intent_id)
                .where(Outbox.started_at.is_(None), Outbox.created_at <= cutoff)
                .order_by(Outbox.id)
                .limit(limit)
                .with_for_update(of=Outbox, skip_locked=True)
            ).all()
            for intent_id, _ in rows:
                session.query(Outbox).filter(Outbox.intent_id == intent_id).update(
                    {Outbox.tries: Outbox.tries + 1}
                )
            return [(r[0], r[1]) for r in rows]

    started = 0
    for intent_id, workflow_id in await asyncio.to_thread(claim):
        try:
            await client.start(intent_id, workflow_id)
            started += 1
        except Exception as err:  # noqa: BLE001 - keep relaying the others; retried next round
            log.warning("relay could not start intent %s: %s", intent_id, type(err).__name__)
    return started


async def run_relay(client: HeraldClient, stop: asyncio.Event, *, every: float = 1.0) -> None:
    while not stop.is_set():
        try:
            count = await relay_once(client)
            if count:
                log.info("relay started %d workflow(s)", count)
        except Exception:  # noqa: BLE001 - the database may be restarting; try again
            log.exception("relay round failed")
        try:
            await asyncio.wait_for(stop.wait(), timeout=every)
        except TimeoutError:
            pass
