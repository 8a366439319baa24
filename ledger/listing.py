"""Listing intents with their derived state, keyset paged.

The one implementation behind GET /v1/intents, POST /v1/recipients/intents, `herald list`
and the console's list.

The state is derived (domain.intents), never stored: a state filter first narrows in SQL
to intents that could be in it (`could_be`), then derives each row's state and keeps the
matches. Pages are keyset on (created_at, id), never OFFSET, so an intent recorded while a
client pages does not shift the pages it has not read yet, and each page reads at most
`SCAN_PER_PAGE` rows: a page that did not fill links on from where its scan stopped, so
paging through a filter has no cap. A cursor is opaque to its reader: base64url of a small
JSON (position, direction, and a digest of the filter it was made for); `read_cursor`
refuses anything else, and a cursor made for another filter.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import ColumnElement, Row, cast, exists, func, literal, or_, select, text, true
from sqlalchemy.dialects.postgresql import JSONB, aggregate_order_by, distinct_on
from sqlalchemy.orm import Session

from domain import channels
from domain.intents import IntentState, derive_intent_state
from domain.policy import Outcome
from domain.settlement import AWAITING_ANY, Awaiting
from domain.states import AttemptState
from ledger.models import Attempt, Intent, PolicyDecision

PAGE_SIZE = 50
SCAN_BATCH = 500
SCAN_PER_PAGE = 2000
"""Rows read per page when a state filter is on (the state is derived, not stored); a page
that did not fill links on from where the scan stopped, so paging has no cap."""


def derive_states(session: Session, intents: list[Intent], now: datetime) -> dict[str, str]:
    """The derived state of many intents, in two queries instead of three per intent."""
    ids = [i.id for i in intents]
    if not ids:
        return {}
    attempt_states: dict[str, list[AttemptState]] = defaultdict(list)
    for intent_id, state in session.execute(
        select(Attempt.intent_id, Attempt.state).where(Attempt.intent_id.in_(ids))
    ):
        attempt_states[intent_id].append(AttemptState(state))
    last: dict[str, str] = dict(
        session.execute(
            select(PolicyDecision.intent_id, PolicyDecision.outcome)
            .where(PolicyDecision.intent_id.in_(ids))
            .order_by(PolicyDecision.intent_id, PolicyDecision.id.desc())
            .ext(distinct_on(PolicyDecision.intent_id))
        ).all()
    )
    return {
        intent.id: state_of(
            attempt_states.get(intent.id, []),
            last.get(intent.id),
            cancelled_at=intent.cancelled_at,
            expires_at=intent.expires_at,
            send_at=intent.send_at,
            now=now,
        )
        for intent in intents
    }


def state_of(
    attempts: Sequence[AttemptState],
    last_decision: str | None,
    *,
    cancelled_at: datetime | None,
    expires_at: datetime | None,
    send_at: datetime | None,
    now: datetime,
) -> str:
    """The derived state of one intent from its facts as the ledger records them."""
    return derived_state(
        attempts,
        last_decision,
        cancelled=cancelled_at is not None,
        past_expiry=expires_at is not None and expires_at <= now,
        scheduled=send_at is not None and send_at > now,
    ).value


def derived_state(
    attempt_states: Iterable[str],
    last_decision: str | None,
    *,
    cancelled: bool,
    past_expiry: bool,
    scheduled: bool,
) -> IntentState:
    """The derived state (`domain.intents.derive_intent_state`) of an intent's facts.

    The facts as the ledger reads them: its attempts' states, its latest decision's
    outcome, and whether it was cancelled, is past its expiry, or has a send-at still
    ahead. The one reading of those facts: every list, count and metric of intents by state comes
    here, so none can disagree with `herald show`. An intent past its expiry is `expired`
    only when nothing was attempted (an attempt's own outcome says more).
    """
    attempts = [AttemptState(s) for s in attempt_states]
    return derive_intent_state(
        attempt_states=attempts,
        last_decision=Outcome(last_decision) if last_decision else None,
        cancelled=cancelled,
        expired=past_expiry and not attempts,
        scheduled=scheduled,
    )


def to_recipient(lookup_hmac: str) -> ColumnElement[bool]:
    """Intents to one destination, by its lookup HMAC.

    The console's recipient search and `POST /v1/recipients/intents` both filter with this.
    """
    return or_(
        Intent.sms_destination_hmac == lookup_hmac, Intent.email_destination_hmac == lookup_hmac
    )


def waiting_for(awaiting: str) -> ColumnElement[bool]:
    """Intents whose workflow waits for an operator.

    For `awaiting` (a member of `domain.settlement.Awaiting`), or for anything (`any`);
    any other value raises ValueError. The console's list and GET /v1/intents both filter
    with this; the ledger knows it without asking Temporal (the workflow records it,
    `ledger.settlements.record_waiting`).
    """
    if awaiting == AWAITING_ANY:
        return Intent.awaiting.is_not(None)
    return Intent.awaiting == Awaiting(awaiting).value


@dataclass(frozen=True)
class IntentFilter:
    """What a list keeps: each field set narrows it (None: no narrowing)."""

    state: str | None = None
    channel: str | None = None
    event_type: str | None = None
    region: str | None = None
    category: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    key_prefix: str | None = None
    attempt_state: str | None = None
    """Intents with an attempt in this state (the overview's attempt counts lead here)."""
    attempt_from: datetime | None = None
    """Intents with an attempt prepared at or after this time (with `attempt_state`, the
    same attempt)."""
    both_channels: bool = False
    """Intents with an SMS and an email attempt (with `attempt_from`, both prepared from
    then): those the overview's fallback rate counts as falling back."""
    awaiting: str | None = None
    """Intents whose workflow waits for an operator: `settlement`, `resend` or `any`
    (`ledger.listing.waiting_for`); the overview's Needs attention counts lead here."""
    recipient_hmac: str | None = None
    """From the POST search only: never in a URL."""
    intent_ids: tuple[str, ...] | None = None
    """From the POST search only (api.console.search): these intents."""
    created_by: str | None = None
    """One principal's intents: what an app lists (never in a URL: the route sets it)."""

    def query_params(self) -> dict[str, str]:
        """The filter as URL parameters (links, paging, CSV); no recipient in them."""
        out = {
            "state": self.state,
            "channel": self.channel,
            "event_type": self.event_type,
            "region": self.region,
            "category": self.category,
            "created_from": self.created_from.isoformat() if self.created_from else None,
            "created_to": self.created_to.isoformat() if self.created_to else None,
            "key_prefix": self.key_prefix,
            "attempt_state": self.attempt_state,
            "attempt_from": self.attempt_from.isoformat() if self.attempt_from else None,
            "both_channels": "1" if self.both_channels else None,
            "awaiting": self.awaiting,
        }
        return {k: v for k, v in out.items() if v}

    def apply(self, query: Any) -> Any:
        """`query` (over Intent) narrowed to the filter."""
        if self.channel:
            query = query.where(
                cast(Intent.channel_plan, JSONB).contains({"channels": [self.channel]})
            )
        if self.event_type:
            query = query.where(Intent.event_type == self.event_type)
        if self.region:
            query = query.where(Intent.region == self.region)
        if self.category:
            query = query.where(Intent.category == self.category)
        if self.created_from:
            query = query.where(Intent.created_at >= self.created_from)
        if self.created_to:
            query = query.where(Intent.created_at < self.created_to)
        if self.key_prefix:
            escaped = self.key_prefix.replace("\\", "\\\\").replace("%", r"\%").replace("_", r"\_")
            query = query.where(Intent.business_key.like(escaped + "%", escape="\\"))
        if self.attempt_state:
            query = query.where(self._attempted().where(Attempt.state == self.attempt_state))
        elif self.attempt_from and not self.both_channels:
            query = query.where(self._attempted())
        if self.both_channels:
            query = query.where(*(self._attempted(c) for c in channels.NAMES))
        if self.awaiting:
            query = query.where(waiting_for(self.awaiting))
        if self.state:
            query = query.where(could_be(self.state))
        if self.intent_ids is not None:
            query = query.where(Intent.id.in_(self.intent_ids))
        if self.recipient_hmac:
            query = query.where(to_recipient(self.recipient_hmac))
        if self.created_by is not None:
            query = query.where(Intent.created_by == self.created_by)
        return query

    def digest(self) -> str:
        """What a cursor remembers of the filter it was made for.

        No value is readable: the recipient's HMAC and the principal are hashed with the rest.
        """
        doc = {
            **self.query_params(),
            "recipient_hmac": self.recipient_hmac,
            "intent_ids": list(self.intent_ids) if self.intent_ids is not None else None,
            "created_by": self.created_by,
        }
        raw = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    def _attempted(self, channel: str | None = None) -> Any:
        """The intent has an attempt (on `channel`) prepared from `attempt_from`."""
        condition = exists().where(Attempt.intent_id == Intent.id)
        if channel:
            condition = condition.where(Attempt.channel == channel)
        if self.attempt_from:
            condition = condition.where(Attempt.prepared_at >= self.attempt_from)
        return condition


def _has_attempt(*states: AttemptState) -> Any:
    return exists().where(
        Attempt.intent_id == Intent.id, Attempt.state.in_([s.value for s in states])
    )


def _has_decision(outcome: Outcome) -> Any:
    return exists().where(
        PolicyDecision.intent_id == Intent.id, PolicyDecision.outcome == outcome.value
    )


def could_be(state: str) -> Any:
    """A condition every intent in derived `state` meets (most others do not).

    So a state filter reads few rows; the state itself is still decided by the domain's
    derivation (domain.intents), row by row, after this narrowing.
    """
    necessary: dict[str, Any] = {
        IntentState.DELIVERED: _has_attempt(AttemptState.DELIVERED),
        IntentState.SENT: _has_attempt(AttemptState.SENT),
        IntentState.SENDING: _has_attempt(AttemptState.SUBMITTED, AttemptState.PREPARED),
        IntentState.UNKNOWN: _has_attempt(AttemptState.UNKNOWN),
        IntentState.CANCELLED: or_(
            Intent.cancelled_at.is_not(None), _has_attempt(AttemptState.CANCELLED)
        ),
        IntentState.EXPIRED: Intent.expires_at.is_not(None),
        IntentState.DEFERRED: _has_decision(Outcome.DEFER),
        IntentState.UNDELIVERED: _has_attempt(AttemptState.UNDELIVERED),
        IntentState.FAILED: _has_attempt(AttemptState.FAILED),
        IntentState.DENIED: _has_decision(Outcome.DENY),
        IntentState.SCHEDULED: Intent.send_at.is_not(None),
    }
    return necessary.get(IntentState(state), true())


IntentRow = Row[Any]
"""An intent as the lists show it: the columns of LISTED_COLUMNS, by name."""
LISTED_COLUMNS = (
    Intent.id,
    Intent.business_key,
    Intent.event_type,
    Intent.category,
    Intent.region,
    Intent.template_key,
    Intent.created_at,
    Intent.send_at,
    Intent.cancelled_at,
    Intent.expires_at,
    Intent.awaiting,
    Intent.awaiting_until,
    Intent.channel_plan,
    Intent.template_version,
    Intent.created_by,
)


@dataclass
class ListedIntent:
    """One row of a list with its derived state."""

    intent: IntentRow
    state: str
    channel_states: dict[str, str]
    """The latest attempt's state per channel."""


def latest_outcome() -> Any:
    """Per intent, its latest policy decision's outcome (through the intent_id index).

    A scalar subquery of a statement over `Intent`.
    """
    return (
        select(PolicyDecision.outcome)
        .where(PolicyDecision.intent_id == Intent.id)
        .order_by(PolicyDecision.id.desc())
        .limit(1)
        .scalar_subquery()
    )


def listed(query: Any) -> Any:
    """`query` (over Intent) reading what a list shows, with its facts in one round trip.

    The facts its state is derived from: every attempt's [channel, state] in attempt order,
    and the latest decision's outcome (each through its intent_id index, for the listed rows
    only).
    """
    attempts = (
        select(
            func.json_agg(
                aggregate_order_by(
                    func.json_build_array(Attempt.channel, Attempt.state),
                    Attempt.channel,
                    Attempt.number,
                )
            )
        )
        .where(Attempt.intent_id == Intent.id)
        .scalar_subquery()
    )
    latest = latest_outcome()
    return query.with_only_columns(
        *LISTED_COLUMNS, attempts.label("attempts"), latest.label("outcome")
    )


def listed_intent(row: Row[Any], now: datetime) -> ListedIntent:
    """A row of `listed` with its state derived as of `now`."""
    pairs = row.attempts or []
    state = state_of(
        [AttemptState(s) for _, s in pairs],
        row.outcome,
        cancelled_at=row.cancelled_at,
        expires_at=row.expires_at,
        send_at=row.send_at,
        now=now,
    )
    # In attempt order per channel: the last one of each channel is its latest.
    return ListedIntent(row, state, dict(pairs))


@dataclass
class IntentList:
    """One page of a list, newest first, with the cursors on either side."""

    items: list[ListedIntent]
    next_cursor: str | None
    """Where the next older page starts; None: nothing older."""
    scanned: int
    newer_cursor: str | None = None
    """Where the next newer page starts (paging back); None: this is the newest."""


def plan_for_these_values(session: Session) -> None:
    """Have Postgres plan this transaction's queries for their actual filter values.

    psycopg prepares a statement after its fifth run, and Postgres then tries a generic
    plan, which cannot see that `unknown` is 3 % of attempts or how rare an event type and
    region are together: at 100,000 intents the filtered list's generic plan walked a
    region's whole index (50 ms) where the plan for the values takes 15 ms. Planning each
    run costs under a millisecond.
    """
    session.execute(text("SET LOCAL plan_cache_mode = force_custom_plan"))


def _past(query: Any, position: tuple[datetime, str], *, older: bool) -> Any:
    """`query` narrowed to rows strictly older (or newer) than the keyset `position`."""
    key = func.row(Intent.created_at, Intent.id)
    bound = func.row(literal(position[0]), position[1])
    return query.where(key < bound if older else key > bound)


@dataclass
class _Scanned:
    matched: list[ListedIntent]
    scanned: int
    last: IntentRow | None
    """The last row read (None: none)."""
    exhausted: bool
    """Nothing lies beyond `last` in the direction read."""


def _scan(
    session: Session,
    query: Any,
    flt: IntentFilter,
    *,
    start: tuple[datetime, str] | None,
    older: bool,
    size: int,
    scan_limit: int,
) -> _Scanned:
    """Read `query` (ordered in the direction read) past `start` in growing batches.

    Keeps the rows in the filter's state, until `size` match or `scan_limit` were read.
    """
    now = datetime.now(UTC)
    matched: list[ListedIntent] = []
    scanned = 0
    last: IntentRow | None = None
    position = start
    # With a state filter the SQL narrowing (could_be) lets most rows through: start at
    # twice the page and grow, rather than reading a large batch for a few rows.
    batch = size if flt.state is None else size * 2
    exhausted = False
    while len(matched) < size and scanned < scan_limit:
        batch_query = query if position is None else _past(query, position, older=older)
        rows = list(session.execute(batch_query.limit(batch)))
        for row in rows:
            scanned += 1
            last = row
            position = (row.created_at, row.id)
            item = listed_intent(row, now)
            if flt.state is None or item.state == flt.state:
                matched.append(item)
                if len(matched) == size:
                    break
        if len(rows) < batch:
            # Nothing beyond these rows, unless the page filled before the last of them.
            exhausted = not rows or last is rows[-1]
            break
        batch = min(batch * 4, SCAN_BATCH)
    return _Scanned(matched, scanned, last, exhausted)


def list_page(
    session: Session,
    flt: IntentFilter,
    *,
    after: tuple[datetime, str] | None = None,
    size: int = PAGE_SIZE,
    scan_limit: int = SCAN_PER_PAGE,
) -> IntentList:
    """Newest first, keyset paged on (created_at, id): the page older than `after`."""
    plan_for_these_values(session)
    query = listed(flt.apply(select(Intent))).order_by(Intent.created_at.desc(), Intent.id.desc())
    read = _scan(session, query, flt, start=after, older=True, size=size, scan_limit=scan_limit)
    matched, last = read.matched, read.last
    cursor = (
        encode_cursor_of(_at(last), Toward.OLDER, flt)
        if last is not None and not read.exhausted
        else None
    )
    newer = None
    if after is not None:
        newer = encode_cursor_of(_at(matched[0].intent) if matched else after, Toward.NEWER, flt)
    return IntentList(matched, cursor, read.scanned, newer)


def newer_page(
    session: Session,
    flt: IntentFilter,
    *,
    before: tuple[datetime, str],
    size: int = PAGE_SIZE,
    scan_limit: int = SCAN_PER_PAGE,
) -> IntentList:
    """The page of intents just newer than `before` (paging back), newest first.

    Read oldest first from `before`, as `list_page` reads newest first from `after`.
    """
    plan_for_these_values(session)
    query = listed(flt.apply(select(Intent))).order_by(Intent.created_at.asc(), Intent.id.asc())
    read = _scan(session, query, flt, start=before, older=False, size=size, scan_limit=scan_limit)
    matched, last, exhausted = read.matched, read.last, read.exhausted
    if not exhausted and last is not None:
        # A full page: is there anything newer at all (one index probe)?
        since = (last.created_at, last.id)
        exhausted = session.execute(_past(query, since, older=False).limit(1)).first() is None
    matched.reverse()
    newer = (
        encode_cursor_of(_at(last), Toward.NEWER, flt)
        if last is not None and not exhausted
        else None
    )
    older = encode_cursor_of(_at(matched[-1].intent) if matched else before, Toward.OLDER, flt)
    return IntentList(matched, older, read.scanned, newer)


def page(
    session: Session,
    flt: IntentFilter,
    cursor: Cursor | None = None,
    *,
    size: int = PAGE_SIZE,
    scan_limit: int | None = None,
) -> IntentList:
    """The page `cursor` points at (None: the newest), newest first.

    `scan_limit` defaults to `SCAN_PER_PAGE`, read when called.
    """
    scan_limit = SCAN_PER_PAGE if scan_limit is None else scan_limit
    if cursor is None or cursor.toward is Toward.OLDER:
        position = cursor.position if cursor else None
        return list_page(session, flt, after=position, size=size, scan_limit=scan_limit)
    return newer_page(session, flt, before=cursor.position, size=size, scan_limit=scan_limit)


# --- cursors -------------------------------------------------------------------------------


class Toward(StrEnum):
    """Which way a cursor pages from its position."""

    OLDER = "older"
    NEWER = "newer"


@dataclass(frozen=True)
class Cursor:
    """Where a page starts, and which way it reads."""

    position: tuple[datetime, str]
    """(created_at, id) of the row the page starts beyond (exclusive)."""
    toward: Toward


class InvalidCursor(ValueError):
    """A cursor this code did not make, or made for another filter."""


MAX_CURSOR_LENGTH = 400
_CURSOR_FIELDS = {"at", "id", "to", "f"}


def _at(row: Any) -> tuple[datetime, str]:
    return (row.created_at, row.id)


def encode_cursor_of(position: tuple[datetime, str], toward: Toward, flt: IntentFilter) -> str:
    """The opaque cursor of a page starting beyond `position`, for `flt` only."""
    doc = {"at": position[0].isoformat(), "id": position[1], "to": toward.value, "f": flt.digest()}
    raw = json.dumps(doc, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def read_cursor(value: str, flt: IntentFilter) -> Cursor:
    """The cursor `value` names, if this code made it for `flt`.

    Anything else raises InvalidCursor, saying why in words, never echoing the value.
    """
    if not value or len(value) > MAX_CURSOR_LENGTH:
        raise InvalidCursor("not a page cursor of this list")
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        doc = json.loads(raw)
        if not isinstance(doc, dict) or set(doc) != _CURSOR_FIELDS:
            raise ValueError
        at = datetime.fromisoformat(doc["at"])
        intent_id, toward, digest = doc["id"], Toward(doc["to"]), doc["f"]
        if at.tzinfo is None or not isinstance(intent_id, str) or not isinstance(digest, str):
            raise ValueError
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError) as err:
        raise InvalidCursor("not a page cursor of this list") from err
    if digest != flt.digest():
        raise InvalidCursor("a page cursor of another filter; page with the filters it came from")
    return Cursor((at, intent_id), toward)
