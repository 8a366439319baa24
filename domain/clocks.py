"""Backoff, poll schedules and the three clocks that bound every intent.

Randomness comes in as ``rand`` (in a workflow: ``workflow.random().random``) and time
as arguments, so the same inputs always give the same schedule and replays agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import overload


@overload
def iso_utc(moment: datetime) -> str: ...
@overload
def iso_utc(moment: None) -> None: ...
def iso_utc(moment: datetime | None) -> str | None:
    """A time in UTC as ISO 8601, or None for None.

    ``moment`` in UTC as ISO 8601 (``2026-03-01T09:30:00+00:00``), or None for None: the
    one spelling of a time in the ledger's documents, evidence and JSON output.
    """
    return moment.astimezone(UTC).isoformat() if moment is not None else None


def parse_iso_utc(value: str | None) -> datetime | None:
    """A provider's ISO 8601 time (``2019-01-23T18:10:02.574Z``) in UTC.

    None when absent or not a time; a time without an offset is read as UTC.

    Args:
        value: The text the provider sent.

    Returns:
        The moment in UTC, or None.
    """
    if not value:
        return None
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC)


# A schedule longer than this is a configuration mistake (a tiny initial delay against
# a long horizon); cap it rather than build an enormous list.
MAX_POLLS = 1000


def backoff_delay(
    retry: int,
    *,
    initial: float,
    maximum: float,
    multiplier: float = 2.0,
    jitter: float = 0.2,
    rand: Callable[[], float],
) -> float:
    """The delay before retry number ``retry`` (0 for the first), in seconds.

    The undithered delay is ``base = min(maximum, initial * multiplier ** retry)``. Jitter
    only ever shortens it, so the result lies in ``[base * (1 - jitter), base]`` and
    therefore always within ``[0, maximum]``: jitter spreads a herd of pollers without
    ever waiting longer than the schedule promised.

    Args:
        retry: How many retries came before this one (>= 0).
        initial: Delay of retry 0, in seconds (>= 0).
        maximum: Largest delay, in seconds (>= 0).
        multiplier: Growth factor per retry (>= 1).
        jitter: Fraction of the delay that may be taken off at random, in [0, 1].
        rand: Returns a float in [0, 1); values outside are clamped.

    Raises:
        ValueError: An argument is out of the ranges above.
    """
    if retry < 0:
        raise ValueError("retry must be >= 0")
    if initial < 0 or maximum < 0:
        raise ValueError("initial and maximum must be >= 0")
    if multiplier < 1:
        raise ValueError("multiplier must be >= 1")
    if not 0 <= jitter <= 1:
        raise ValueError("jitter must be within [0, 1]")
    try:
        base = min(maximum, initial * multiplier**retry)
    except OverflowError:
        # multiplier ** retry beyond float range: long since capped at maximum.
        base = maximum
    draw = min(1.0, max(0.0, rand()))
    return min(maximum, max(0.0, base * (1.0 - jitter * draw)))


def poll_schedule(
    *,
    start: datetime,
    horizon: datetime,
    initial: float,
    maximum: float,
    rand: Callable[[], float],
    multiplier: float = 2.0,
    jitter: float = 0.2,
    final_at_horizon: bool = True,
) -> list[datetime]:
    """When to poll an unresolved attempt, from ``start`` up to ``horizon``.

    Polls follow :func:`backoff_delay`. None lies after ``horizon``; with
    ``final_at_horizon`` one last poll sits exactly at the horizon, so the ``unknown``
    verdict is only given after a final look. Pass ``Clocks.bound(horizon)`` to stop at
    whichever clock closes first.

    Args:
        start: When the attempt was submitted.
        horizon: The last instant worth polling.
        initial: First delay in seconds (> 0).
        maximum: Largest delay in seconds (>= initial).
        rand: Returns a float in [0, 1).
        multiplier: Growth factor per poll.
        jitter: Fraction in [0, 1) that may be taken off each delay.
        final_at_horizon: Add a poll at the horizon when the backoff does not land on it.

    Returns:
        Strictly increasing poll times in ``(start, horizon]``; empty if the horizon is
        not after the start. At most :data:`MAX_POLLS` entries.
    """
    if initial <= 0 or maximum < initial:
        raise ValueError("need 0 < initial <= maximum")
    if not 0 <= jitter < 1:
        # jitter == 1 could make a delay zero and the loop endless.
        raise ValueError("jitter must be within [0, 1)")
    times: list[datetime] = []
    moment = start
    retry = 0
    while len(times) < MAX_POLLS:
        delay = backoff_delay(
            retry,
            initial=initial,
            maximum=maximum,
            multiplier=multiplier,
            jitter=jitter,
            rand=rand,
        )
        moment = moment + timedelta(seconds=delay)
        if moment > horizon:
            break
        times.append(moment)
        retry += 1
    if final_at_horizon and horizon > start and (not times or times[-1] < horizon):
        if len(times) >= MAX_POLLS:
            times[-1] = horizon
        else:
            times.append(horizon)
    return times


@dataclass(frozen=True)
class Clocks:
    """The three clocks that bound an intent; the earliest closing one wins."""

    business_expiry: datetime | None
    """After this the message is worthless (the class started, the flight left)."""
    cooldown_until: datetime | None
    """The recipient may not be contacted again before... (a bound on waiting for it)."""
    transport_window_end: datetime | None
    """The end of the transport's retry window (e.g. the provider's validity period)."""

    def earliest_closing(self) -> tuple[str, datetime] | None:
        """Which clock closes first and when; ``None`` when no clock is set.

        Ties go to the clock listed first (business expiry, cooldown, transport window),
        so the reason reported is the one that matters most to the business.
        """
        candidates = [
            (name, moment)
            for name, moment in (
                ("business_expiry", self.business_expiry),
                ("cooldown_until", self.cooldown_until),
                ("transport_window_end", self.transport_window_end),
            )
            if moment is not None
        ]
        if not candidates:
            return None
        return min(candidates, key=lambda item: item[1])

    def bound(self, t: datetime) -> datetime:
        """``t``, or the earliest closing clock if that comes first."""
        closing = self.earliest_closing()
        if closing is None:
            return t
        return min(t, closing[1])
