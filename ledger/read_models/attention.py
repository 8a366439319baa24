"""What needs a person now.

Open review items by kind, unsettled unknown attempts, and the intents whose workflow
waits for an operator. Read from the ledger alone (the workflow records what it waits
for, `intent.awaiting`), so no surface asks Temporal whether an operator is needed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from domain.states import AttemptState
from ledger import settlements
from ledger.models import Attempt, Intent, ReviewItem

WAITING_SHOWN = 10
EXPOSURE_SHOWN = 3


@dataclass(frozen=True)
class OpenKind:
    """The open review items of one kind."""

    kind: str
    count: int
    oldest: datetime
    """When the oldest open item was found."""
    exposure: list[tuple[str, str, int]]
    """(event type, category, items), largest first, at most EXPOSURE_SHOWN."""


@dataclass(frozen=True)
class Attention:
    """What waits for a person."""

    kinds: list[OpenKind]
    """Kinds with open review items, the one with the oldest item first."""
    unknown_attempts: int
    """Attempts whose outcome is unknown and that no settlement has answered."""
    waiting: dict[str, int]
    """awaiting (settlement, resend) -> intents waiting for an operator."""
    soonest: list[dict[str, Any]]
    """The intents whose window closes first (`ledger.settlements.waiting_intents`)."""


def needs_attention(session: Session) -> Attention:
    """What waits for a person, in four queries."""
    open_items = ReviewItem.resolved_at.is_(None)
    event_type, category = ReviewItem.event_type, ReviewItem.category
    # One pass over the open items (the partial index): counts, oldest and exposure.
    totals: dict[str, tuple[int, datetime]] = {}
    exposure: dict[str, Counter[tuple[str, str]]] = {}
    for kind, e, c, n, oldest in session.execute(
        select(ReviewItem.kind, event_type, category, func.count(), func.min(ReviewItem.found_at))
        .where(open_items)
        .group_by(ReviewItem.kind, event_type, category)
    ):
        count, first = totals.get(kind, (0, oldest))
        totals[kind] = (count + n, min(first, oldest))
        exposure.setdefault(kind, Counter())[(e or "(none)", c or "(none)")] += n
    kinds = sorted(
        (
            OpenKind(
                kind,
                n,
                oldest,
                [(e, c, k) for (e, c), k in exposure[kind].most_common(EXPOSURE_SHOWN)],
            )
            for kind, (n, oldest) in totals.items()
        ),
        key=lambda k: k.oldest,
    )
    unknown = session.execute(
        select(func.count()).where(Attempt.state == AttemptState.UNKNOWN.value)
    ).scalar_one()
    waiting = {
        str(awaiting): n
        for awaiting, n in session.execute(
            select(Intent.awaiting, func.count())
            .where(Intent.awaiting.is_not(None))
            .group_by(Intent.awaiting)
        )
    }
    soonest = settlements.waiting_intents(session, limit=WAITING_SHOWN) if waiting else []
    return Attention(kinds, unknown, waiting, soonest)
