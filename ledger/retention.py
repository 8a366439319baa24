"""Retention: remove readable PII after its window, keep the routing evidence.

`purge` nulls every ciphertext that can be decrypted back into a phone number, an email
address, template variables or a rendered body once its purge-after time has passed,
unless the intent is on legal hold. What stays is what an auditor needs and what holds no
PII: lookup HMACs, template key and version, content SHA-256, policy decisions with their
version and inputs, remote ids and Message-IDs, and every observation.

Consent rows are left alone on purpose: they are the evidence that a contact was
allowed, they name the app's `recipient_ref` (not a destination) and must outlive the
messages they authorized.

Both writes are compare-and-set: the intents to purge are locked (`FOR UPDATE`) and each
`UPDATE` repeats the conditions (`legal_hold IS false`, purge-after passed), so a legal
hold set concurrently either lands before the purge (and exempts the intent) or after it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, exists, false, func, or_, select, update
from sqlalchemy.orm import Session

from ledger import operator_actions
from ledger import repository as repo
from ledger.models import Attempt, IdempotencyRecord, Intent
from ledger.transactions import rows_changed

LEGAL_HOLD_ACTION = "legal-hold"

IDEMPOTENCY_RETENTION = timedelta(hours=24)
"""How long an `Idempotency-Key` of POST /v1/intents is remembered (api/idempotency.py).
Its record holds a hash of the request (which carried a destination), so it goes too."""


@dataclass
class PurgeReport:
    """What one purge run did."""

    now: datetime
    """The time the purge compared purge-after values against."""
    intents_purged: int = 0
    """Intents whose destination and variable ciphertexts were removed."""
    attempts_purged: int = 0
    """Attempts whose destination, body and subject ciphertexts were removed."""
    held: int = 0
    """Intents past purge-after that legal hold kept readable."""
    waiting_for_send: int = 0
    """Intents past purge-after whose `send_at` is still ahead: purging them would make the
    scheduled send impossible, so they wait until it has happened."""
    intent_ids: list[str] = field(default_factory=list)
    more: bool = False
    """A `limit` was given and reached: run again (in a new transaction) for the rest."""
    batches: int = 0
    """Transactions used by `purge_in_batches`."""
    idempotency_keys_expired: int = 0
    """`Idempotency-Key` records past IDEMPOTENCY_RETENTION, deleted by `purge_in_batches`."""

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON (the time as ISO 8601)."""
        return {
            "now": self.now.isoformat(),
            "intents_purged": self.intents_purged,
            "attempts_purged": self.attempts_purged,
            "held": self.held,
            "waiting_for_send": self.waiting_for_send,
            "intent_ids": list(self.intent_ids),
            "more": self.more,
            "batches": self.batches,
            "idempotency_keys_expired": self.idempotency_keys_expired,
        }


def _attempt_has_pii() -> Any:
    return or_(
        Attempt.destination_ct.is_not(None),
        Attempt.body_ct.is_not(None),
        Attempt.subject_ct.is_not(None),
    )


def _intent_due(now: datetime) -> Any:
    return and_(
        Intent.purge_after.is_not(None),
        Intent.purge_after <= now,
        Intent.pii_purged_at.is_(None),
    )


def _not_waiting_for_send(now: datetime) -> Any:
    return or_(Intent.send_at.is_(None), Intent.send_at <= now)


def purge(session: Session, *, now: datetime, limit: int | None = None) -> PurgeReport:
    """Null readable PII whose purge-after has passed; intents on legal hold are exempt.

    An intent is purged when its own `purge_after` has passed (its ciphertexts and those
    of all its attempts go); an attempt is also purged on its own `purge_after`. Runs in
    the caller's transaction; running it twice is harmless. With `limit`, at most that
    many intents are locked and purged, so a large backlog goes in short transactions.
    """
    if now.tzinfo is None:
        raise ValueError("now must carry a timezone")
    report = PurgeReport(now=now)
    attempt_due = exists().where(
        Attempt.intent_id == Intent.id,
        Attempt.purge_after.is_not(None),
        Attempt.purge_after <= now,
        _attempt_has_pii(),
    )
    # Lock the candidates so a concurrent legal hold waits for us (or we for it).
    candidates = list(
        session.execute(
            select(Intent.id)
            .where(
                Intent.legal_hold.is_(false()),
                _not_waiting_for_send(now),
                or_(_intent_due(now), attempt_due),
            )
            .order_by(Intent.id)
            .limit(limit)
            .with_for_update()
        ).scalars()
    )
    report.more = limit is not None and len(candidates) == limit
    if candidates:
        purged_intents = list(
            session.execute(
                update(Intent)
                .where(
                    Intent.id.in_(candidates),
                    Intent.legal_hold.is_(false()),
                    _intent_due(now),
                    _not_waiting_for_send(now),
                )
                .values(
                    sms_destination_ct=None,
                    email_destination_ct=None,
                    variables_ct=None,
                    pii_purged_at=now,
                )
                .returning(Intent.id)
                .execution_options(synchronize_session=False)
            ).scalars()
        )
        report.intents_purged = len(purged_intents)
        report.intent_ids = sorted(purged_intents)
        held_intent = (
            select(Intent.id)
            .where(Intent.id == Attempt.intent_id, Intent.legal_hold.is_(True))
            .exists()
        )
        report.attempts_purged = rows_changed(
            session.execute(
                update(Attempt)
                .where(
                    Attempt.intent_id.in_(candidates),
                    _attempt_has_pii(),
                    or_(
                        Attempt.intent_id.in_(purged_intents),
                        and_(Attempt.purge_after.is_not(None), Attempt.purge_after <= now),
                    ),
                    ~held_intent,
                )
                .values(destination_ct=None, body_ct=None, subject_ct=None)
                .execution_options(synchronize_session=False)
            )
        )
    report.held = (
        session.scalar(
            select(func.count())
            .select_from(Intent)
            .where(Intent.legal_hold.is_(True), or_(_intent_due(now), attempt_due))
        )
        or 0
    )
    report.waiting_for_send = (
        session.scalar(
            select(func.count())
            .select_from(Intent)
            .where(
                Intent.legal_hold.is_(false()),
                _intent_due(now),
                ~_not_waiting_for_send(now),
            )
        )
        or 0
    )
    # Objects already loaded in this session must not show ciphertexts we just removed.
    session.expire_all()
    return report


def expire_idempotency_keys(
    session: Session, *, batch: int, older_than: timedelta = IDEMPOTENCY_RETENTION
) -> int:
    """Delete expired `Idempotency-Key` records, one batch.

    Delete up to `batch` `Idempotency-Key` records created more than `older_than` ago;
    their number.

    By the database's clock, as the API judges a key's age (`created_at` is set by the
    server); a purge run with `--now` ahead of time does not reach keys still in use. A
    key past its retention is already treated as unknown by the API (a new request with it
    starts afresh), so deleting it changes no answer; an in-flight record that old belongs
    to a process that died a day ago (the takeover lease is a minute). Rows the API is
    working on right now are skipped, not waited for.
    """
    old = (
        select(IdempotencyRecord.key)
        .where(IdempotencyRecord.created_at < func.now() - older_than)
        .limit(batch)
        .with_for_update(skip_locked=True)
    )
    return rows_changed(
        session.execute(delete(IdempotencyRecord).where(IdempotencyRecord.key.in_(old)))
    )


def purge_in_batches(
    transaction: Callable[[], AbstractContextManager[Session]], *, now: datetime, batch: int
) -> PurgeReport:
    """The whole retention run, in short transactions.

    The whole retention run: `purge` in transactions of at most `batch` intents each (a
    large backlog never holds locks for long), then the expired idempotency keys, also
    `batch` at a time.

    `transaction()` opens a session in a new transaction, committed when it closes.
    """
    total = PurgeReport(now=now)
    more = True
    while more:
        with transaction() as session:
            part = purge(session, now=now, limit=batch)
        total.batches += 1
        total.intents_purged += part.intents_purged
        total.attempts_purged += part.attempts_purged
        total.intent_ids += part.intent_ids
        total.held, total.waiting_for_send = part.held, part.waiting_for_send
        # A batch that purged nothing cannot be followed by one that does: stop.
        more = part.more and bool(part.intents_purged or part.attempts_purged)
    expired = batch
    while expired == batch:
        with transaction() as session:
            expired = expire_idempotency_keys(session, batch=batch)
        total.batches += 1
        total.idempotency_keys_expired += expired
    return total


@dataclass(frozen=True)
class LegalHoldResult:
    """What setting or clearing one intent's legal hold did."""

    intent_id: str
    business_key: str
    legal_hold: bool
    """The hold after the call."""
    changed: bool
    """False when the intent was already in the requested state."""
    pii_purged: bool
    """True when the PII was purged before the hold: a hold cannot bring it back."""

    def as_dict(self) -> dict[str, Any]:
        """The result as JSON."""
        return {
            "intent_id": self.intent_id,
            "business_key": self.business_key,
            "legal_hold": self.legal_hold,
            "changed": self.changed,
            "pii_purged": self.pii_purged,
        }


def set_legal_hold(
    session: Session,
    id_or_key: str,
    on: bool,
    *,
    operator: str | None = None,
    reason: str | None = None,
    at: datetime | None = None,
    operator_role: str | None = None,
) -> LegalHoldResult:
    """Put an intent on legal hold (exempt from purge) or lift the hold.

    Compare-and-set: the `UPDATE` only matches when the hold is not already `on`, so the
    result says whether this call changed anything. With `operator` and `reason` the
    change is also recorded as an operator action in the same transaction.

    Raises:
        NotFound: no intent has that id or business key.
    """
    intent = repo.get_intent(session, id_or_key)
    changed = (
        rows_changed(
            session.execute(
                update(Intent)
                .where(Intent.id == intent.id, Intent.legal_hold.is_not(on))
                .values(legal_hold=on)
                .execution_options(synchronize_session=False)
            )
        )
        == 1
    )
    session.refresh(intent)
    result = LegalHoldResult(
        intent_id=intent.id,
        business_key=intent.business_key,
        legal_hold=intent.legal_hold,
        changed=changed,
        pii_purged=intent.pii_purged_at is not None,
    )
    if operator is not None:
        if at is None:
            raise ValueError("recording an operator action needs `at`")
        operator_actions.record_operator_action(
            session,
            intent_id=intent.id,
            action=LEGAL_HOLD_ACTION,
            operator=operator,
            operator_role=operator_role,
            reason=reason or "",
            outcome="accepted",
            at=at,
            detail={"on": on, "changed": changed, "pii_purged": result.pii_purged},
        )
    return result
