"""What needs a person now: the overview's first panel and the intent page's waiting line.

Read from the ledger alone (the workflow records what it waits for, `intent.awaiting`), so
the console never asks Temporal to say whether an operator is needed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from domain.states import AttemptState
from ledger import review_items, settlements
from ledger.models import Attempt, Intent, ReviewItem

WAITING_SHOWN = 10


@dataclass
class OpenSet:
    kind: str
    count: int
    oldest_age: str | None
    exposure: list[tuple[str, str, int]] = field(default_factory=list)
    """(event type, category, items), largest first, at most three."""


@dataclass
class Attention:
    sets: list[OpenSet]
    """Sets with open review items, the one with the oldest item first."""
    unknown_attempts: int
    """Attempts whose outcome is unknown and that no settlement has answered."""
    waiting: dict[str, int]
    """awaiting (settlement, resend) -> intents waiting for an operator."""
    soonest: list[dict[str, Any]]
    """The intents whose window closes first: {intent_id, business_key, awaiting, until}."""

    @property
    def anything(self) -> bool:
        return bool(self.sets or self.unknown_attempts or self.waiting)


def needs_attention(session: Session, now: datetime) -> Attention:
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
    sets = sorted(
        (
            OpenSet(
                kind,
                n,
                review_items.format_age(now - oldest) if oldest else None,
                [(e, c, k) for (e, c), k in exposure.get(kind, Counter()).most_common(3)],
            )
            for kind, (n, oldest) in totals.items()
        ),
        key=lambda s: -(now - totals[s.kind][1]).total_seconds(),
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
    return Attention(sets, unknown, waiting, soonest)


OPEN_STATES = ("pending", "scheduled", "deferred", "sending", "sent")
"""Derived intent states whose workflow still has future work a cancel can close."""


@dataclass
class Actions:
    """The actions that can apply to one intent now, as its page offers them."""

    cancel: bool = False
    resend_channels: list[str] = field(default_factory=list)
    settle_channels: list[str] = field(default_factory=list)
    rules: list[dict[str, Any]] = field(default_factory=list)
    """The active policy's settlement rules offered for the unknown attempts' providers."""
    lookup: bool = False
    review: list[review_items.Option] = field(default_factory=list)
    """Per channel, its latest attempt and whether a review item can be opened for it."""
    none_because: str = ""
    """When no action applies: why, in a sentence."""


def applicable_actions(session: Session, doc: dict[str, Any]) -> Actions:
    """From the ledger alone: what the intent's workflow still takes (it records what it
    waits for), so the page never offers a button the workflow would refuse."""
    intent = doc["intent"]
    awaiting = intent.get("awaiting")
    latest: dict[str, dict[str, Any]] = {}
    for a in doc["attempts"]:
        if a["number"] >= latest.get(a["channel"], {"number": 0})["number"]:
            latest[a["channel"]] = a
    # A cancel is taken until one is recorded: after delivery it closes nothing and
    # recalls nothing, and the ledger records that race (the class-opening story).
    actions = Actions(cancel=intent.get("cancelled_at") is None)
    if awaiting == settlements.AWAITING_SETTLEMENT:
        actions.settle_channels = sorted(
            c
            for c, a in latest.items()
            if a["state"] == AttemptState.UNKNOWN.value or a.get("settled_rule")
        )
    if awaiting is not None:
        actions.resend_channels = sorted(
            c
            for c, a in latest.items()
            if (a.get("settled_rule") and a.get("settled_resend_allowed"))
            or (
                not a.get("settled_rule")
                and a["state"] in (AttemptState.FAILED.value, AttemptState.UNDELIVERED.value)
            )
        )
    if actions.settle_channels:
        _, policy = settlements.active_settlement_policy(session)
        has_lookup = all(settlements.provider_has_lookup(c) for c in actions.settle_channels)
        actions.lookup = any(settlements.provider_has_lookup(c) for c in actions.settle_channels)
        actions.rules = [r.as_dict() for r in policy.offered(provider_has_lookup=has_lookup)]
    actions.review = [o for o in review_items.options(session, intent["id"]) if o.kind is not None]
    if not (actions.resend_channels or actions.settle_channels):
        if intent["state"] in OPEN_STATES:
            actions.none_because = (
                f"The intent is {intent['state']}: there is nothing to settle or resend "
                "while its workflow is still at work."
            )
        else:
            actions.none_because = (
                f"The intent is {intent['state']} and its workflow no longer waits for an "
                "operator: there is nothing to settle or resend. Record a new intent to "
                "send again."
            )
    return actions
