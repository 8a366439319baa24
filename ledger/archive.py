"""The archive: closed intents past the policy's evidence retention leave the hot tables.

`archive` takes, in one transaction, a batch of intents that are

- closed: derived state final (domain.intents.FINAL_STATES), no attempt prepared or with
  the provider, no settlement or resend awaited (`awaiting` null), no unresolved review
  item about it;
- not on legal hold;
- older than the active policy's `[retention] evidence_days`, counted from the intent's
  last activity (the latest time any of its rows names: a receipt a month late restarts
  the count);

and for each writes a tombstone into `archived_intent` holding the export (canonical JSON
of the intent and every row about it: outbox, decisions, attempts, observations, operator
actions, review items), the export's SHA-256 and a hash chain over every tombstone, then
deletes those rows. Contact data is never exported (ledger.contact_data.ERASED_COLUMNS
are left out; after the PII retention they are empty anyway), so an erasure never needs
to reach the archive.

Why a table and not files: the export and the delete commit together, so a run that
dies half-way leaves each intent either archived or untouched (resumable, and a second
run finds nothing to do); any worker may run it without a shared folder; and the one
ledger backup holds the archive with everything else. `herald archive export` writes the
documents as JSON Lines for cold storage, and `herald archive verify [FILE]` checks the
chain and each document (in the ledger or in such a file) against its tombstone.

The business key stays taken in its namespace: `archived_intent` holds one per namespace
and key, and recording an intent under an archived key is refused
(ledger.repository.record_intent).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Table, delete, exists, false, func, select, tuple_
from sqlalchemy.orm import Session

from domain.clocks import iso_utc
from domain.intents import FINAL_STATES
from domain.policy import load_policy
from domain.states import AttemptState
from ledger import contact_data
from ledger import repository as repo
from ledger.listing import derive_states
from ledger.models import (
    ArchivedIntent,
    Attempt,
    Intent,
    Observation,
    OperatorAction,
    Outbox,
    PolicyDecision,
    ReviewItem,
)

FORMAT = "herald-archive/1"
"""The export's format word, first key of every document."""
GENESIS = "0" * 64
"""The chain hash before the first tombstone."""
ARCHIVE_LOCK = 0x48_41_52_43  # "HARC"
"""The transaction-level advisory lock that makes archivers take turns (the chain has
one tip: two batches at once would both link to it)."""
IN_FLIGHT = (AttemptState.PREPARED.value, AttemptState.SUBMITTED.value)

# (document key, table, how its rows are found from the batch's intent ids), in the
# order they are deleted: children before the rows they reference.
_Rows = Callable[[list[str]], Any]
PARTS: tuple[tuple[str, type, _Rows], ...] = (
    (
        "observations",
        Observation,
        lambda ids: Observation.attempt_id.in_(
            select(Attempt.id).where(Attempt.intent_id.in_(ids))
        ),
    ),
    ("attempts", Attempt, lambda ids: Attempt.intent_id.in_(ids)),
    ("decisions", PolicyDecision, lambda ids: PolicyDecision.intent_id.in_(ids)),
    ("operator_actions", OperatorAction, lambda ids: OperatorAction.intent_id.in_(ids)),
    ("review_items", ReviewItem, lambda ids: ReviewItem.intent_id.in_(ids)),
    ("outbox", Outbox, lambda ids: Outbox.intent_id.in_(ids)),
)


def canonical_json(value: Any) -> str:
    """The one serialization hashed and stored.

    Sorted keys, no spaces, UTF-8, times in UTC ISO 8601.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_plain
    )


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso_utc(value)
    raise TypeError(f"cannot archive a {type(value).__name__}")


def sha256(text: str) -> str:
    """SHA-256 of a document as stored (UTF-8)."""
    return hashlib.sha256(text.encode()).hexdigest()


def chain_link(previous: str, intent_id: str, document_sha256: str) -> str:
    """The chain hash of a tombstone.

    Over the previous tombstone's chain hash, then this one's intent id and document hash.
    """
    return sha256(f"{previous}\n{intent_id}\n{document_sha256}")


def evidence_retention(session: Session) -> tuple[str, int]:
    """The active policy's version and its `[retention] evidence_days`."""
    active = repo.active_policy(session)
    return active.version, load_policy(active.document).evidence_days


@dataclass
class ArchiveReport:
    """What one archive run did."""

    now: datetime
    policy_version: str = ""
    evidence_days: int = 0
    cutoff: datetime | None = None
    """Intents whose last activity is at or before this were due."""
    archived: int = 0
    business_keys: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    """Rows moved out of the hot tables, by document part (`intent` included)."""
    held: int = 0
    """Intents recorded before the cutoff that legal hold keeps."""
    more: bool = False
    """The batch was full: run again (after `after`) for the rest."""
    after: tuple[datetime, str] | None = None
    """The last candidate looked at (recorded-at, id): where the next batch starts."""
    batches: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON."""
        return {
            "now": iso_utc(self.now),
            "policy_version": self.policy_version,
            "evidence_days": self.evidence_days,
            "cutoff": iso_utc(self.cutoff),
            "archived": self.archived,
            "business_keys": list(self.business_keys),
            "rows": dict(self.rows),
            "held": self.held,
            "batches": self.batches,
        }


def _last_activity() -> Any:
    """The latest time any of an intent's rows names (GREATEST skips nulls)."""

    def newest(column: Any, where: Any) -> Any:
        return select(func.max(column)).where(where).scalar_subquery()

    of_attempts = Attempt.intent_id == Intent.id
    return func.greatest(
        Intent.created_at,
        Intent.send_at,
        Intent.cancelled_at,
        newest(
            func.greatest(Attempt.prepared_at, Attempt.last_status_at, Attempt.terminal_at),
            of_attempts,
        ),
        select(func.max(Observation.observed_at))
        .join(Attempt, Attempt.id == Observation.attempt_id)
        .where(of_attempts)
        .scalar_subquery(),
        newest(PolicyDecision.decided_at, PolicyDecision.intent_id == Intent.id),
        newest(OperatorAction.at, OperatorAction.intent_id == Intent.id),
    )


def _rows_of(session: Session, model: type, where: Any) -> list[dict[str, Any]]:
    table: Table = model.__table__  # type: ignore[attr-defined]
    left_out = set(contact_data.columns_of(table.name))
    columns = [c for c in table.columns if c.name not in left_out]
    ordering = [c for c in table.primary_key.columns]
    return [
        dict(row)
        for row in session.execute(select(*columns).where(where).order_by(*ordering)).mappings()
    ]


def archive(
    session: Session,
    *,
    now: datetime,
    limit: int | None = None,
    after: tuple[datetime, str] | None = None,
) -> ArchiveReport:
    """Archive up to `limit` due intents, in the caller's transaction.

    `after` (recorded-at, id) starts after a candidate an earlier batch already looked
    at, so a batch full of intents that are old but still open does not stop the run.
    Running it again archives nothing more: archived rows are gone.
    """
    if now.tzinfo is None:
        raise ValueError("now must carry a timezone")
    session.execute(select(func.pg_advisory_xact_lock(ARCHIVE_LOCK)))
    version, days = evidence_retention(session)
    cutoff = now - timedelta(days=days)
    report = ArchiveReport(now=now, policy_version=version, evidence_days=days, cutoff=cutoff)
    last_activity = _last_activity().label("last_activity")
    query = (
        select(Intent, last_activity)
        .where(
            Intent.created_at <= cutoff,
            Intent.legal_hold.is_(false()),
            Intent.awaiting.is_(None),
            ~exists().where(Attempt.intent_id == Intent.id, Attempt.state.in_(IN_FLIGHT)),
            ~exists().where(ReviewItem.intent_id == Intent.id, ReviewItem.resolved_at.is_(None)),
            last_activity <= cutoff,
        )
        .order_by(Intent.created_at, Intent.id)
        .limit(limit)
        # A row an activity holds right now is not waited for: the next run takes it.
        .with_for_update(of=Intent, skip_locked=True)
    )
    if after is not None:
        query = query.where(tuple_(Intent.created_at, Intent.id) > tuple_(*after))
    found = session.execute(query).all()
    report.more = limit is not None and len(found) == limit
    if found:
        report.after = (found[-1][0].created_at, found[-1][0].id)
    intents = [row[0] for row in found]
    states = derive_states(session, intents, now)
    due = [(i, at) for i, at in ((row[0], row[1]) for row in found) if states[i.id] in FINAL_STATES]
    report.held = (
        session.scalar(
            select(func.count())
            .select_from(Intent)
            .where(Intent.legal_hold.is_(True), Intent.created_at <= cutoff)
        )
        or 0
    )
    if due:
        _move(session, due, report, now=now)
    session.expire_all()
    return report


def _move(
    session: Session, due: list[tuple[Intent, datetime]], report: ArchiveReport, *, now: datetime
) -> None:
    ids = [i.id for i, _ in due]
    parts: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for name, model, rows in PARTS:
        grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
        found = _rows_of(session, model, rows(ids))
        if name == "observations":
            owner = dict(
                session.execute(
                    select(Attempt.id, Attempt.intent_id).where(Attempt.intent_id.in_(ids))
                ).all()
            )
            for row in found:
                grouped[owner[row["attempt_id"]]].append(row)
        else:
            for row in found:
                grouped[row["intent_id"]].append(row)
        parts[name] = grouped
        report.rows[name] = report.rows.get(name, 0) + len(found)
    intent_rows = {row["id"]: row for row in _rows_of(session, Intent, Intent.id.in_(ids))}
    report.rows["intent"] = report.rows.get("intent", 0) + len(intent_rows)
    tip = session.scalar(
        select(ArchivedIntent.chain_sha256).order_by(ArchivedIntent.id.desc()).limit(1)
    )
    previous = tip or GENESIS
    for intent, last_activity in due:
        document = canonical_json(
            {
                "format": FORMAT,
                "intent": intent_rows[intent.id],
                **{name: parts[name].get(intent.id, []) for name, _, _ in PARTS},
            }
        )
        digest = sha256(document)
        previous = chain_link(previous, intent.id, digest)
        session.add(
            ArchivedIntent(
                intent_id=intent.id,
                business_key=intent.business_key,
                namespace=intent.namespace,
                workflow_id=intent.workflow_id,
                recorded_at=intent.created_at,
                last_activity_at=last_activity,
                archived_at=now,
                policy_version=report.policy_version,
                evidence_days=report.evidence_days,
                row_counts={
                    "intent": 1,
                    **{name: len(parts[name].get(intent.id, [])) for name, _, _ in PARTS},
                },
                document=document,
                document_sha256=digest,
                chain_sha256=previous,
            )
        )
        # One at a time, in order: the chain follows the ids.
        session.flush()
        report.business_keys.append(intent.business_key)
    for _, model, rows in PARTS:
        session.execute(delete(model).where(rows(ids)).execution_options(synchronize_session=False))
    session.execute(
        delete(Intent).where(Intent.id.in_(ids)).execution_options(synchronize_session=False)
    )
    report.archived += len(due)


def archive_in_batches(
    transaction: Callable[[], AbstractContextManager[Session]], *, now: datetime, batch: int
) -> ArchiveReport:
    """The whole archive run, `batch` candidates per transaction.

    Each batch commits on its own: a run stopped half-way resumes where it was, from the
    first intent not archived.
    """
    total = ArchiveReport(now=now)
    after: tuple[datetime, str] | None = None
    while True:
        with transaction() as session:
            part = archive(session, now=now, limit=batch, after=after)
        total.batches += 1
        total.policy_version, total.evidence_days = part.policy_version, part.evidence_days
        total.cutoff, total.held = part.cutoff, part.held
        total.archived += part.archived
        total.business_keys += part.business_keys
        for name, count in part.rows.items():
            total.rows[name] = total.rows.get(name, 0) + count
        if not part.more:
            return total
        after = part.after


# --- verification ---------------------------------------------------------------------


@dataclass
class VerifyReport:
    """What `verify` checked and what did not match."""

    tombstones: int = 0
    documents_checked: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON."""
        return {
            "tombstones": self.tombstones,
            "documents_checked": self.documents_checked,
            "problems": list(self.problems),
            "ok": not self.problems,
        }


def tombstones(session: Session) -> Iterator[ArchivedIntent]:
    """Every tombstone, in chain order."""
    yield from session.execute(
        select(ArchivedIntent).order_by(ArchivedIntent.id).execution_options(yield_per=500)
    ).scalars()


def verify(session: Session, exported: Iterable[str] | None = None) -> VerifyReport:
    """Check the chain over every tombstone and each document against its hash.

    The documents are those still in the ledger, and with `exported` (the lines of a
    `herald archive export` file) those lines too, each matched to its tombstone by the
    intent id it holds.
    """
    report = VerifyReport()
    previous = GENESIS
    by_intent: dict[str, str] = {}
    for stone in tombstones(session):
        report.tombstones += 1
        previous = chain_link(previous, stone.intent_id, stone.document_sha256)
        if previous != stone.chain_sha256:
            report.problems.append(f"tombstone {stone.id} ({stone.business_key}): chain broken")
            previous = stone.chain_sha256  # report each break once, then go on from it
        if stone.document is not None:
            report.documents_checked += 1
            if sha256(stone.document) != stone.document_sha256:
                report.problems.append(
                    f"tombstone {stone.id} ({stone.business_key}): document does not match its hash"
                )
        by_intent[stone.intent_id] = stone.document_sha256
    for number, line in enumerate(exported or (), start=1):
        text = line.rstrip("\n")
        if not text:
            continue
        try:
            intent_id = json.loads(text)["intent"]["id"]
        except (ValueError, KeyError, TypeError):
            report.problems.append(f"line {number}: not an archived intent's document")
            continue
        report.documents_checked += 1
        expected = by_intent.get(intent_id)
        if expected is None:
            report.problems.append(f"line {number}: intent {intent_id} has no tombstone")
        elif sha256(text) != expected:
            report.problems.append(f"line {number}: intent {intent_id} does not match its hash")
    return report


def drop_documents(session: Session, exported: Iterable[str]) -> int:
    """Null the documents that `exported` (the lines of an export file) holds intact.

    Only a line whose hash is its tombstone's lets that tombstone's document go: what
    stays is the tombstone (its hash and chain), against which the file is verified later.
    Returns how many documents were dropped.
    """
    good: dict[str, str] = {}
    for line in exported:
        text = line.rstrip("\n")
        if not text:
            continue
        try:
            good[json.loads(text)["intent"]["id"]] = sha256(text)
        except (ValueError, KeyError, TypeError):
            continue
    dropped = 0
    for stone in session.execute(
        select(ArchivedIntent).where(
            ArchivedIntent.intent_id.in_(list(good)), ArchivedIntent.document.is_not(None)
        )
    ).scalars():
        if good[stone.intent_id] == stone.document_sha256:
            stone.document = None
            dropped += 1
    session.flush()
    return dropped
