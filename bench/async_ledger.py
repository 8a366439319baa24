"""What a ledger transaction costs in CPU from async code: a thread hop vs SQLAlchemy's asyncio.

    python -m bench.async_ledger [--transactions 3000] [--concurrency 16] [--reads 0]
                                 [--modes thread,async-run_sync,async-native] [--loop uvloop]

Issue 42 named an async ledger path (SQLAlchemy's `AsyncSession` on psycopg's async
connection, the repository functions through `run_sync`) as the largest lever left on
the worker and the ingress: every ledger transaction runs in a thread
(`ledger.transactions.in_transaction`). This measures the lever alone, on a throwaway
embedded Postgres (loopback, its own data folder, removed at the end): the same unit of
work (read a row by key, `--reads` more reads, insert a row, update a row: the shape of
a receipt's `record_observation`) through the same ORM, done `--transactions` times with
`--concurrency` in flight, each way in turn for `--rounds` rounds:

- `thread`: a sync `Session` in `asyncio.to_thread` (what Herald does); `thread:N` in an
  executor of N threads;
- `async-run_sync`: an `AsyncSession` running the same sync function through `run_sync`
  (the migration path that keeps the repository functions as they are);
- `async-native`: an `AsyncSession` awaiting each statement (a rewrite of them all).

Printed: this process's CPU (user + system) per transaction, Postgres's CPU per
transaction, and the wall time (medians). Bounded: the transactions given, then it stops.

What it showed (docs/bench.md, issue 42): the async session is cheaper only when many
transactions are in flight at once, where the threads fight over the GIL (16 in flight:
about 30 % less client CPU); with one or two in flight, which is what Herald's worker and
ingress run under `herald bench`, it costs as much or more. Herald's transactions stay in
threads.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import psutil
from sqlalchemy import ForeignKey, String, create_engine, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from bench.stack import cpu_seconds
from devstack.ports import free_port
from devstack.postgres import EmbeddedPostgres
from runtime.loop import run


class _Base(DeclarativeBase):
    pass


class _Attempt(_Base):
    __tablename__ = "bench_attempt"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    provider_ref: Mapped[str] = mapped_column(String(64), unique=True)
    status: Mapped[str] = mapped_column(String(20))
    updated_at: Mapped[datetime]


class _Observation(_Base):
    __tablename__ = "bench_observation"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    attempt_id: Mapped[str] = mapped_column(ForeignKey("bench_attempt.id"))
    status: Mapped[str] = mapped_column(String(20))
    observed_at: Mapped[datetime]


READS = 0
"""Extra reads per transaction (`--reads`): a worker's transactions run more statements
than a receipt's three."""


def _work(session: Session, ref: str) -> None:
    attempt = session.execute(select(_Attempt).where(_Attempt.provider_ref == ref)).scalar_one()
    for _ in range(READS):
        session.execute(select(_Attempt.status).where(_Attempt.id == attempt.id)).scalar_one()
    now = datetime.now(UTC)
    session.add(_Observation(attempt_id=attempt.id, status="delivered", observed_at=now))
    session.execute(
        update(_Attempt).where(_Attempt.id == attempt.id).values(status="delivered", updated_at=now)
    )


async def _work_native(session: AsyncSession, ref: str) -> None:
    result = await session.execute(select(_Attempt).where(_Attempt.provider_ref == ref))
    attempt = result.scalar_one()
    for _ in range(READS):
        read = await session.execute(select(_Attempt.status).where(_Attempt.id == attempt.id))
        read.scalar_one()
    now = datetime.now(UTC)
    session.add(_Observation(attempt_id=attempt.id, status="delivered", observed_at=now))
    await session.execute(
        update(_Attempt).where(_Attempt.id == attempt.id).values(status="delivered", updated_at=now)
    )


async def _drive(n: int, concurrency: int, one: Callable[[str], Awaitable[None]]) -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(f"ref-{i % 500}")

    async def lane() -> None:
        while not queue.empty():
            await one(queue.get_nowait())

    await asyncio.gather(*(lane() for _ in range(concurrency)))


async def _measure(
    mode: str, url: str, pg: EmbeddedPostgres, n: int, concurrency: int
) -> tuple[float, float, float]:
    me = psutil.Process()
    if mode.startswith("thread"):
        engine = create_engine(url, pool_size=concurrency, max_overflow=0)
        sessions = sessionmaker(engine)
        threads = int(mode.partition(":")[2] or 0)
        pool = ThreadPoolExecutor(threads) if threads else None
        loop = asyncio.get_running_loop()

        async def one(ref: str) -> None:
            def run() -> None:
                with sessions.begin() as session:
                    _work(session, ref)

            await loop.run_in_executor(pool, run)

        close: Callable[[], Awaitable[None]] = _async_noop(engine.dispose)
    else:
        aengine = create_async_engine(url, pool_size=concurrency, max_overflow=0)
        asessions = async_sessionmaker(aengine)
        if mode == "async-run_sync":

            async def one(ref: str) -> None:
                async with asessions.begin() as session:
                    await session.run_sync(_work, ref)

        else:

            async def one(ref: str) -> None:
                async with asessions.begin() as session:
                    await _work_native(session, ref)

        close = aengine.dispose
    await _drive(min(n, 4 * concurrency), concurrency, one)  # warm the pool and caches
    pg_procs = pg.processes()
    mine0, pg0, wall0 = me.cpu_times(), cpu_seconds(pg_procs), time.perf_counter()
    await _drive(n, concurrency, one)
    wall = time.perf_counter() - wall0
    mine1, pg1 = me.cpu_times(), cpu_seconds(pg_procs)
    await close()
    used = (mine1.user + mine1.system) - (mine0.user + mine0.system)
    return used / n * 1e6, (pg1 - pg0) / n * 1e6, wall


def _async_noop(fn: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        fn()

    return run


def _seed(url: str) -> None:
    engine = create_engine(url)
    _Base.metadata.drop_all(engine)
    _Base.metadata.create_all(engine)
    with sessionmaker(engine).begin() as session:
        now = datetime.now(UTC)
        session.add_all(
            _Attempt(id=f"a-{i}", provider_ref=f"ref-{i}", status="sent", updated_at=now)
            for i in range(500)
        )
    engine.dispose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.async_ledger", description=__doc__)
    parser.add_argument("--transactions", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="each mode this often, in turn")
    parser.add_argument("--modes", default="thread,async-run_sync,async-native")
    parser.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="the event loop (Herald's processes run on uvloop, runtime/loop.py)",
    )
    parser.add_argument("--reads", type=int, default=0, help="extra reads per transaction")
    args = parser.parse_args(argv)
    global READS
    READS = args.reads
    if not 0 < args.transactions <= 100_000:
        parser.error("--transactions must be between 1 and 100000")
    modes = tuple(args.modes.split(","))
    for mode in modes:
        if mode not in ("async-run_sync", "async-native") and not re.fullmatch(
            r"thread(:[1-9][0-9]?)?", mode
        ):
            parser.error(f"unknown mode {mode!r}: thread, thread:N, async-run_sync, async-native")
    with tempfile.TemporaryDirectory(prefix="herald-bench-async-") as tmp:
        pg = EmbeddedPostgres(Path(tmp) / "pg", port=free_port(), fast=True)
        url = pg.start()
        try:
            _seed(url)
            rows: dict[str, list[tuple[float, float, float]]] = {m: [] for m in modes}
            for _ in range(args.rounds):
                for mode in modes:
                    measured = _measure(mode, url, pg, args.transactions, args.concurrency)
                    rows[mode].append(
                        run(measured) if args.loop == "uvloop" else asyncio.run(measured)
                    )
        finally:
            pg.stop()
            pg.destroy()
    print(
        f"{args.transactions} transactions (select + {args.reads} reads + insert + update), "
        f"{args.concurrency} in flight, {args.rounds} rounds, {args.loop}; medians"
    )
    print(f"{'mode':<16} {'client CPU us/tx':>17} {'Postgres CPU us/tx':>19} {'wall s':>8}")
    for mode, runs in rows.items():
        client, server, wall = (sorted(col)[len(col) // 2] for col in zip(*runs, strict=True))
        print(f"{mode:<16} {client:>17.0f} {server:>19.0f} {wall:>8.2f}")


if __name__ == "__main__":
    main()
