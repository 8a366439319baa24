"""What needs a person now: the overview's first panel and the intent page's actions.

Read from the ledger alone (`ledger.read_models.attention`; the workflow records what it
waits for, `intent.awaiting`), so the console never asks Temporal to say whether an
operator is needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from domain.states import AttemptState
from ledger import review_items, settlements
from ledger.read_models import attention as read_attention

WAITING_SHOWN = read_attention.WAITING_SHOWN


@dataclass
class OpenSet:
    """A kind of open review items as the overview shows it."""

    kind: str
    count: int
    oldest_age: str | None
    exposure: list[tuple[str, str, int]] = field(default_factory=list)
    """(event type, category, items), largest first, at most three."""


@dataclass
class Attention:
    """The overview's first panel."""

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
    """`ledger.read_models.attention.needs_attention`, its ages in words as of `now`."""
    seen = read_attention.needs_attention(session)
    return Attention(
        [
            OpenSet(k.kind, k.count, review_items.format_age(now - k.oldest), k.exposure)
            for k in seen.kinds
        ],
        seen.unknown_attempts,
        seen.waiting,
        seen.soonest,
    )


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
