"""The only way anything writes the ledger: activities, the ingress, the starter and the CLI.

Each function takes a SQLAlchemy `Session` and does its work inside the caller's
transaction, so an app can record an intent atomically with its own business change.
State changes are compare-and-set (`UPDATE ... WHERE state = :seen`, row count checked)
and the decision of what may change comes from `domain.states.apply`, never from SQL.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
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

from domain import keys, states
from domain.keys import workflow_id as workflow_id_for
from domain.principals import Principal
from domain.states import AttemptState, Verdict
from ledger import metrics
from ledger.errors import NO_INTENT, AmbiguousKey, IntentConflict, NotFound
from ledger.models import (
    ArchivedIntent,
    Attempt,
    Consent,
    Intent,
    Observation,
    OperatorAction,
    Outbox,
    PolicyDecision,
    PolicyVersion,
    Suppression,
)
from ledger.transactions import rows_changed

# The hot paths (recording an intent, a receipt, an outbox mark) write through the Core
# tables: an ORM-enabled INSERT or UPDATE also runs the ORM's bulk machinery and session
# synchronisation, which these statements never need (the caller re-reads a row when it
# must). Measured: 0.17-0.29 ms CPU per Core UPDATE against 0.42-0.66 ms through the ORM.
_ATTEMPTS = cast(Table, Attempt.__table__)
_OBSERVATIONS = cast(Table, Observation.__table__)
_OUTBOXES = cast(Table, Outbox.__table__)
_INTENTS = cast(Table, Intent.__table__)
_ATTEMPT = _ATTEMPTS.c
_OBSERVATION = _OBSERVATIONS.c
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
_INSERT_OBSERVATION = (
    pg_insert(_OBSERVATIONS)
    .on_conflict_do_nothing(index_elements=["dedupe_key"])
    .returning(_OBSERVATION.id)
)
_SWAP_ATTEMPT_STATE = update(_ATTEMPTS).where(
    _ATTEMPT.id == bindparam("attempt"), _ATTEMPT.state == bindparam("seen")
)
"""The compare-and-set of an attempt's state; the columns set are the other parameters."""
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


# --- observations ------------------------------------------------------------------


@dataclass(frozen=True)
class ObservationResult:
    """What recording one observation did to its attempt."""

    verdict: str
    """A domain Verdict value, or `duplicate` (same dedupe key seen) or `orphan`."""
    state: str | None
    token: str | None
    intent_id: str | None
    workflow_id: str | None
    observation_id: int | None = None
    remote_id: str | None = None

    @property
    def changed(self) -> bool:
        """Whether the observation moved the attempt's state."""
        return self.verdict in {v.value for v in states.CHANGING}


@dataclass(frozen=True)
class ObservationFacts:
    """One observation of an attempt, as the transition function takes it."""

    source: str
    raw_status: str
    normalized: AttemptState | None
    observed_at: datetime
    dedupe_key: str
    provider_code: str | None = None
    provider_at: datetime | None = None
    remote_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    evidence_after_delivered: bool = False
    """An email event: a failure over `delivered` is stale evidence, not a conflict
    (domain.states.apply)."""


@dataclass(frozen=True)
class Through:
    """The ingress an observation came through.

    The channel and the provider aliases it speaks for: it may move only an attempt of
    that channel sent through one of them.
    """

    name: str
    """How an operator knows the ingress (``SendGrid events``)."""
    channel: str
    providers: frozenset[str]

    def refusal(self, channel: str, provider: str | None) -> str | None:
        """Why an attempt of `channel` sent through `provider` is not this ingress's to move.

        None when it is (an attempt recorded before providers were data names none).
        """
        if channel != self.channel:
            return f"names a {channel} attempt; {self.name} speak only for {self.channel}"
        if provider is not None and provider not in self.providers:
            return f"names an attempt sent through {provider}; {self.name} do not speak for it"
        return None


def record_observation(
    session: Session,
    facts: ObservationFacts,
    *,
    token: str | None = None,
    through: Through | None = None,
) -> ObservationResult:
    """Append one observation (deduplicated) and apply it to its attempt by compare-and-set.

    The attempt is found by `token`, else by `facts.remote_id`; if neither finds one the
    observation is kept as orphan evidence for reconciliation, never dropped. An ingress
    says what it came `through`: one naming an attempt of another channel or provider is
    kept the same way, unattached, with the reason in its detail, and moves nothing.

    Core statements on plain rows throughout (this runs for every receipt, poll and send
    answer). The observation is inserted with the verdict the attempt's state as read a
    moment ago gives; only when the compare-and-set finds that state moved (a concurrent
    writer) is the verdict decided again and the row updated.
    """
    refused: list[str] = []

    def ours(row: Any) -> Any:
        why = through.refusal(row.channel, row.provider) if row and through else None
        if why is not None:
            refused.append(why)
            return None
        return row

    found = None
    if token is not None:
        found = ours(session.execute(_OBSERVED_BY_TOKEN, {"token": token}).one_or_none())
    if found is None and facts.remote_id:
        found = ours(
            session.execute(_OBSERVED_BY_REMOTE_ID, {"remote_id": facts.remote_id}).one_or_none()
        )
    if found is None and refused:
        facts = replace(facts, detail={**facts.detail, "not_applied": refused[0]})
    attempt = _SeenAttempt.of(found) if found is not None else None
    expected = (
        states.apply(
            AttemptState(attempt.state),
            facts.normalized,
            current_by_operator=attempt.settled_rule is not None,
            evidence_after_delivered=facts.evidence_after_delivered,
        )
        if attempt is not None and facts.normalized is not None
        else None
    )
    inserted = session.execute(
        _INSERT_OBSERVATION,
        dict(
            attempt_id=attempt.id if attempt else None,
            remote_id=facts.remote_id,
            source=facts.source,
            raw_status=facts.raw_status,
            normalized_status=facts.normalized.value if facts.normalized else None,
            provider_code=facts.provider_code,
            provider_at=facts.provider_at,
            observed_at=facts.observed_at,
            dedupe_key=facts.dedupe_key,
            detail=facts.detail or None,
            **_verdict_values(expected, attempt is not None),
        ),
    ).scalar_one_or_none()
    if attempt is None:
        return ObservationResult(
            "orphan" if inserted else "duplicate", None, None, None, None, inserted
        )
    assert found is not None
    times = _IntentTimes(found.region, found.created_at, found.send_at)
    base = dict(token=attempt.token, intent_id=attempt.intent_id, workflow_id=found.workflow_id)
    if inserted is None:
        metrics.note_duplicate(session, "observation_redelivery", attempt.channel)
        return ObservationResult(
            "duplicate", attempt.state, observation_id=None, remote_id=attempt.remote_id, **base
        )
    learned_remote_id = bool(facts.remote_id and attempt.remote_id is None)
    if learned_remote_id:
        # First time we learn the provider's id (maybe from a receipt that beat the send
        # response). This UPDATE may have waited for a concurrent writer of the row: what
        # it returns is the row as it is now, so the decision below needs no other read.
        fresh = session.execute(
            update(_ATTEMPTS)
            .where(_ATTEMPT.id == attempt.id, _ATTEMPT.remote_id.is_(None))
            .values(remote_id=facts.remote_id)
            .returning(*_ATTEMPT_STATE_COLUMNS)
        ).one_or_none()
        if fresh is None:
            attempt.refresh(session)  # someone else stored a remote id first
        else:
            attempt.take(fresh)
    transition = (
        _apply_observation(
            session,
            attempt,
            inserted,
            facts.normalized,
            facts.observed_at,
            facts.provider_code,
            intent_times=times,
            expected=expected,
            evidence_after_delivered=facts.evidence_after_delivered,
        )
        if facts.normalized is not None
        else None  # inserted as `ignored`
    )
    if learned_remote_id:
        _adopt_orphans(session, attempt, facts.remote_id or "", times)
    if transition is not None and transition.verdict == Verdict.REPLACES_SETTLEMENT:
        # The provider contradicted an operator's settlement: a person looks at it now,
        # not at the next sweep. (Imported here: the reconciler builds on this module.)
        from ledger.settlements import file_replaced_settlement

        file_replaced_settlement(session, observation_id=inserted, at=facts.observed_at)
    return ObservationResult(
        transition.verdict.value if transition else "stale",
        attempt.state,
        observation_id=inserted,
        remote_id=facts.remote_id or attempt.remote_id,
        **base,
    )


_ATTEMPT_STATE_COLUMNS = (
    _ATTEMPT.state,
    _ATTEMPT.remote_id,
    _ATTEMPT.submitted_at,
    _ATTEMPT.last_status_at,
    _ATTEMPT.settled_rule,
)
"""What a compare-and-set on an attempt decides from (and may have to read again)."""

_OBSERVED_ATTEMPT = select(
    _ATTEMPT.id,
    _ATTEMPT.token,
    _ATTEMPT.intent_id,
    _ATTEMPT.channel,
    _ATTEMPT.template_key,
    _ATTEMPT.template_version,
    _ATTEMPT.provider,
    *_ATTEMPT_STATE_COLUMNS,
    _INTENT.workflow_id,
    _INTENT.region,
    _INTENT.created_at,
    _INTENT.send_at,
).join(_INTENTS, _INTENT.id == _ATTEMPT.intent_id)
_OBSERVED_BY_TOKEN = _OBSERVED_ATTEMPT.where(_ATTEMPT.token == bindparam("token"))
_OBSERVED_BY_REMOTE_ID = _OBSERVED_ATTEMPT.where(_ATTEMPT.remote_id == bindparam("remote_id"))


@dataclass
class _SeenAttempt:
    """An attempt as this transaction last read or wrote it (a plain row, not an entity)."""

    id: int
    token: str
    intent_id: str
    channel: str
    template_key: str
    template_version: int
    state: str
    remote_id: str | None
    submitted_at: datetime | None
    last_status_at: datetime | None
    settled_rule: str | None = None
    """Set when the state came from an operator's settlement (domain.states.apply)."""

    @classmethod
    def of(cls, row: Any) -> _SeenAttempt:
        return cls(
            row.id,
            row.token,
            row.intent_id,
            row.channel,
            row.template_key,
            row.template_version,
            row.state,
            row.remote_id,
            row.submitted_at,
            row.last_status_at,
            row.settled_rule,
        )

    def take(self, row: Any) -> None:
        self.state, self.remote_id = row.state, row.remote_id
        self.submitted_at, self.last_status_at = row.submitted_at, row.last_status_at
        self.settled_rule = row.settled_rule

    def refresh(self, session: Session) -> None:
        self.take(
            session.execute(select(*_ATTEMPT_STATE_COLUMNS).where(_ATTEMPT.id == self.id)).one()
        )


def _verdict_values(transition: states.Transition | None, attached: bool) -> dict[str, Any]:
    """The observation's verdict columns for `transition` (None: nothing to apply)."""
    if transition is None:
        return {"verdict": "ignored"} if attached else {}
    return {
        "verdict": transition.verdict.value,
        "applied": transition.changed,
        "conflict": transition.conflict,
    }


@dataclass(frozen=True)
class _IntentTimes:
    """What the metrics of an attempt's transition need from its intent."""

    region: str
    created_at: datetime
    send_at: datetime | None

    @property
    def due_at(self) -> datetime:
        """When the intent was meant to go: its send-at if later than its recording."""
        if self.send_at is not None and self.send_at > self.created_at:
            return self.send_at
        return self.created_at


def _apply_observation(
    session: Session,
    attempt: _SeenAttempt,
    observation_id: int,
    normalized: AttemptState | None,
    observed_at: datetime,
    provider_code: str | None,
    *,
    intent_times: _IntentTimes,
    expected: states.Transition | None = None,
    evidence_after_delivered: bool = False,
) -> states.Transition | None:
    """Apply one stored observation to its attempt by compare-and-set and mark the verdict.

    `attempt` holds the state as this transaction last read or wrote it: the first
    decision is made from it (the compare-and-set still guards it); a swap that finds the
    state moved reads the row again and decides again. `expected` is the verdict the
    observation row was inserted with (None: the row has none yet); the row is updated
    only when the final verdict differs. A transition that applied, or a stale one, is
    noted for the metrics (ledger.metrics), which count it when the transaction commits.
    """
    if normalized is None:
        if expected is None:
            session.execute(
                update(_OBSERVATIONS)
                .where(_OBSERVATION.id == observation_id)
                .values(verdict="ignored")
            )
        return None
    while True:
        current = AttemptState(attempt.state)
        transition = states.apply(
            current,
            normalized,
            current_by_operator=attempt.settled_rule is not None,
            evidence_after_delivered=evidence_after_delivered,
        )
        if not transition.changed:
            break
        values: dict[str, Any] = {"state": transition.state.value, "last_status_at": observed_at}
        if transition.verdict == Verdict.REPLACES_SETTLEMENT:
            # The provider's own terminal replaces the operator's settlement (the one
            # exception to "the first terminal stands"); the observation is flagged.
            values["settled_rule"] = None
            values["settled_resend_allowed"] = None
        if transition.state in states.TERMINAL:
            values["terminal_at"] = observed_at
        if provider_code:
            values["error_code"] = provider_code
        if transition.state == AttemptState.SUBMITTED or (
            attempt.submitted_at is None and transition.state != AttemptState.UNKNOWN
        ):
            values["submitted_at"] = attempt.submitted_at or observed_at
        # As read for this compare-and-set, for the metrics of the transition.
        submitted_before, last_status_before = attempt.submitted_at, attempt.last_status_at
        swapped = rows_changed(
            session.execute(
                _SWAP_ATTEMPT_STATE, {"attempt": attempt.id, "seen": current.value, **values}
            )
        )
        if swapped == 1:
            attempt.state = transition.state.value
            if "settled_rule" in values:
                attempt.settled_rule = None
            attempt.last_status_at = observed_at
            attempt.submitted_at = values.get("submitted_at", attempt.submitted_at)
            metrics.note_transition(
                session,
                metrics.attempt_labels(
                    attempt.channel,
                    intent_times.region,
                    attempt.template_key,
                    attempt.template_version,
                ),
                before=current,
                after=transition.state,
                observed_at=observed_at,
                due_at=intent_times.due_at,
                submitted_before=submitted_before,
                last_status_before=last_status_before,
                submitted_now=values.get("submitted_at"),
            )
            break
        # Someone else moved the state between our read and our write: decide again.
        attempt.refresh(session)
    if transition.verdict == Verdict.STALE:
        metrics.note_duplicate(session, "stale_observation", attempt.channel)
    final = _verdict_values(transition, True)
    if expected is None or _verdict_values(expected, True) != final:
        session.execute(
            update(_OBSERVATIONS).where(_OBSERVATION.id == observation_id).values(**final)
        )
    return transition


_ORPHANS_OF = (
    select(
        _OBSERVATION.id,
        _OBSERVATION.normalized_status,
        _OBSERVATION.observed_at,
        _OBSERVATION.provider_code,
    )
    .where(_OBSERVATION.remote_id == bindparam("remote_id"), _OBSERVATION.attempt_id.is_(None))
    .order_by(_OBSERVATION.id)
    .with_for_update(skip_locked=True)
)
_ADOPT_ORPHAN = update(_OBSERVATIONS).where(_OBSERVATION.id == bindparam("observation"))


def _adopt_orphans(
    session: Session, attempt: _SeenAttempt, remote_id: str, intent_times: _IntentTimes
) -> None:
    """Receipts stored as orphans before we knew this remote id now belong to the attempt."""
    orphans = session.execute(_ORPHANS_OF, {"remote_id": remote_id}).all()
    for orphan in orphans:
        session.execute(_ADOPT_ORPHAN, {"observation": orphan.id, "attempt_id": attempt.id})
        normalized = AttemptState(orphan.normalized_status) if orphan.normalized_status else None
        _apply_observation(
            session,
            attempt,
            orphan.id,
            normalized,
            orphan.observed_at,
            orphan.provider_code,
            intent_times=intent_times,
        )


def observations_of(session: Session, attempt_id: int) -> list[Observation]:
    """An attempt's observations, in the order they were recorded."""
    return list(
        session.execute(
            select(Observation).where(Observation.attempt_id == attempt_id).order_by(Observation.id)
        ).scalars()
    )


# --- operators ---------------------------------------------------------------------


def record_operator_action(
    session: Session,
    *,
    intent_id: str,
    action: str,
    operator: str,
    reason: str,
    outcome: str,
    at: datetime,
    detail: dict[str, Any] | None = None,
    operator_role: str | None = None,
) -> OperatorAction:
    """Append an operator's action on an intent."""
    row = OperatorAction(
        intent_id=intent_id,
        action=action,
        operator=operator,
        operator_role=operator_role,
        reason=reason,
        outcome=outcome,
        at=at,
        detail=detail,
    )
    session.add(row)
    if action == "cancel" and outcome == "accepted":
        session.execute(
            update(Intent)
            .where(Intent.id == intent_id, Intent.cancelled_at.is_(None))
            .values(cancelled_at=at)
        )
    session.flush()
    return row


def mark_outbox_started(session: Session, intent_ids: list[str], at: datetime) -> None:
    """Mark these intents' outbox rows started (a row already marked keeps its time)."""
    session.execute(_MARK_OUTBOX_STARTED, {"intents": intent_ids, "at": at})


def purge_horizon(now: datetime, days: int) -> datetime:
    """When data recorded `now` is purged: `days` later."""
    return now + timedelta(days=days)
