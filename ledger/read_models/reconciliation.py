"""The reconciliation queue: each review item kind as its open items.

What `ledger.reconcile.find` found (the reconcile sweep records every row it finds as a
review item, each kind and subject once, every 5 minutes), what the moments that need a
person filed at once, and what operators opened (ledger.review_items), that no person has
resolved yet. Reading the recorded items rather than running `find` on every read keeps it
fast on a large ledger (finding intents without an attempt reads every intent).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import String, any_, case, func, literal, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from ledger import review_items
from ledger.models import Intent, ReviewItem

MEMBERS_SHOWN = 50


@dataclass(frozen=True)
class OpenItem:
    """One open review item."""

    id: int
    subject: str
    since: datetime
    """When the trouble began (the item's `detail.since`), else when it was found."""
    found_at: datetime
    intent_id: str | None
    business_key: str | None
    channel: str | None
    opened_by: str | None = None
    """Set when an operator opened it from an intent's page (ledger.review_items)."""
    opened_why: str | None = None


@dataclass(frozen=True)
class ReviewSet:
    """The open review items of one kind."""

    kind: str
    count: int
    oldest: datetime | None
    """When the oldest shown member's trouble began, else the oldest item's finding."""
    exposure: list[tuple[str, str, int]]
    """(event type, category, members), the most first; `(none)` where unrecorded."""
    members: list[OpenItem]
    """The oldest MEMBERS_SHOWN."""


def _began(item: ReviewItem) -> datetime | None:
    """When the item's trouble began, as its finder dated it (`detail.since`)."""
    since = (item.detail or {}).get("since")
    return datetime.fromisoformat(since) if since else None


def _open_item(item: ReviewItem) -> OpenItem:
    detail = item.detail or {}
    began = _began(item)
    by_hand = detail.get("filed_by") == review_items.FILED_BY
    return OpenItem(
        item.id,
        item.subject,
        began or item.found_at,
        item.found_at,
        detail.get("intent_id"),
        detail.get("business_key"),
        detail.get("channel"),
        detail.get("opened_by") if by_hand else None,
        detail.get("reason") if by_hand else None,
    )


def review_sets(session: Session) -> list[ReviewSet]:
    """Every kind (in `ledger.review_items.KINDS` order) with its open items."""
    intent_id = ReviewItem.detail["intent_id"].as_string()
    since = ReviewItem.detail["since"].as_string()
    open_items = ReviewItem.resolved_at.is_(None)
    totals = {
        kind: (n, oldest)
        for kind, n, oldest in session.execute(
            select(ReviewItem.kind, func.count(), func.min(ReviewItem.found_at))
            .where(open_items)
            .group_by(ReviewItem.kind)
        )
    }
    # Exposure from the items themselves (the sweep records each one's event type and
    # category); items recorded before it did are looked up by their intent.
    counted: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
    missing: list[tuple[str, str | None, int]] = []
    # Columns since migration 0013 (backfilled from `detail`): no JSON parsed per item.
    recorded_type = ReviewItem.event_type
    recorded_category = ReviewItem.category
    owner_if_unrecorded = case((recorded_type.is_(None), intent_id))
    for kind, event_type, category, owner, n in session.execute(
        select(ReviewItem.kind, recorded_type, recorded_category, owner_if_unrecorded, func.count())
        .where(open_items)
        .group_by(ReviewItem.kind, recorded_type, recorded_category, owner_if_unrecorded)
    ):
        if event_type is None and owner is not None:
            missing.append((kind, owner, n))
        else:
            counted[kind][(event_type or "(none)", category or "(none)")] += n
    if missing:
        found = {
            i: (e, c)
            for i, e, c in session.execute(
                select(Intent.id, Intent.event_type, Intent.category).where(
                    Intent.id == any_(literal([o for _, o, _ in missing], ARRAY(String)))
                )
            )
        }
        for kind, owner, n in missing:
            counted[kind][found.get(owner or "", ("(none)", "(none)"))] += n
    exposure = {
        kind: [(e, c, n) for (e, c), n in counter.most_common()]
        for kind, counter in counted.items()
    }
    sets = []
    for kind in review_items.KINDS:
        count, oldest_found = totals.get(kind, (0, None))
        items = (
            list(
                session.execute(
                    select(ReviewItem)
                    .where(open_items, ReviewItem.kind == kind)
                    .order_by(since, ReviewItem.id)
                    .limit(MEMBERS_SHOWN)
                ).scalars()
            )
            if count
            else []
        )
        oldest_since = next((b for b in map(_began, items) if b is not None), None)
        sets.append(
            ReviewSet(
                kind,
                count,
                oldest_since or oldest_found,
                exposure.get(kind, []),
                [_open_item(item) for item in items],
            )
        )
    return sets
