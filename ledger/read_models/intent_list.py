"""The console list's companions: the values to choose from, counts by state, the export.

The list itself is `ledger.listing` (the same paging as GET /v1/intents and `herald
list`). Counts by state group the ledger's facts in SQL first and derive each distinct
combination once (`ledger.listing.derived_state`), so they cost one query whatever the
number of intents.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, func, null, select, text
from sqlalchemy.dialects.postgresql import array_agg
from sqlalchemy.orm import Session

from domain.intents import IntentState
from ledger.listing import (
    Cursor,
    IntentFilter,
    ListedIntent,
    derived_state,
    latest_outcome,
    page,
    plan_for_these_values,
    read_cursor,
)
from ledger.models import Attempt, Intent, PolicyDecision

STATES = [s.value for s in IntentState]

CHOICE_COLUMNS = ("event_type", "region", "category")


def filter_choices(session: Session) -> dict[str, list[str]]:
    """The event types, regions and categories on record, for the list's choice boxes.

    Each is read by skipping through its index (one probe per distinct value), so the cost
    follows the number of values, not of intents.
    """
    choices: dict[str, list[str]] = {}
    for column in CHOICE_COLUMNS:  # a fixed set of names, never a request's text
        values = session.execute(
            text(
                f"""
                WITH RECURSIVE v(x) AS (
                    SELECT min({column}) FROM intent
                    UNION ALL
                    SELECT (SELECT min({column}) FROM intent WHERE {column} > v.x)
                    FROM v WHERE v.x IS NOT NULL
                )
                SELECT x FROM v WHERE x IS NOT NULL LIMIT 500
                """
            )
        ).scalars()
        choices[column] = list(values)
    return choices


@dataclass
class StateCounts:
    """How many of a filter's intents are in each derived state."""

    counts: dict[str, int]
    capped: bool
    """The filter matches more than COUNT_CAP intents: the counts are of the newest."""


COUNT_CAP = 1000
"""Counts by state cover at most the newest this-many intents of a filter (the page says
so; narrowing the filter, e.g. by dates, counts a period exactly): deriving the state of
every intent of a large ledger on each page would cost a second per page."""


def counts_by_state(session: Session, flt: IntentFilter, *, cap: int = COUNT_CAP) -> StateCounts:
    """How many of the filter's newest `cap` intents (its state aside) are in each state."""
    counted, capped = counted_by_state(session, flt, cap=cap)
    counts: Counter[str] = Counter()
    for (_, state), n in counted.items():
        counts[state] += n
    return StateCounts({s: counts[s] for s in STATES if counts[s]}, capped)


def counted_by_state(
    session: Session, flt: IntentFilter, *, cap: int, slot: Any = None
) -> tuple[Counter[tuple[Any, str]], bool]:
    """(slot, derived state) -> intents, over the filter's newest `cap` intents.

    The filter's state aside; and whether it matches more. `slot` is an optional SQL
    expression over Intent grouped too (the overview's hour).
    """
    plan_for_these_values(session)
    now = datetime.now(UTC)
    newest_first = (Intent.created_at.desc(), Intent.id.desc())
    unfiltered = replace(flt, state=None)
    # Per intent, through the intent_id indexes (a handful of rows each): its attempts'
    # distinct states and its latest decision. A join over whole tables costs more here.
    states = (
        select(array_agg(func.distinct(Attempt.state)))
        .where(Attempt.intent_id == Intent.id)
        .scalar_subquery()
    )
    latest = latest_outcome()
    base = (
        unfiltered.apply(
            select(
                states.label("states"),
                latest.label("outcome"),
                (Intent.cancelled_at.is_not(None)).label("cancelled"),
                and_(Intent.expires_at.is_not(None), Intent.expires_at <= now).label("past_expiry"),
                and_(Intent.send_at.is_not(None), Intent.send_at > now).label("scheduled"),
                (func.row_number().over(order_by=newest_first) > cap).label("beyond"),
                (slot if slot is not None else null()).label("slot"),
            )
        )
        .order_by(*newest_first)
        .limit(cap + 1)  # one more: whether the filter matches more than `cap`
        .subquery("f")
    )
    facts = (
        base.c.states,
        base.c.outcome,
        base.c.cancelled,
        base.c.past_expiry,
        base.c.scheduled,
        base.c.beyond,
        base.c.slot,
    )
    counts: Counter[tuple[Any, str]] = Counter()
    capped = False
    for names, outcome, cancelled, past_expiry, scheduled, beyond, at, n in session.execute(
        select(*facts, func.count()).group_by(*facts)
    ):
        if beyond:
            capped = True
            continue
        derived = derived_state(
            names or [],
            outcome,
            cancelled=cancelled,
            past_expiry=past_expiry,
            scheduled=scheduled,
        )
        counts[(at, derived.value)] += n
    return counts, capped


@dataclass
class Exported:
    """One intent of an export: its listed row and the versions that decided and sent it."""

    item: ListedIntent
    policy_versions: list[str] = field(default_factory=list)
    """Sorted."""
    template_versions: list[int] = field(default_factory=list)
    """Sorted."""


def export_pages(session: Session, flt: IntentFilter) -> Iterator[list[Exported]]:
    """The filter's intents, page by page (ledger.listing's paging).

    Ids, keys, states and versions; never a destination or a body.
    """
    cursor: Cursor | None = None
    while True:
        listed = page(session, flt, cursor, size=1000, scan_limit=20_000)
        ids = [item.intent.id for item in listed.items]
        policies: dict[str, set[str]] = defaultdict(set)
        templates: dict[str, set[int]] = defaultdict(set)
        if ids:
            for intent_id, policy_version in session.execute(
                select(PolicyDecision.intent_id, PolicyDecision.policy_version).where(
                    PolicyDecision.intent_id.in_(ids)
                )
            ):
                policies[intent_id].add(policy_version)
            for intent_id, template_version in session.execute(
                select(Attempt.intent_id, Attempt.template_version).where(
                    Attempt.intent_id.in_(ids)
                )
            ):
                templates[intent_id].add(template_version)
        yield [
            Exported(
                item,
                sorted(policies[item.intent.id]),
                sorted(templates[item.intent.id]),
            )
            for item in listed.items
        ]
        if listed.next_cursor is None:
            return
        cursor = read_cursor(listed.next_cursor, flt)
