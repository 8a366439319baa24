"""What the console's pages say about what they read from the ledger.

The reading is the ledger's (`ledger.read_models`, and `ledger.listing` for the list, the
same paging as GET /v1/intents and `herald list`); this module keeps the wording: times
with their zone, ages in words, the titles of the reconciliation sets, the one-sentence
outcome of an intent, the CSV of a list.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from api.console.entries import Entry, channel_word, entries_of
from domain import channels
from domain.intents import IntentState
from domain.provider_errors import meaning
from domain.settlement import AWAITING_FILTERS
from domain.states import AttemptState
from ledger import review_items
from ledger.listing import IntentFilter
from ledger.read_models.intent_list import export_pages
from ledger.read_models.reconciliation import ReviewSet

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


def date_presets(now: datetime) -> list[tuple[str, datetime]]:
    """The list's date presets: (label, created from), each up to now."""
    midnight = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return [
        ("Last hour", now - timedelta(hours=1)),
        ("Today (UTC)", midnight),
        ("Last 24 hours", now - timedelta(days=1)),
        ("Last 7 days", now - timedelta(days=7)),
    ]


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


def csv_rows(session: Session, flt: IntentFilter) -> Iterator[str]:
    """The CSV of the filter, page by page (`ledger.read_models.intent_list.export_pages`):
    ids, keys, states and versions; never a destination or a body."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    yield buffer.getvalue()
    for exported in export_pages(session, flt):
        buffer.seek(0)
        buffer.truncate()
        for row in exported:
            item, i = row.item, row.item.intent
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
                " ".join(row.policy_versions),
                i.template_key,
                " ".join(str(v) for v in row.template_versions),
                i.awaiting or "",
                i.awaiting_until.astimezone(UTC).isoformat() if i.awaiting_until else "",
            ]
            writer.writerow([csv_cell(c) for c in cells])
        yield buffer.getvalue()


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
    """A reconciliation set as its page shows it."""

    kind: str
    title: str
    count: int
    oldest_age: str | None
    exposure: list[tuple[str, str, int]]
    """(event type, category, members)."""
    members: list[dict[str, Any]]
    """The oldest shown (`ledger.read_models.reconciliation.MEMBERS_SHOWN`), each an open
    review item."""


def reconciliation(sets: list[ReviewSet], now: datetime) -> list[SetSummary]:
    """Each reconciliation set (`ledger.read_models.reconciliation.review_sets`) in words:
    its title, times with their zone, ages as a person reads them."""
    return [
        SetSummary(
            s.kind,
            SET_TITLES[s.kind],
            s.count,
            review_items.format_age(now - s.oldest) if s.oldest else None,
            s.exposure,
            [
                {
                    "id": m.id,
                    "subject": m.subject,
                    "since": when(m.since),
                    "age": review_items.format_age(now - m.since),
                    "found_at": when(m.found_at),
                    "intent_id": m.intent_id,
                    "business_key": m.business_key,
                    "channel": m.channel,
                    "opened_by": m.opened_by,
                    "opened_why": m.opened_why,
                }
                for m in s.members
            ],
        )
        for s in sets
    ]
