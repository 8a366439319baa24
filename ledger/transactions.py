"""One database transaction, run off the event loop.

How async code (activities, the ingress) uses the synchronous SQLAlchemy session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar, cast

from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session, sessionmaker

T = TypeVar("T")


async def in_transaction(sessions: sessionmaker[Session], work: Callable[[Session], T]) -> T:
    """Run `work(session)` in a thread inside one transaction (committed on return)."""

    def run() -> T:
        with sessions.begin() as session:
            return work(session)

    return await asyncio.to_thread(run)


class Transactions:
    """One sessionmaker's transactions for async code.

    `await tx(work)` runs `work(session)` in a thread inside one transaction and returns
    what it returns, typed. The activities and the ingress each hold one instead of
    wrapping :func:`in_transaction` themselves.
    """

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        """Hold `sessions`, the sessionmaker every transaction is begun on."""
        self.sessions = sessions

    async def __call__(self, work: Callable[[Session], T]) -> T:
        """Run `work(session)` in one transaction, off the event loop; return its result."""
        return await in_transaction(self.sessions, work)


def rows_changed(result: object) -> int:
    """The row count of an UPDATE (the check behind every compare-and-set)."""
    return cast(CursorResult[Any], result).rowcount
