"""The repository of intents, their attempts and the evidence a policy decides from.

Recording an intent (and its outbox row), finding it by id or business key, the active
policy and the consents, suppressions and recent contacts it is evaluated on, the decision
and the prepared attempt. Not the only writer of the ledger: observations
(`ledger.observations`), operator actions (`ledger.operator_actions`), settlements
(`ledger.settlements`), review items (`ledger.review_items`) and the other modules of
`ledger/` each write their own rows; every writer goes through `ledger/`, never SQL of its
own elsewhere.

Each function takes a SQLAlchemy `Session` and does its work inside the caller's
transaction, so an app can record an intent atomically with its own business change.
State changes are compare-and-set (`UPDATE ... WHERE state = :seen`, row count checked)
and the decision of what may change comes from `domain.states.apply`, never from SQL.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import (
    Row,
    Select,
    String,
    Table,
    any_,
    bindparam,
    exists,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from domain import keys
from domain.keys import workflow_id as workflow_id_for
from domain.principals import Principal
from domain.states import AttemptState
from ledger import metrics
from ledger.errors import NO_INTENT, AmbiguousKey, IntentConflict, NotFound
from ledger.models import (
    ArchivedIntent,
    Attempt,
    Consent,
    Intent,
    Outbox,
    PolicyDecision,
    PolicyVersion,
    Suppression,
)

# The hot paths (recording an intent, an outbox mark; receipts in ledger.observations)
# write through the Core tables: an ORM-enabled INSERT or UPDATE also runs the ORM's bulk
# machinery and session synchronisation, which these statements never need (the caller
# re-reads a row when it must). Measured: 0.17-0.29 ms CPU per Core UPDATE against
# 0.42-0.66 ms through the ORM.
_ATTEMPTS = cast(Table, Attempt.__table__)
_OUTBOXES = cast(Table, Outbox.__table__)
_INTENTS = cast(Table, Intent.__table__)
_ATTEMPT = _ATTEMPTS.c
_OUTBOX = _OUTBOXES.c
_INTENT = _INTENTS.c
_POLICY = cast(Table, PolicyVersion.__table__).c
_DECISIONS = cast(Table, PolicyDecision.__table__)

# Statements built once: building one (select, where, values) coerces every element and
# costs more CPU than running it from SQLAlchemy's compiled cache. The values come as
# execution parameters, named like the columns.
_INSERT_OUTBOX = pg_insert(_OUTBOXES)
_ARCHIVED_KEY = exists().where(
    cast(Table, ArchivedIntent.__table__).c.business_key == bindparam("business_key"),
    cast(Table, ArchivedIntent.__table__).c.namespace == bindparam("namespace"),
)
_INSERT_DECISION = pg_insert(_DECISIONS).returning(_DECISIONS.c.id)
_INSERT_ATTEMPT = (
    pg_insert(_ATTEMPTS).on_conflict_do_nothing(index_elements=["token"]).returning(_ATTEMPT.id)
)
_ATTEMPT_ID_BY_TOKEN = select(_ATTEMPT.id).where(_ATTEMPT.token == bindparam("token"))
_ACTIVE_POLICY_VERSION = select(_POLICY.version).where(_POLICY.active.is_(True))
_MARK_OUTBOX_STARTED = (
    update(_OUTBOXES)
    .where(
        # `= ANY(array)`: one statement text (and one prepared statement) for any count.
        _OUTBOX.intent_id == any_(bindparam("intents", type_=ARRAY(String))),
        _OUTBOX.started_at.is_(None),
    )
    .values(started_at=bindparam("at"))
)


@dataclass(frozen=True)
class RecordedIntent:
    """What recording an intent did: its id and workflow id, and whether it existed."""

    intent_id: str
    workflow_id: str
    business_key: str
    created: bool
    created_by: str | None = None
    """Who recorded the intent: this request's principal, or the existing intent's."""


@dataclass(frozen=True)
class IntentFields:
    """A validated, normalized request as the ledger stores it (PII already encrypted)."""

    business_key: str
    event_type: str
    category: str
    region: str
    country: str
    timezone: str
    recipient_ref: str
    channel_plan: dict[str, Any]
    template_key: str
    template_version: int | None
    locale: str
    sms_destination_ct: str | None
    sms_destination_hmac: str | None
    email_destination_ct: str | None
    email_destination_hmac: str | None
    variables_ct: str | None
    variables_sha256: str
    artifact_sha256: str | None
    send_at: datetime | None
    expires_at: datetime | None
    purge_after: datetime | None
    created_by: str | None = None
    """The principal recording it (not part of the payload: who asks does not change what
    is asked)."""
    namespace: str = keys.DEFAULT_NAMESPACE
    """The key's namespace (domain.keys): part of the key's identity, not of the payload."""
    email_search_hmac: str | None = None
    """The console search's lookup of the email address in any letter case
    (`domain.destinations.search_form`); not part of the payload hash."""
    template_pins: dict[str, Any] | None = None
    """The template locale and version chosen per channel at intake (`Intent.template_pins`);
    not part of the payload hash: the same request repeated after an activation is the
    same intent, pinned to what it was first recorded with."""

    def payload_sha256(self) -> str:
        """A hash of the request's fields, to tell a repeat from a different request."""
        # Hash over lookups and hashes, never plaintext, so the hash itself leaks nothing.
        # The keys below are the hash's own words (one per destination column pair), fixed
        # so that a repeated request keeps matching the intents recorded before it.
        doc = {
            "category": self.category,
            "recipient_ref": self.recipient_ref,
            "plan": self.channel_plan,
            "template": [self.template_key, self.template_version, self.locale],
            "sms": self.sms_destination_hmac,
            "email": self.email_destination_hmac,
            "variables": self.variables_sha256,
            "artifact": self.artifact_sha256,
            "send_at": self.send_at.isoformat() if self.send_at else None,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


_INTENT_VALUES = (
    "id",
    "payload_sha256",
    "workflow_id",
    *(f.name for f in dataclass_fields(IntentFields) if f.name != "variables_sha256"),
)
_INSERT_INTENT = (
    pg_insert(_INTENTS)
    .from_select(
        _INTENT_VALUES,
        # The values as parameters, inserted only when no tombstone holds the key: the
        # archive's check costs no round trip of its own.
        select(*(bindparam(name, type_=_INTENT[name].type) for name in _INTENT_VALUES)).where(
            ~_ARCHIVED_KEY
        ),
    )
    .on_conflict_do_nothing(index_elements=["namespace", "business_key"])
    .returning(_INTENT.id)
)


def record_intent(session: Session, fields: IntentFields) -> RecordedIntent:
    """Insert the intent and its outbox row, or return the existing intent for the key.

    The key is looked for in its namespace only: another namespace's intent of the same
    key is never met, never replayed, never a conflict.
    """
    payload = fields.payload_sha256()
    values = {k: v for k, v in fields.__dict__.items() if k not in ("variables_sha256",)}
    workflow_id = workflow_id_for(keys.identity(fields.namespace, fields.business_key))
    new_id = session.execute(
        _INSERT_INTENT,
        dict(id=_uuid(), payload_sha256=payload, workflow_id=workflow_id, **values),
    ).scalar_one_or_none()
    if new_id is not None:
        session.execute(_INSERT_OUTBOX, {"intent_id": new_id})
        return RecordedIntent(new_id, workflow_id, fields.business_key, True, fields.created_by)
    existing = session.execute(
        select(Intent).where(
            Intent.namespace == fields.namespace, Intent.business_key == fields.business_key
        )
    ).scalar_one_or_none()
    if existing is None:
        # Not inserted and no intent: the key's intent was archived (ledger/archive.py).
        # One key, one intent, for ever.
        raise IntentConflict(f"business key {fields.business_key!r} belongs to an archived intent")
    if existing.payload_sha256 != payload:
        raise IntentConflict(
            f"business key {fields.business_key!r} already recorded with a different payload"
        )
    channels = (existing.channel_plan or {}).get("channels") or [None]
    metrics.note_duplicate(session, "business_key_existing", channels[0])
    return RecordedIntent(
        existing.id, existing.workflow_id, existing.business_key, False, existing.created_by
    )


def _uuid() -> str:
    import uuid

    return str(uuid.uuid4())


@dataclass(frozen=True)
class KeyScope:
    """Where a caller's business keys are looked up (docs/api.md "How keys are scoped")."""

    namespace: str | None = None
    """The caller's namespace, searched first; None: no namespace of its own."""
    anywhere: bool = True
    """Whether other namespaces are searched too (people's roles read every intent); an
    app's scope is its namespace alone."""

    @classmethod
    def of(cls, by: Principal | None) -> KeyScope:
        """The scope of principal `by`; None (in-process, the CLI's ledger reads): anywhere."""
        if by is None:
            return cls()
        return cls(by.key_namespace, anywhere=not by.reads_only_own_intents)


def get_intent(session: Session, id_or_key: str, scope: KeyScope | None = None) -> Intent:
    """The intent with this id, or with this business key; raise NotFound.

    A key is read as docs/api.md "How keys are scoped" says: `NS~KEY` names the key in
    namespace NS; a bare KEY is looked up in the scope's namespace (the caller's) and
    then, when the scope is `anywhere` (people's roles), in whichever one namespace holds
    it. Otherwise only the caller's namespace is searched, even when `NS~KEY` names
    another: an app never learns of another namespace's key. Several namespaces holding
    a bare key (none of them the caller's) is NotFound naming them, to be named `NS~KEY`.
    """
    scope = scope or KeyScope()
    namespace, anywhere = scope.namespace, scope.anywhere
    named, key = keys.split_key_ref(id_or_key)
    scopes: list[str | None]
    if named is not None:
        scopes = [named] if anywhere or named == namespace else []
    else:
        scopes = [namespace] if namespace is not None else []
        if anywhere:
            scopes.append(None)
    by_key = Intent.business_key == key
    row = session.execute(select(Intent).where(Intent.id == id_or_key)).scalar_one_or_none()
    for space in scopes if row is None else []:
        found = list(
            session.execute(
                select(Intent)
                .where(by_key, *([Intent.namespace == space] if space is not None else []))
                .limit(11)
            ).scalars()
        )
        if len(found) == 1:
            row = found[0]
            break
        if found:
            spaces = ", ".join(sorted(i.namespace for i in found)[:10])
            raise AmbiguousKey(
                f"that business key is recorded in several namespaces ({spaces}): name "
                f"one as NAMESPACE{keys.NAMESPACE_SEPARATOR}KEY",
                answer=NO_INTENT,
            )
    if row is None:
        named_scopes = [s for s in scopes if s is not None]
        stone_key = (ArchivedIntent.business_key == key) & (
            true() if None in scopes else ArchivedIntent.namespace.in_(named_scopes)
        )
        archived = session.execute(
            select(ArchivedIntent.archived_at)
            .where((ArchivedIntent.intent_id == id_or_key) | stone_key)
            .limit(1)
        ).scalar_one_or_none()
        if archived is not None:
            raise NotFound(
                f"intent {id_or_key!r} was archived on {archived.date().isoformat()}, past the "
                "policy's evidence retention: its evidence is in the archive (herald archive "
                "export)",
                answer=NO_INTENT,
            )
        raise NotFound(f"no intent with id or business key {id_or_key!r}", answer=NO_INTENT)
    return row


# --- policy evidence ---------------------------------------------------------------


def active_policy(session: Session) -> PolicyVersion:
    """The active policy version; raise NotFound when none is."""
    row = session.execute(
        select(PolicyVersion).where(PolicyVersion.active.is_(True))
    ).scalar_one_or_none()
    if row is None:
        raise NotFound("no active policy version; run `herald migrate` or `herald policy activate`")
    return row


def active_policy_version(session: Session) -> str:
    """The active policy's version.

    The active policy's version alone: versions are immutable, so a caller that has
    parsed this version's document before needs nothing else (see `policy_document`).
    """
    version = session.execute(_ACTIVE_POLICY_VERSION).scalar_one_or_none()
    if version is None:
        raise NotFound("no active policy version; run `herald migrate` or `herald policy activate`")
    return version


def policy_document(session: Session, version: str) -> str:
    """The document of one policy version."""
    return session.execute(select(_POLICY.document).where(_POLICY.version == version)).scalar_one()


_CONSENT = cast(Table, Consent.__table__).c
_CONSENTS_FOR: Select[Any] = select(
    _CONSENT.id,
    _CONSENT.channel,
    _CONSENT.purpose,
    _CONSENT.source,
    _CONSENT.granted_at,
    _CONSENT.revoked_at,
    _CONSENT.revoked_source,
).where(
    _CONSENT.recipient_ref == bindparam("recipient"),
    # A consent for "*" covers every channel (the policy engine matches it too).
    _CONSENT.channel.in_([bindparam("channel"), "*"]),
)
"""Read for every attempt authorized (built once; the evidence document is not read)."""
_SUPPRESSION = cast(Table, Suppression.__table__).c
_SUPPRESSIONS_FOR: Select[Any] = select(
    _SUPPRESSION.id,
    _SUPPRESSION.channel,
    _SUPPRESSION.reason,
    _SUPPRESSION.source,
    _SUPPRESSION.at,
    _SUPPRESSION.category,
).where(
    _SUPPRESSION.destination_hmac == bindparam("hmac"),
    # An all-channels ("*") suppression applies here too, as the policy says.
    _SUPPRESSION.channel.in_([bindparam("channel"), "*"]),
    _SUPPRESSION.lifted_at.is_(None),
)
"""Read for every attempt authorized (built once)."""


def consents_for(session: Session, recipient_ref: str, channel: str) -> Sequence[Row[Any]]:
    """Every consent record of a recipient for a channel.

    Every consent record of the recipient for `channel` or "*", revoked ones included
    (id, channel, purpose, source, granted_at, revoked_at, revoked_source).
    """
    return session.execute(_CONSENTS_FOR, {"recipient": recipient_ref, "channel": channel}).all()


def suppressions_for(session: Session, destination_hmac: str, channel: str) -> Sequence[Row[Any]]:
    """The active suppressions of a destination on a channel.

    Active suppressions of the destination that apply to `channel` (id, channel,
    reason, source, at).
    """
    return session.execute(_SUPPRESSIONS_FOR, {"hmac": destination_hmac, "channel": channel}).all()


def recent_contacts(
    session: Session, destination_hmac: str, channel: str, since: datetime, exclude_intent: str
) -> list[datetime]:
    """Submission times of other intents' attempts to this destination (the cooldown input)."""
    times = session.execute(
        _RECENT_CONTACTS,
        {"hmac": destination_hmac, "channel": channel, "since": since, "intent": exclude_intent},
    ).scalars()
    return [t for t in times if t is not None]


_RECENT_CONTACTS = select(_ATTEMPT.submitted_at).where(
    _ATTEMPT.destination_hmac == bindparam("hmac"),
    _ATTEMPT.channel == bindparam("channel"),
    _ATTEMPT.submitted_at.is_not(None),
    _ATTEMPT.submitted_at >= bindparam("since"),
    _ATTEMPT.intent_id != bindparam("intent"),
)
"""Read for every attempt authorized (built once)."""


def record_decision(
    session: Session,
    *,
    intent_id: str,
    channel: str,
    policy_version: str,
    outcome: str,
    rule: str,
    reason: str,
    inputs: dict[str, Any],
    next_eligible_at: datetime | None,
    decided_at: datetime,
) -> int:
    """Persist one policy decision with its inputs; returns its id."""
    return session.execute(
        _INSERT_DECISION,
        dict(
            intent_id=intent_id,
            channel=channel,
            policy_version=policy_version,
            outcome=outcome,
            rule=rule,
            reason=reason,
            inputs=inputs,
            next_eligible_at=next_eligible_at,
            decided_at=decided_at,
        ),
    ).scalar_one()


def prepare_attempt_id(session: Session, **values: Any) -> int:
    """Persist an attempt in state `prepared`, before anything is sent.

    Persist an attempt in state `prepared` with its token, before anything is sent;
    returns its id. A retried activity finds the attempt already there (same token).
    """
    inserted = session.execute(
        _INSERT_ATTEMPT, {"state": AttemptState.PREPARED.value, **values}
    ).scalar_one_or_none()
    if inserted is not None:
        return inserted
    return session.execute(_ATTEMPT_ID_BY_TOKEN, {"token": values["token"]}).scalar_one()


def find_attempt(session: Session, token: str) -> Attempt | None:
    """The attempt with this token, or None."""
    return session.execute(select(Attempt).where(Attempt.token == token)).scalar_one_or_none()


def attempt_by_token(session: Session, token: str) -> Attempt:
    """The attempt with this token; raise NotFound."""
    row = find_attempt(session, token)
    if row is None:
        raise NotFound(f"no attempt with token {token!r}")
    return row


def attempts_of(session: Session, intent_id: str) -> list[Attempt]:
    """An intent's attempts, in the order they were prepared."""
    return list(
        session.execute(
            select(Attempt).where(Attempt.intent_id == intent_id).order_by(Attempt.id)
        ).scalars()
    )


def mark_outbox_started(session: Session, intent_ids: list[str], at: datetime) -> None:
    """Mark these intents' outbox rows started (a row already marked keeps its time)."""
    session.execute(_MARK_OUTBOX_STARTED, {"intents": intent_ids, "at": at})


def purge_horizon(now: datetime, days: int) -> datetime:
    """When data recorded `now` is purged: `days` later."""
    return now + timedelta(days=days)
