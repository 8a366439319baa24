"""What the console's pages show, read from the ledger.

The derived intent state comes from `ledger.listing.state_of` (the same projection
`herald list` and GET /v1/intents use): a list reads each row with the facts its state is
derived from in one query; counts by state group the ledger's facts in SQL first and
derive each distinct combination once, so they cost one query whatever the number of
intents.
"""

from __future__ import annotations

import csv
import io
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    String,
    and_,
    any_,
    case,
    func,
    literal,
    null,
    or_,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, array_agg
from sqlalchemy.orm import Session

from api.console.entries import Entry, channel_word, entries_of
from domain import channels
from domain.destinations import masked
from domain.intents import IntentState, derive_intent_state
from domain.policy import Outcome
from domain.provider_errors import meaning
from domain.settlement import AWAITING_FILTERS
from domain.states import AttemptState
from ledger import email_health, review_items
from ledger.email_health import EmailRates
from ledger.listing import (
    Cursor,
    IntentFilter,
    ListedIntent,
    _latest_outcome,
    listed,
    listed_intent,
    page,
    plan_for_these_values,
    read_cursor,
)
from ledger.models import (
    Attempt,
    Consent,
    Intent,
    PolicyDecision,
    PolicyVersion,
    ReviewItem,
    Suppression,
    TemplateVersionRow,
)

STATES = [s.value for s in IntentState]
ATTEMPT_STATES = [s.value for s in AttemptState]
AWAITING = list(AWAITING_FILTERS)


def when(value: datetime | str | None, *, with_date: bool = True) -> str:
    """A time as the console shows it: always with its zone."""
    if value is None:
        return ""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S UTC" if with_date else "%H:%M:%S UTC")


# --- the list (ledger.listing: the same paging as GET /v1/intents and `herald list`) ------


CHOICE_COLUMNS = ("event_type", "region", "category")


def filter_choices(session: Session) -> dict[str, list[str]]:
    """The event types, regions and categories on record, for the list's choice boxes.
    Each is read by skipping through its index (one probe per distinct value), so the cost
    follows the number of values, not of intents."""
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


def date_presets(now: datetime) -> list[tuple[str, datetime]]:
    """The list's date presets: (label, created from), each up to now."""
    midnight = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return [
        ("Last hour", now - timedelta(hours=1)),
        ("Today (UTC)", midnight),
        ("Last 24 hours", now - timedelta(days=1)),
        ("Last 7 days", now - timedelta(days=7)),
    ]


@dataclass
class StateCounts:
    counts: dict[str, int]
    capped: bool
    """The filter matches more than COUNT_CAP intents: the counts are of the newest."""


COUNT_CAP = 1000
"""Counts by state cover at most the newest this-many intents of a filter (the page says
so; narrowing the filter, e.g. by dates, counts a period exactly): deriving the state of
every intent of a large ledger on each page would cost a second per page."""


def counts_by_state(session: Session, flt: IntentFilter, *, cap: int = COUNT_CAP) -> StateCounts:
    """How many of the filter's newest `cap` intents (its state aside) are in each state."""
    counted, capped = _counted(session, flt, cap=cap)
    counts: Counter[str] = Counter()
    for (_, state), n in counted.items():
        counts[state] += n
    return StateCounts({s: counts[s] for s in STATES if counts[s]}, capped)


def _counted(
    session: Session, flt: IntentFilter, *, cap: int, slot: Any = None
) -> tuple[Counter[tuple[Any, str]], bool]:
    """(slot, derived state) -> intents, over the filter's newest `cap` intents (its state
    aside), and whether it matches more. `slot` is an optional SQL expression over Intent
    grouped too (the overview's hour)."""
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
    latest = _latest_outcome()
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
        attempt_states = [AttemptState(s) for s in (names or [])]
        derived = derive_intent_state(
            attempt_states=attempt_states,
            last_decision=Outcome(outcome) if outcome else None,
            cancelled=cancelled,
            expired=past_expiry and not attempt_states,
            scheduled=scheduled,
        )
        counts[(at, derived.value)] += n
    return counts, capped


CSV_COLUMNS = [
    "intent_id",
    "business_key",
    "event_type",
    "category",
    "region",
    "state",
    *(f"{c}_state" for c in channels.NAMES),
    "created_at",
    "send_at",
    "cancelled_at",
    "policy_versions",
    "template_key",
    "template_versions",
    "awaiting",
    "awaiting_until",
]


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""A spreadsheet reads a cell that starts with one of these as a formula (CWE-1236)."""


def csv_cell(value: Any) -> str:
    """A value as a CSV cell a spreadsheet shows as text: one that would start a formula is
    prefixed with an apostrophe. Today's columns (ids, keys, states, times, versions) cannot
    start so, but a business key is an app's text and a column may be added."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_rows(session: Session, flt: IntentFilter) -> Any:
    """The CSV of the filter, page by page: ids, keys, states and versions; never a
    destination or a body."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    yield buffer.getvalue()
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
        buffer.seek(0)
        buffer.truncate()
        for item in listed.items:
            i = item.intent
            cells = [
                i.id,
                i.business_key,
                i.event_type,
                i.category,
                i.region,
                item.state,
                *(item.channel_states.get(c, "") for c in channels.NAMES),
                i.created_at.astimezone(UTC).isoformat(),
                i.send_at.astimezone(UTC).isoformat() if i.send_at else "",
                i.cancelled_at.astimezone(UTC).isoformat() if i.cancelled_at else "",
                " ".join(sorted(policies[i.id])),
                i.template_key,
                " ".join(str(v) for v in sorted(templates[i.id])),
                i.awaiting or "",
                i.awaiting_until.astimezone(UTC).isoformat() if i.awaiting_until else "",
            ]
            writer.writerow([csv_cell(c) for c in cells])
        yield buffer.getvalue()
        if listed.next_cursor is None:
            return
        cursor = read_cursor(listed.next_cursor, flt)


# --- one intent ----------------------------------------------------------------------------


def events_of(doc: dict[str, Any]) -> list[Entry]:
    """The timeline of `ledger.timeline.timeline`, one sentence per entry, in the order
    things happened (api.console.entries)."""
    return entries_of(doc)


def outcome_sentence(doc: dict[str, Any]) -> str:
    """What happened, in one plain sentence (or two), for support."""
    attempts = doc["attempts"]
    intent = doc["intent"]
    parts: list[str] = []
    by_state = {a["state"]: a for a in attempts}
    delivered = by_state.get("delivered")
    if delivered:
        by = channel_word(delivered["channel"])
        parts.append(f"Delivered by {by} at {when(delivered['terminal_at'])}.")
    elif "sent" in by_state:
        sent = by_state["sent"]
        parts.append(
            f"Sent by {channel_word(sent['channel'])} at "
            f"{when(sent['submitted_at'])}; no delivery receipt yet."
        )
    elif "unknown" in by_state:
        parts.append(
            "Outcome unknown: the provider took the message but never said whether it "
            "arrived; it may have reached the person."
        )
    elif intent["state"] in ("failed", "undelivered"):
        failed = by_state.get("failed") or by_state.get("undelivered") or {}
        code = f" (error {meaning(failed['error_code'])})" if failed.get("error_code") else ""
        parts.append(f"Not delivered: the last attempt {intent['state']}{code}.")
    elif intent["state"] == "denied":
        reason = doc["decisions"][-1]["reason"] if doc["decisions"] else "policy"
        parts.append(f"Not sent: the policy denied it ({reason}).")
    elif intent["state"] == "deferred":
        last = doc["decisions"][-1]
        parts.append(
            f"Waiting: deferred by the policy until {when(last['next_eligible_at'])} "
            f"({last['reason']})."
        )
    elif intent["state"] in ("sending", "pending", "scheduled"):
        parts.append(f"In progress ({intent['state']}).")
    elif intent["state"] == "expired":
        parts.append("Expired before anything was sent.")
    cancels = [
        a for a in doc["operator_actions"] if a["action"] == "cancel" and a["outcome"] == "accepted"
    ]
    if intent["cancelled_at"]:
        who = f" by {cancels[0]['operator']}" if cancels else ""
        cancelled = f"Cancelled at {when(intent['cancelled_at'])}{who}"
        handed = [
            a for a in attempts if a["submitted_at"] and a["submitted_at"] <= intent["cancelled_at"]
        ]
        if handed:
            first = handed[0]
            to = channels.get(first["channel"]).handed_to
            what = channel_word(first["channel"])
            cancelled += (
                f": no further attempts; the {what} was handed to the {to} "
                f"at {when(first['submitted_at'])} and cannot be recalled."
            )
        else:
            cancelled += ": no further attempts; nothing had been sent."
        parts.append(cancelled)
    return " ".join(parts) or f"State: {intent['state']}."


def mask(channel: str) -> str:
    """How a destination on `channel` reads when there is none to mask (purged); raises
    channels.UnknownChannel for a channel Herald does not know."""
    return channels.get(channel).mask_placeholder


def masked_destinations(
    session: Session, intent_id: str, decrypt: Callable[[str, str], str]
) -> dict[str, str]:
    """The intent's destinations as every surface shows them (`domain.destinations.masked`:
    `+44********01`, `a***@example.com`), enough to confirm "the number ending 01" with a
    caller; none once purged. `decrypt(ciphertext, context)` is the ledger's field cipher."""
    intent = session.get(Intent, intent_id)
    if intent is None:
        return {}
    return {
        channel: masked(decrypt(ct, intent.business_key))
        for channel, ct in (
            ("sms", intent.sms_destination_ct),
            ("email", intent.email_destination_ct),
        )
        if ct
    }


def review_items_of(session: Session, intent_id: str) -> list[ReviewItem]:
    return list(
        session.execute(
            select(ReviewItem).where(ReviewItem.intent_id == intent_id).order_by(ReviewItem.id)
        ).scalars()
    )


# --- reconciliation ------------------------------------------------------------------------

SET_TITLES = {
    review_items.INTENT_WITHOUT_ATTEMPT: "Intents with no attempt",
    review_items.PREPARED_WITHOUT_REMOTE_ID: "Prepared attempts with no remote id",
    review_items.SUBMITTED_PAST_CHECK: "Submitted attempts past their next check",
    review_items.CONFLICTING_OBSERVATION: "Conflicting terminal observations",
    review_items.CANCELLED_THEN_DELIVERED: "Cancelled intents that later produced a delivery",
    review_items.UNKNOWN_OUTCOME: "Unknown outcomes",
    review_items.ORPHAN_OBSERVATION: "Observations with no attempt",
    review_items.WORKFLOW_CLOSED_INTENT_OPEN: "Open intents whose workflow was closed (terminated)",
    review_items.INTENT_WITHOUT_WORKFLOW: "Open intents whose workflow Temporal does not have",
    review_items.WORKFLOW_WITHOUT_INTENT: "Running workflows whose intent the ledger does not have",
    review_items.DATA_KEY_UNREADABLE: "Intents a worker's data key could not read",
}


@dataclass
class SetSummary:
    kind: str
    title: str
    count: int
    oldest_age: str | None
    exposure: list[tuple[str, str, int]]
    """(event type, category, members)."""
    members: list[dict[str, Any]]
    """The oldest MEMBERS_SHOWN, each an open review item."""


MEMBERS_SHOWN = 50


def _opened_by_hand(detail: dict[str, Any]) -> dict[str, Any]:
    """Who opened an item from an intent's page, and why (ledger.review_items); nothing
    for the items the sweep found."""
    if detail.get("filed_by") != review_items.FILED_BY:
        return {}
    return {"opened_by": detail.get("opened_by"), "opened_why": detail.get("reason")}


def reconciliation(session: Session, now: datetime) -> list[SetSummary]:
    """Each reconciliation set as its open review items: what `ledger.reconcile.find`
    found (the reconcile sweep records every row it finds as a review item, each kind and
    subject once, every 5 minutes) and no person has resolved yet.

    Reading the recorded items rather than running `find` on every page keeps the page
    fast on a large ledger (finding intents without an attempt reads every intent)."""
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
    for kind, title in SET_TITLES.items():
        count, oldest_found = totals.get(kind, (0, None))
        members = []
        oldest_since: datetime | None = None
        if count:
            for item in session.execute(
                select(ReviewItem)
                .where(open_items, ReviewItem.kind == kind)
                .order_by(since, ReviewItem.id)
                .limit(MEMBERS_SHOWN)
            ).scalars():
                detail = item.detail or {}
                began = datetime.fromisoformat(detail["since"]) if detail.get("since") else None
                oldest_since = oldest_since or began
                members.append(
                    {
                        "id": item.id,
                        "subject": item.subject,
                        "since": when(began or item.found_at),
                        "age": review_items.format_age(now - (began or item.found_at)),
                        "found_at": when(item.found_at),
                        "intent_id": detail.get("intent_id"),
                        "business_key": detail.get("business_key"),
                        "channel": detail.get("channel"),
                        **_opened_by_hand(detail),
                    }
                )
        oldest = oldest_since or oldest_found
        sets.append(
            SetSummary(
                kind,
                title,
                count,
                review_items.format_age(now - oldest) if oldest else None,
                exposure.get(kind, []),
                members,
            )
        )
    return sets


# --- overview ------------------------------------------------------------------------------


@dataclass
class Overview:
    intents: dict[str, dict[str, int]]
    """window -> state -> count."""
    attempts: dict[str, dict[str, int]]
    unknown_share: float | None
    fallback_rate: float | None
    p50_seconds: float | None
    p95_seconds: float | None
    hours: list[dict[str, Any]]
    """The last 24 hours, oldest first: {start, counts by outcome}."""
    email: dict[str, EmailRates] = field(default_factory=dict)
    """The last day's email health per sender domain (bounce and complaint rates)."""


WINDOWS = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
CHART_OUTCOMES = ["delivered", "sent", "unknown", "failed", "undelivered", "cancelled", "other"]


def overview(session: Session, now: datetime) -> Overview:
    intents = {
        name: counts_by_state(session, IntentFilter(created_from=now - span), cap=1_000_000).counts
        for name, span in WINDOWS.items()
    }
    attempts: dict[str, dict[str, int]] = {}
    for name, span in WINDOWS.items():
        attempts[name] = dict(
            session.execute(
                select(Attempt.state, func.count())
                .where(Attempt.prepared_at >= now - span)
                .group_by(Attempt.state)
            ).all()
        )
    day = intents["day"]
    total = sum(day.values())
    unknown_share = day.get("unknown", 0) / total if total else None
    with_email = session.execute(
        select(func.count(func.distinct(Attempt.intent_id))).where(
            Attempt.prepared_at >= now - WINDOWS["day"], Attempt.channel == channels.EMAIL.name
        )
    ).scalar_one()
    with_sms = session.execute(
        select(func.count(func.distinct(Attempt.intent_id))).where(
            Attempt.prepared_at >= now - WINDOWS["day"], Attempt.channel == channels.SMS.name
        )
    ).scalar_one()
    both = session.execute(
        select(func.count()).select_from(
            select(Attempt.intent_id)
            .where(Attempt.prepared_at >= now - WINDOWS["day"])
            .group_by(Attempt.intent_id)
            .having(func.count(func.distinct(Attempt.channel)) > 1)
            .subquery()
        )
    ).scalar_one()
    fallback_rate = both / with_sms if with_sms else (None if not with_email else 0.0)
    latency = session.execute(
        select(
            func.percentile_cont(0.5).within_group(
                func.extract("epoch", Attempt.terminal_at - Intent.created_at)
            ),
            func.percentile_cont(0.95).within_group(
                func.extract("epoch", Attempt.terminal_at - Intent.created_at)
            ),
        )
        .join(Intent, Intent.id == Attempt.intent_id)
        .where(Attempt.state == "delivered", Intent.created_at >= now - WINDOWS["day"])
    ).one()
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=23)
    hours: list[dict[str, Any]] = [
        {"start": start + timedelta(hours=h), "counts": Counter()} for h in range(24)
    ]
    hour_of = func.floor(func.extract("epoch", Intent.created_at - start) / 3600)
    by_hour, _ = _counted(session, IntentFilter(created_from=start), cap=10_000_000, slot=hour_of)
    for (slot, outcome), n in by_hour.items():
        hours[min(max(int(slot), 0), 23)]["counts"][
            outcome if outcome in CHART_OUTCOMES else "other"
        ] += n
    return Overview(
        intents,
        attempts,
        unknown_share,
        fallback_rate,
        float(latency[0]) if latency[0] is not None else None,
        float(latency[1]) if latency[1] is not None else None,
        hours,
        email_health.totals(
            email_health.email_rates(session, since=now - WINDOWS["day"], until=now)
        ),
    )


# --- recipients ----------------------------------------------------------------------------


@dataclass
class Recipient:
    recipient_ref: str
    consents: list[Consent]
    suppressions: list[tuple[str, Suppression]]
    """(channel of the destination, suppression)."""
    intents: list[ListedIntent]


def recipient_refs_for(session: Session, lookup_hmac: str) -> list[str]:
    return list(
        session.execute(
            select(Intent.recipient_ref)
            .where(
                or_(
                    Intent.sms_destination_hmac == lookup_hmac,
                    Intent.email_destination_hmac == lookup_hmac,
                )
            )
            .distinct()
            .limit(20)
        ).scalars()
    )


def recipient(session: Session, recipient_ref: str) -> Recipient:
    consents = list(
        session.execute(
            select(Consent)
            .where(Consent.recipient_ref == recipient_ref)
            .order_by(Consent.granted_at, Consent.id)
        ).scalars()
    )
    newest = (
        select(Intent)
        .where(Intent.recipient_ref == recipient_ref)
        .order_by(Intent.created_at.desc(), Intent.id.desc())
        .limit(100)
    )
    now = datetime.now(UTC)
    intents = [listed_intent(row, now) for row in session.execute(listed(newest))]
    hmacs: set[str] = set()
    for sms, email in session.execute(
        newest.with_only_columns(Intent.sms_destination_hmac, Intent.email_destination_hmac)
    ):
        hmacs |= {h for h in (sms, email) if h}
    suppressions = list(
        session.execute(
            select(Suppression)
            .where(Suppression.destination_hmac.in_(hmacs or {""}))
            .order_by(Suppression.at, Suppression.id)
        ).scalars()
    )
    return Recipient(recipient_ref, consents, [(s.channel, s) for s in suppressions], intents)


def suppression_belongs_to(session: Session, suppression_id: int, recipient_ref: str) -> bool:
    """A lift from a recipient's page concerns one of that recipient's destinations."""
    row = session.get(Suppression, suppression_id)
    if row is None:
        return False
    return (
        session.execute(
            select(func.count())
            .select_from(Intent)
            .where(
                Intent.recipient_ref == recipient_ref,
                or_(
                    Intent.sms_destination_hmac == row.destination_hmac,
                    Intent.email_destination_hmac == row.destination_hmac,
                ),
            )
        ).scalar_one()
        > 0
    )


# --- policy and templates ------------------------------------------------------------------


def policies(session: Session) -> list[PolicyVersion]:
    return list(
        session.execute(
            select(PolicyVersion).order_by(
                PolicyVersion.active.desc(), PolicyVersion.created_at.desc()
            )
        ).scalars()
    )


def templates(session: Session) -> list[TemplateVersionRow]:
    return list(
        session.execute(
            select(TemplateVersionRow).order_by(
                TemplateVersionRow.key,
                TemplateVersionRow.channel,
                TemplateVersionRow.locale,
                TemplateVersionRow.version.desc(),
            )
        ).scalars()
    )
