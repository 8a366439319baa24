"""The ledger's SQLAlchemy engine, for every long-lived process (worker, client, ingress).

A pooled connection is pinged (`SELECT 1`) at checkout only when it has sat idle in the
pool for longer than `IDLE_PING_SECONDS`. SQLAlchemy's `pool_pre_ping` pings on every
checkout, which under load is one extra round trip per transaction (about a quarter of a
small transaction's client CPU, docs/bench.md) for connections that were in use a few
milliseconds earlier.

Why this still hides a Postgres restart: a restart kills every connection. A connection
that sat in the pool across it was idle for at least as long as the restart took, and
is pinged if that was longer than the threshold; a failed ping replaces it and
invalidates the rest of the pool, as `pool_pre_ping` does. A connection that was used
*during* the outage failed there (Postgres was down) and SQLAlchemy invalidated the pool
then. What is left is a restart shorter than the threshold: the first transaction on a
connection checked in just before it fails once, invalidates the pool, and is retried by
whoever ran it (an activity by Temporal, a receipt by the carrier or the next poll, a
`notify` by the app with the same idempotency key). docs/operations.md says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc

IDLE_PING_SECONDS = 1.0
_CHECKED_IN = "herald_checked_in"


def ledger_engine(
    url: str,
    *,
    idle_ping_seconds: float = IDLE_PING_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    **kwargs: Any,
) -> Engine:
    """`create_engine(url, **kwargs)` with the idle ping installed on its pool."""
    engine = create_engine(url, **kwargs)
    dialect = engine.dialect

    @event.listens_for(engine, "checkin")
    def _stamp(dbapi_connection: Any, record: Any) -> None:
        if dbapi_connection is not None:
            record.info[_CHECKED_IN] = clock()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.get(_CHECKED_IN)
        if since is None or clock() - since <= idle_ping_seconds:
            return  # fresh from connect, or in use a moment ago
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as err:
            if dialect.is_disconnect(err, dbapi_connection, None):
                raise exc.InvalidatePoolError(f"idle connection is gone: {err}") from err
            raise exc.DisconnectionError(f"idle connection failed a ping: {err}") from err

    return engine
