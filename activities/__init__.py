"""Activities: each step of a notification that touches the world."""

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import ParamSpec, TypeVar

from temporalio import activity

HEARTBEAT_EVERY_SECONDS = 2.0
"""How often the SMS submit says it is alive. The workflow gives it a heartbeat timeout
(workflows.notification.SEND_HEARTBEAT_TIMEOUT), so a worker that dies mid-submit is
noticed after that timeout instead of after the whole start-to-close."""

P = ParamSpec("P")
R = TypeVar("R")


def now_utc() -> datetime:
    """The wall clock for activity code (workflows use `workflow.now()`; domain code is
    handed its `now`)."""
    return datetime.now(UTC)


def heartbeating(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Heartbeat every HEARTBEAT_EVERY_SECONDS while `fn` runs as an activity (the SDK
    throttles the calls it actually sends to the server)."""

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        if not activity.in_activity():  # called directly, as the activity tests do
            return await fn(*args, **kwargs)

        async def beat() -> None:
            while True:
                # Sleep first: a send that is over within the interval sends no heartbeat
                # at all (the server's heartbeat timeout runs from the start anyway).
                await asyncio.sleep(HEARTBEAT_EVERY_SECONDS)
                activity.heartbeat()

        beats = asyncio.create_task(beat())
        try:
            return await fn(*args, **kwargs)
        finally:
            beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beats

    return run
