"""The console's sign-in throttle, as a rule over one counter: a name or a client address.

After `limit` refused sign-ins within `WINDOW` (5 for a name, 20 for an address), every
sign-in for it is answered "too many" until `blocked_until`; each further refusal after a
block blocks again for twice as long, up to `LONGEST_BLOCK`. A quiet `WINDOW` after the
last refusal (or the end of the last block) forgets the counter.

Pure: the ledger keeps one row per counter (so every API process shares it) and calls
these functions with the time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

WINDOW = timedelta(minutes=15)
FIRST_BLOCK = timedelta(minutes=1)
LONGEST_BLOCK = timedelta(minutes=15)


class CounterKind(StrEnum):
    """What a counter counts refusals of."""

    NAME = "name"
    """Refusals for one principal name, whoever sent them."""
    ADDRESS = "address"
    """Refusals from one client address, whatever name they gave."""


LIMITS: dict[CounterKind, int] = {CounterKind.NAME: 5, CounterKind.ADDRESS: 20}
"""Refusals within WINDOW after which a counter blocks."""


@dataclass(frozen=True)
class Counter:
    """One counter's state, as the ledger keeps it."""

    failures: int = 0
    """Refusals since the counter was last forgotten."""
    last_failure_at: datetime | None = None
    blocks: int = 0
    """Blocks so far: the next lasts FIRST_BLOCK * 2**blocks (at most LONGEST_BLOCK)."""
    blocked_until: datetime | None = None


def current(counter: Counter, now: datetime) -> Counter:
    """`counter` as it stands at `now`: forgotten after a quiet WINDOW."""
    last = max((t for t in (counter.last_failure_at, counter.blocked_until) if t), default=None)
    if last is None or now - last > WINDOW:
        return Counter()
    return counter


def retry_after(counter: Counter, now: datetime) -> int | None:
    """Whole seconds until a sign-in is heard again, or None when it is heard now."""
    if counter.blocked_until is None or counter.blocked_until <= now:
        return None
    return max(1, math.ceil((counter.blocked_until - now).total_seconds()))


def refused(counter: Counter, kind: CounterKind, now: datetime) -> Counter:
    """The counter after one more refused sign-in at `now`."""
    counter = current(counter, now)
    failures = counter.failures + 1
    if failures < LIMITS[kind]:
        return replace(counter, failures=failures, last_failure_at=now)
    block = min(FIRST_BLOCK * (2**counter.blocks), LONGEST_BLOCK)
    return Counter(
        failures=failures,
        last_failure_at=now,
        blocks=counter.blocks + 1,
        blocked_until=now + block,
    )
