"""Erasing one recipient's contact data: the one erasure function every store of it uses.

`erase` finds a recipient's rows by the ledger's lookups (the HMAC of a phone number or
an email address, or the app's `recipient_ref`), nulls every column of
`ledger.contact_data.ERASED_COLUMNS` in them, and records the erasure (who, when, which
recipient by HMAC only, how many rows) as an audit event, in one transaction.

What stays is the evidence, as hashes: the rows themselves, their destination HMACs (so
a suppression or an opt-out of the erased person keeps holding, and an auditor holding
the number can still show it was contacted), the content and payload SHA-256s, the
decisions, observations and operator actions. Consent, suppression and inbound keyword
rows hold no ciphertext (a `recipient_ref`, an HMAC): they are counted, not changed.

Refused, naming why, and changing nothing:

- while any of the recipient's intents is on legal hold (the hold names a case that
  needs the data; lift it first, `herald legal-hold KEY --off`);
- while any of them is still open (its workflow may still send: an attempt prepared or
  with the provider, a scheduled or deferred send, a settlement or resend awaited).
  Erasure never cancels by itself: cancelling goes through the workflow
  (`herald cancel KEY`), which records it, and a message already with the provider
  cannot be recalled; the operator cancels, waits for the intent to close, and erases.

After a restore, an erasure recorded after the backup's point is applied again from its
record (`recipient_by_lookup`, `herald erase --lookup phone:<HMAC>`).

A table given new contact data registers its columns in ledger/contact_data.py and says
here how a recipient's rows are found (`ROW_FINDERS`); a test fails until both are done.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Table, func, or_, select, update
from sqlalchemy.orm import Session

from domain import key_privacy
from domain.destinations import LOOKUP_FORMS, InvalidDestination, search_form
from domain.intents import FINAL_STATES
from domain.principals import Principal
from domain.recipients import RecipientKind
from domain.states import AttemptState
from ledger import contact_data
from ledger.errors import ErasureRefused
from ledger.listing import derive_states
from ledger.models import (
    DESTINATION_COLUMNS,
    Attempt,
    Base,
    Consent,
    InboundKeyword,
    Intent,
    Suppression,
)
from ledger.principals import record_audit
from ledger.transactions import rows_changed

ERASED_ACTION = "recipient.erased"
"""The audit event's action."""
IN_FLIGHT = (AttemptState.PREPARED.value, AttemptState.SUBMITTED.value)


@dataclass(frozen=True)
class Recipient:
    """Whom to erase, as the ledger looks them up; the plain value is not kept."""

    kind: RecipientKind
    lookup: str
    """The HMAC the ledger finds them by (for a `recipient_ref`, the HMAC of the ref: the
    audit row names no one in the clear)."""
    search_lookup: str | None = None
    """An email's search-only lookup (any letter case)."""
    ref: str | None = field(default=None, repr=False)
    """The app's `recipient_ref` itself, for the rows that hold it."""

    @property
    def subject(self) -> str:
        """How the audit row names the erasure's subject: `<kind>:<hmac>`."""
        return f"{self.kind.value}:{self.lookup}"


def recipient(
    kind: str | RecipientKind, value: str, lookup_hmac: Callable[[str], str]
) -> Recipient:
    """The recipient named by a phone number, an email address or a `recipient_ref`.

    `lookup_hmac` is the ledger's lookup (`FieldCipher.lookup_hmac`,
    `HeraldClient.lookup_hmac`).

    Raises:
        ValueError: an unknown kind, or a value that is not a phone number or an address
            (the message names the problem, never the value).
    """
    try:
        named = RecipientKind(kind)
    except ValueError:
        kinds = ", ".join(k.value for k in RecipientKind)
        raise ValueError(f"unknown recipient kind {kind!r} (one of {kinds})") from None
    value = value.strip()
    if not value:
        raise ValueError(f"{named.value}: required")
    destination = named.destination
    if destination is None:
        if len(value) > 120:
            raise ValueError(f"{named.value}: at most 120 characters")
        return Recipient(named, lookup_hmac(f"{named.value}:{value}"), ref=value)
    try:
        normal = LOOKUP_FORMS[destination](value)
    except InvalidDestination as err:
        # The domain's messages describe the problem without repeating the value.
        raise ValueError(str(err)) from err
    search = lookup_hmac(search_form(normal)) if named is RecipientKind.EMAIL else None
    return Recipient(named, lookup_hmac(normal), search)


def recipient_by_lookup(subject: str) -> Recipient:
    """The recipient an erasure's record names (`phone:<HMAC>`, `email:<HMAC>`).

    To erase them again after a restore brought their data back, without the value.

    An email found so matches its normal form only (the search lookup needs the address);
    a `recipient_ref` cannot be found from its HMAC.

    Raises:
        ValueError: not `phone:` or `email:` and 64 hex digits.
    """
    word, _, lookup = subject.partition(":")
    kind = next((k for k in RecipientKind if k.value == word and k.destination), None)
    if kind is None or not re.fullmatch(r"[0-9a-f]{64}", lookup):
        raise ValueError("lookup: must be phone:<HMAC> or email:<HMAC> (64 hex digits)")
    return Recipient(kind, lookup)


def _intents_of(who: Recipient) -> Any:
    if who.kind.destination is None:
        return Intent.recipient_ref == who.ref
    found = getattr(Intent, DESTINATION_COLUMNS[who.kind.destination][1]) == who.lookup
    if who.search_lookup is None:
        return found
    return or_(found, Intent.email_search_hmac == who.search_lookup)


def _attempts_of(who: Recipient, intent_ids: list[str]) -> Any:
    mine = Attempt.intent_id.in_(intent_ids)
    if who.kind.destination is None:
        return mine
    return or_(mine, Attempt.destination_hmac == who.lookup)


ROW_FINDERS: dict[str, Callable[[Recipient, list[str]], Any]] = {
    "intent": lambda who, intent_ids: Intent.id.in_(intent_ids),
    "attempt": _attempts_of,
}
"""For each table of `contact_data.ERASED_COLUMNS`: the recipient's rows in it, given the
recipient and the ids of their intents."""

ALSO_SET: dict[str, Callable[[datetime], dict[str, Any]]] = {
    "intent": lambda at: {"pii_purged_at": func.coalesce(Intent.pii_purged_at, at)},
}
"""What else an erased row records (an intent reads as purged from then on)."""


@dataclass
class ErasureReport:
    """What one erasure did (or, refused, would have met)."""

    kind: RecipientKind
    lookup: str
    """The recipient's HMAC: the only way the erasure names them."""
    at: datetime
    rows_erased: dict[str, int] = field(default_factory=dict)
    """Rows whose contact columns were nulled, by table (rows already empty not counted)."""
    evidence_kept: dict[str, int] = field(default_factory=dict)
    """The recipient's rows that hold no contact data and stay as they are, by table."""
    intents: int = 0
    """The recipient's intents found."""
    audit_event_id: int | None = None
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON."""
        return {
            "kind": self.kind.value,
            "lookup": self.lookup,
            "at": self.at.isoformat(),
            "intents": self.intents,
            "rows_erased": dict(self.rows_erased),
            "evidence_kept": dict(self.evidence_kept),
            "audit_event_id": self.audit_event_id,
            "dry_run": self.dry_run,
        }


def _refusal(session: Session, intents: list[Intent], at: datetime) -> str | None:
    held = sorted(i.business_key for i in intents if i.legal_hold)
    if held:
        return (
            f"refused: legal hold on {', '.join(held)}; the hold keeps its contact data "
            "until it is lifted (herald legal-hold KEY --off)"
        )
    states = derive_states(session, intents, at)
    in_flight = set(
        session.execute(
            select(Attempt.intent_id).where(
                Attempt.intent_id.in_([i.id for i in intents]), Attempt.state.in_(IN_FLIGHT)
            )
        ).scalars()
    )
    still_open = sorted(
        i.business_key
        for i in intents
        if states[i.id] not in FINAL_STATES or i.awaiting is not None or i.id in in_flight
    )
    if still_open:
        return (
            f"refused: still open: {', '.join(still_open)}; cancel (herald cancel KEY) and "
            "erase once it has closed"
        )
    return None


def erase(
    session: Session,
    who: Recipient,
    *,
    by: Principal,
    reason: str,
    at: datetime,
    dry_run: bool = False,
) -> ErasureReport:
    """Null every registered contact column of `who`'s rows; record the erasure.

    Runs in the caller's transaction. The recipient's intents are locked first, so a
    legal hold set at the same time either lands before (and refuses the erasure) or
    after it. With `dry_run`, says what would be erased and changes nothing (the same
    statements, inside a savepoint that is rolled back; no audit row).

    Raises:
        ErasureRefused: a legal hold or an open intent (the message names them).
        key_privacy.NoteRefused: a reason that says nothing or holds contact data.
    """
    # The reason is kept in the audit row: it must say something, and never name the
    # person by their number or address (the rule every operator's note follows).
    key_privacy.refuse_unfit_notes({"reason": reason}, country=None)
    if at.tzinfo is None:
        raise ValueError("at must carry a timezone")
    intents = list(
        session.execute(
            select(Intent).where(_intents_of(who)).order_by(Intent.id).with_for_update()
        ).scalars()
    )
    intent_ids = [i.id for i in intents]
    report = ErasureReport(who.kind, who.lookup, at, intents=len(intents), dry_run=dry_run)
    refused = _refusal(session, intents, at) if intents else None
    if refused:
        raise ErasureRefused(refused)
    trial = session.begin_nested() if dry_run else None
    try:
        _null_columns(session, who, intent_ids, report, at)
    finally:
        if trial is not None:
            trial.rollback()
    report.evidence_kept = _evidence_kept(session, who, intents)
    return _finish(session, who, report, by=by, reason=reason)


def _null_columns(
    session: Session, who: Recipient, intent_ids: list[str], report: ErasureReport, at: datetime
) -> None:
    """Null every registered column in the recipient's rows, table by table."""
    for table_name in contact_data.tables():
        table: Table = Base.metadata.tables[table_name]
        columns = contact_data.columns_of(table_name)
        rows = ROW_FINDERS[table_name](who, intent_ids)
        not_empty = or_(*(table.c[c].is_not(None) for c in columns))
        report.rows_erased[table_name] = rows_changed(
            session.execute(
                update(table)
                .where(rows, not_empty)
                .values(
                    **{c: None for c in columns},
                    **ALSO_SET.get(table_name, lambda _: {})(at),
                )
                .execution_options(synchronize_session=False)
            )
        )


def _finish(
    session: Session, who: Recipient, report: ErasureReport, *, by: Principal, reason: str
) -> ErasureReport:
    if not report.dry_run:
        event = record_audit(
            session,
            by=by,
            action=ERASED_ACTION,
            subject=who.subject,
            at=report.at,
            detail={
                "kind": who.kind.value,
                "intents": report.intents,
                "rows_erased": report.rows_erased,
                "evidence_kept": report.evidence_kept,
                "columns": [f"{t}.{c}" for t, c in contact_data.ERASED_COLUMNS],
                "reason": reason,
            },
        )
        report.audit_event_id = event.id
    # Objects already loaded in this session must not show what was just removed.
    session.expire_all()
    return report


def _count(session: Session, model: Any, where: Any) -> int:
    return session.scalar(select(func.count()).select_from(model).where(where)) or 0


def _evidence_kept(session: Session, who: Recipient, intents: list[Intent]) -> dict[str, int]:
    refs = {i.recipient_ref for i in intents} | ({who.ref} if who.ref else set())
    kept = {"consent": _count(session, Consent, Consent.recipient_ref.in_(refs))}
    if who.kind.destination is not None:
        kept["suppression"] = _count(
            session, Suppression, Suppression.destination_hmac == who.lookup
        )
        kept["inbound_keyword"] = _count(
            session, InboundKeyword, InboundKeyword.destination_hmac == who.lookup
        )
    return kept
