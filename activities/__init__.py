"""Activities: each step of a notification that touches the world."""

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Generic, ParamSpec, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.contracts import ErrorType

HEARTBEAT_EVERY_SECONDS = 2.0
"""How often the SMS submit says it is alive. The workflow gives it a heartbeat timeout
(workflows.notification.SEND_HEARTBEAT_TIMEOUT), so a worker that dies mid-submit is
noticed after that timeout instead of after the whole start-to-close."""

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class ProviderTransports(Generic[T]):
    """One channel's transports by provider alias (settings' HERALD_PROVIDERS), and the
    one an attempt goes through: the alias it recorded when it was prepared."""

    def __init__(self, default: T, by_alias: Mapping[str, T] | None = None) -> None:
        self._default = default
        self._by_alias = dict(by_alias or {})

    def for_alias(self, alias: str | None) -> T:
        """The transport of `alias`.

        An attempt prepared before providers were recorded (no alias), or activities
        built with one transport and no aliases (tests, `herald bench`), use the default.
        An alias this worker has no settings for is retried (type ProviderNotConfigured):
        a worker that has them, or this one after a restart with them, takes it; it is
        never sent through another provider's account instead.
        """
        if alias is None or not self._by_alias:
            return self._default
        try:
            return self._by_alias[alias]
        except KeyError:
            raise ApplicationError(
                f"provider {alias!r} is not configured on this worker (HERALD_PROVIDERS)",
                type=ErrorType.PROVIDER_NOT_CONFIGURED,
            ) from None


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
