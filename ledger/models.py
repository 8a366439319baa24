"""Ledger tables (SQLAlchemy 2). Changed only through Alembic migrations.

Unique constraints carry the invariants: one intent per business key, one attempt per
token, one observation per dedupe key. Readable PII lives only in `*_ct` columns
(AES-GCM), each with a purge-after time; lookups use `*_hmac`.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from domain import channels
from domain.channels import DestinationKind

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def new_id() -> str:
    """A new random id for a row (a UUID4 as text)."""
    return str(uuid.uuid4())


class Base(DeclarativeBase):
    """The declarative base: constraint names by convention, every datetime with its zone."""

    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {datetime: DateTime(timezone=True), dict[str, Any]: JSON}


class Intent(Base):
    """One notification intent: a business key in its namespace, plan, encrypted contacts."""

    __tablename__ = "intent"
    __table_args__ = (
        UniqueConstraint("namespace", "business_key", name="uq_intent_namespace_business_key"),
        # The console's list: newest first, keyset paging, a business-key prefix, a category.
        Index("ix_intent_created_id", text("created_at DESC"), text("id DESC")),
        Index(
            "ix_intent_business_key_prefix",
            "business_key",
            postgresql_ops={"business_key": "text_pattern_ops"},
        ),
        Index("ix_intent_category_created", "category", "created_at"),
        Index(
            "ix_intent_event_type_created", "event_type", text("created_at DESC"), text("id DESC")
        ),
        Index("ix_intent_region_created", "region", text("created_at DESC"), text("id DESC")),
        Index(
            "ix_intent_created_by_created",
            "created_by",
            text("created_at DESC"),
            text("id DESC"),
        ),
        Index(
            "ix_intent_awaiting_until",
            "awaiting_until",
            postgresql_where=text("awaiting IS NOT NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    business_key: Mapped[str] = mapped_column(String(200))
    namespace: Mapped[str] = mapped_column(String(80))
    """The key's owner (domain.keys): the recording principal's namespace, or the starter
    client's. The workflow id and tokens are made from both (`notification:<ns>~<key>`),
    except on intents recorded before namespaces, which keep their bare-key ones."""
    event_type: Mapped[str] = mapped_column(String(80), index=True)
    category: Mapped[str] = mapped_column(String(20))
    region: Mapped[str] = mapped_column(String(10), index=True)
    country: Mapped[str] = mapped_column(String(2))
    timezone: Mapped[str] = mapped_column(String(64))
    recipient_ref: Mapped[str] = mapped_column(String(120), index=True)
    channel_plan: Mapped[dict[str, Any]] = mapped_column(JSON)
    """{"mode": "fallback"|"all", "channels": ["sms", "email"]}"""
    template_key: Mapped[str] = mapped_column(String(80))
    template_version: Mapped[int | None] = mapped_column(Integer)
    """The version the request named, or null: intake then pins the active one
    (`template_pins`)."""
    template_pins: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """Per channel of the plan, the template locale and version chosen at intake
    (`{"sms": {"locale": "en", "version": 2}}`, migration 0020): every attempt of the
    intent, first, fallback or resend, renders with it, whatever is active later. Null on
    intents recorded before, which render with the version active at each attempt."""
    locale: Mapped[str] = mapped_column(String(16))
    payload_sha256: Mapped[str] = mapped_column(String(64))
    """Hash of the normalized request: the same key with another payload is a conflict."""
    # One column pair per destination kind (DESTINATION_COLUMNS), not per channel: the
    # names predate the registry (`sms_` holds the phone number any phone channel uses).
    # docs/channels.md says why they stay.
    sms_destination_ct: Mapped[str | None] = mapped_column(Text)
    sms_destination_hmac: Mapped[str | None] = mapped_column(String(64), index=True)
    email_destination_ct: Mapped[str | None] = mapped_column(Text)
    email_destination_hmac: Mapped[str | None] = mapped_column(String(64), index=True)
    email_search_hmac: Mapped[str | None] = mapped_column(String(64), index=True)
    """The console search's lookup of the address in any letter case (search only: consent
    and suppressions match `email_destination_hmac`)."""
    variables_ct: Mapped[str | None] = mapped_column(Text)
    artifact_sha256: Mapped[str | None] = mapped_column(String(64))
    send_at: Mapped[datetime | None]
    expires_at: Mapped[datetime | None]
    workflow_id: Mapped[str] = mapped_column(String(240))
    legal_hold: Mapped[bool] = mapped_column(Boolean, default=False)
    awaiting: Mapped[str | None] = mapped_column(String(20))
    """What the intent's workflow waits for from an operator: `settlement` (an unknown
    attempt) or `resend` (an approve-resend after a retryable failure); null otherwise."""
    awaiting_until: Mapped[datetime | None]
    """When that window closes (the workflow records both, so pages need not ask Temporal)."""
    purge_after: Mapped[datetime | None]
    pii_purged_at: Mapped[datetime | None]
    cancelled_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    created_by: Mapped[str | None] = mapped_column(String(120))
    """The principal that recorded it through the API (null: recorded in-process through
    `starter`, or before principals were recorded). An app principal reads only its own."""


DESTINATION_COLUMNS: dict[DestinationKind, tuple[str, str]] = {
    DestinationKind.PHONE: ("sms_destination_ct", "sms_destination_hmac"),
    DestinationKind.EMAIL: ("email_destination_ct", "email_destination_hmac"),
}
"""The intent's (ciphertext, HMAC) columns for each kind of destination."""


def intent_destination(intent: Any, channel: str) -> tuple[str | None, str | None]:
    """An intent's (ciphertext, HMAC) of the destination `channel` sends to.

    From an :class:`Intent` or a row with its columns; raises channels.UnknownChannel.
    """
    ct, hmac = DESTINATION_COLUMNS[channels.get(channel).destination]
    return getattr(intent, ct), getattr(intent, hmac)


class Outbox(Base):
    """An intent whose workflow the relay still has to start."""

    __tablename__ = "outbox"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    intent_id: Mapped[str] = mapped_column(ForeignKey("intent.id"), unique=True)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    started_at: Mapped[datetime | None]
    tries: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)


class Attempt(Base):
    """One try on one channel, with its idempotency token, prepared before anything is sent."""

    __tablename__ = "attempt"
    __table_args__ = (
        UniqueConstraint("token", name="uq_attempt_token"),
        UniqueConstraint("intent_id", "channel", "number", name="uq_attempt_intent_channel_number"),
        # The console's state filter: intents with an attempt in a given state.
        Index("ix_attempt_state_intent", "state", "intent_id"),
        # The console's overview: attempts prepared in the last hour / day.
        Index("ix_attempt_prepared_at", "prepared_at"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    intent_id: Mapped[str] = mapped_column(ForeignKey("intent.id"), index=True)
    channel: Mapped[str] = mapped_column(String(10))
    number: Mapped[int] = mapped_column(Integer)
    token: Mapped[str] = mapped_column(String(240))
    state: Mapped[str] = mapped_column(String(20))
    remote_id: Mapped[str | None] = mapped_column(String(80), index=True)
    decision_id: Mapped[int] = mapped_column(ForeignKey("policy_decision.id"))
    destination_ct: Mapped[str | None] = mapped_column(Text)
    destination_hmac: Mapped[str] = mapped_column(String(64), index=True)
    body_ct: Mapped[str | None] = mapped_column(Text)
    subject_ct: Mapped[str | None] = mapped_column(Text)
    content_sha256: Mapped[str] = mapped_column(String(64))
    template_key: Mapped[str] = mapped_column(String(80))
    template_version: Mapped[int] = mapped_column(Integer)
    sender: Mapped[str] = mapped_column(String(200), default="")
    """The policy's sender alias (e.g. `herald-us-10dlc`)."""
    sender_address: Mapped[str | None] = mapped_column(String(200))
    """The real sender the alias resolved to (an E.164 number, an alphanumeric id, a
    Messaging Service SID, or an email From); null on attempts prepared before it was kept."""
    provider: Mapped[str | None] = mapped_column(String(40))
    """The provider alias that took the attempt (the policy's first for its channel and
    region, domain.providers); null on attempts prepared before providers were data."""
    segments: Mapped[int | None] = mapped_column(Integer)
    error_code: Mapped[str | None] = mapped_column(String(20))
    message_id: Mapped[str | None] = mapped_column(String(200), index=True)
    prepared_at: Mapped[datetime] = mapped_column(server_default=func.now())
    send_started_at: Mapped[datetime | None]
    """Set (committed) just before the provider call: a retry that finds it set with no
    remote id knows a request may have left, and reconciles instead of sending again."""
    submitted_at: Mapped[datetime | None]
    last_status_at: Mapped[datetime | None]
    terminal_at: Mapped[datetime | None]
    purge_after: Mapped[datetime | None]
    settled_rule: Mapped[str | None] = mapped_column(String(60))
    """The settlement rule of the operator's settlement that stands on this attempt (its
    state came from it); cleared when a later provider terminal replaces it."""
    settled_resend_allowed: Mapped[bool | None]
    """Whether that rule lets an approve-resend follow."""


class Observation(Base):
    """Append-only: every fact anyone told us about an attempt, applied or not."""

    __tablename__ = "observation"
    __table_args__ = (UniqueConstraint("dedupe_key", name="uq_observation_dedupe"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    attempt_id: Mapped[int | None] = mapped_column(ForeignKey("attempt.id"), index=True)
    """Null for orphan evidence (a receipt for a message id nobody knows yet)."""
    remote_id: Mapped[str | None] = mapped_column(String(80), index=True)
    source: Mapped[str] = mapped_column(String(20))
    """send, poll, webhook, reconcile, horizon or operator."""
    raw_status: Mapped[str] = mapped_column(String(40))
    normalized_status: Mapped[str | None] = mapped_column(String(20))
    provider_code: Mapped[str | None] = mapped_column(String(20))
    provider_at: Mapped[datetime | None]
    observed_at: Mapped[datetime]
    dedupe_key: Mapped[str] = mapped_column(String(300))
    verdict: Mapped[str | None] = mapped_column(String(20))
    applied: Mapped[bool] = mapped_column(Boolean, default=False)
    conflict: Mapped[bool] = mapped_column(Boolean, default=False)
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class PolicyVersion(Base):
    """A policy version: an immutable document, at most one active."""

    __tablename__ = "policy_version"

    version: Mapped[str] = mapped_column(String(60), primary_key=True)
    name: Mapped[str] = mapped_column(String(60))
    document: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    owner: Mapped[str] = mapped_column(String(120))
    effective_from: Mapped[datetime]
    active: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    author: Mapped[str | None] = mapped_column(String(120))
    """The principal that recorded it (an import); null: Herald itself (the packaged
    versions, a policy file `herald dev` was given) or recorded before migration 0020."""
    approved_by: Mapped[str | None] = mapped_column(String(80))
    """Who approved it (domain.review): a principal other than its author, or
    `herald:system` for packaged versions and those recorded before review existed."""
    approved_at: Mapped[datetime | None]
    refused_by: Mapped[str | None] = mapped_column(String(80))
    """Who refused it; a refused version never becomes active."""
    refused_at: Mapped[datetime | None]


class PolicyDecision(Base):
    """A policy decision with the version and the inputs it was made on."""

    __tablename__ = "policy_decision"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    intent_id: Mapped[str] = mapped_column(ForeignKey("intent.id"), index=True)
    channel: Mapped[str] = mapped_column(String(10))
    policy_version: Mapped[str] = mapped_column(ForeignKey("policy_version.version"))
    outcome: Mapped[str] = mapped_column(String(10))
    rule: Mapped[str] = mapped_column(String(60))
    reason: Mapped[str] = mapped_column(Text)
    inputs: Mapped[dict[str, Any]] = mapped_column(JSON)
    next_eligible_at: Mapped[datetime | None]
    decided_at: Mapped[datetime]


class Consent(Base):
    """Consent evidence for a recipient, a purpose and a channel (or `*`)."""

    __tablename__ = "consent"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    recipient_ref: Mapped[str] = mapped_column(String(120), index=True)
    channel: Mapped[str] = mapped_column(String(10))
    purpose: Mapped[str] = mapped_column(String(40))
    source: Mapped[str] = mapped_column(String(120))
    granted_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]
    """Set when a revoke ended this grant; the row stays as history."""
    revoked_source: Mapped[str | None] = mapped_column(String(120))
    """Who or what revoked it (`cli`, `api`, the app's own source word)."""
    evidence: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class Suppression(Base):
    """A destination suppressed on a channel (or `*`), with the reason and the source."""

    __tablename__ = "suppression"
    __table_args__ = (Index("ix_suppression_lookup", "destination_hmac", "channel"),)

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    destination_hmac: Mapped[str] = mapped_column(String(64))
    channel: Mapped[str] = mapped_column(String(10))
    reason: Mapped[str] = mapped_column(String(60))
    source: Mapped[str] = mapped_column(String(60))
    at: Mapped[datetime]
    lifted_at: Mapped[datetime | None]
    lifted_source: Mapped[str | None] = mapped_column(String(60))
    """Who lifted it (`keyword:START`, `api`, `cli`); null while active."""
    category: Mapped[str | None] = mapped_column(String(20))
    """The message category it holds for (a complaint, an unsubscribe); null: every one."""
    evidence: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """What caused it, free of contact data (an email event: its id, word, reason, the
    attempt token)."""


class TemplateVersionRow(Base):
    """One version of a template for a channel and a locale."""

    __tablename__ = "template_version"
    __table_args__ = (
        UniqueConstraint(
            "key", "channel", "locale", "version", name="uq_template_version_identity"
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(80))
    channel: Mapped[str] = mapped_column(String(10))
    locale: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(Integer)
    subject: Mapped[str | None] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    active: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    variables_schema: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """The JSON Schema of the variables it declares; None: recorded before declarations."""
    author: Mapped[str | None] = mapped_column(String(120))
    """The principal that recorded it (an import); null: Herald itself (the packaged
    versions, a policy file `herald dev` was given) or recorded before migration 0020."""
    approved_by: Mapped[str | None] = mapped_column(String(80))
    """Who approved it (domain.review): a principal other than its author, or
    `herald:system` for packaged versions and those recorded before review existed."""
    approved_at: Mapped[datetime | None]
    refused_by: Mapped[str | None] = mapped_column(String(80))
    """Who refused it; a refused version never becomes active."""
    refused_at: Mapped[datetime | None]


class Artifact(Base):
    """An attachment registered by its SHA-256, verified before it is sent."""

    __tablename__ = "artifact"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    media_type: Mapped[str] = mapped_column(String(120))
    filename: Mapped[str] = mapped_column(String(200))
    location: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())


class ArtifactContent(Base):
    """An artifact's bytes, for HERALD_ARTIFACT_STORE=postgres (ledger/artifacts.py).

    In the ledger, every worker and API process reaches them.
    """

    __tablename__ = "artifact_content"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    content: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())


class OperatorAction(Base):
    """An operator's action on an intent (cancel, approve-resend, settle, ...)."""

    __tablename__ = "operator_action"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    intent_id: Mapped[str] = mapped_column(ForeignKey("intent.id"), index=True)
    action: Mapped[str] = mapped_column(String(30))
    operator: Mapped[str] = mapped_column(String(120))
    """The authenticated principal's name (never a name taken from a request body)."""
    operator_role: Mapped[str | None] = mapped_column(String(20))
    """Its role when it acted; null on actions recorded before principals existed."""
    reason: Mapped[str] = mapped_column(Text)
    outcome: Mapped[str] = mapped_column(String(20))
    """accepted or refused."""
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    at: Mapped[datetime]


class ReviewItem(Base):
    """Something the reconciler found for a person to review, filed once per subject."""

    __tablename__ = "review_item"
    __table_args__ = (
        UniqueConstraint("kind", "subject", name="uq_review_item_kind_subject"),
        Index("ix_review_item_open", "kind", postgresql_where=text("resolved_at IS NULL")),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(40))
    subject: Mapped[str] = mapped_column(String(240))
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    found_at: Mapped[datetime]
    resolved_at: Mapped[datetime | None]
    resolved_by: Mapped[str | None] = mapped_column(String(120))
    """The signed-in principal who resolved it (the console)."""
    intent_id: Mapped[str | None] = mapped_column(String(36), index=True)
    """The intent it concerns (also in `detail`), for the intent page's list of its items;
    none for an item about no intent (an orphan observation)."""
    event_type: Mapped[str | None] = mapped_column(String(80))
    """The intent's event type, for the set's exposure (also in `detail`)."""
    category: Mapped[str | None] = mapped_column(String(20))
    resolution_note: Mapped[str | None] = mapped_column(Text)


class ConsoleSession(Base):
    """A signed-in console session. The cookie holds a random id; only its hash is kept."""

    __tablename__ = "console_session"

    id_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    principal: Mapped[str] = mapped_column(String(120))
    role: Mapped[str] = mapped_column(String(20))
    csrf_token: Mapped[str] = mapped_column(String(64))
    """Sent back in a hidden field of every form; a POST without it is refused."""
    credential_sha256: Mapped[str] = mapped_column(String(64))
    """SHA-256 of the token signed in with: the session lives only while that token is the
    principal's (a rotate ends it) or, for break-glass, HERALD_OPERATOR_TOKEN's."""
    created_at: Mapped[datetime]
    last_seen_at: Mapped[datetime]
    """Refreshed on each request; past the idle limit the session is over."""
    ended_at: Mapped[datetime | None]


class SignInCounter(Base):
    """Refused console sign-ins for one name or one client address.

    Counted by domain.sign_in_throttle's rule, kept here so that every API process counts
    the same refusals.
    """

    __tablename__ = "sign_in_counter"

    kind: Mapped[str] = mapped_column(String(10), primary_key=True)
    """`name` or `address`."""
    key: Mapped[str] = mapped_column(String(120), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    last_failure_at: Mapped[datetime | None]
    blocks: Mapped[int] = mapped_column(Integer, default=0)
    blocked_until: Mapped[datetime | None]


class InboundKeyword(Base):
    """An inbound STOP or START, once per provider message (its id).

    With the provider's time where it gives one: a replay changes nothing, and a keyword
    older than the destination's latest is kept but not applied.
    """

    __tablename__ = "inbound_keyword"

    provider: Mapped[str] = mapped_column(String(20), primary_key=True)
    provider_id: Mapped[str] = mapped_column(String(120), primary_key=True)
    """Twilio's MessageSid, Telnyx's event id."""
    destination_hmac: Mapped[str] = mapped_column(String(64), index=True)
    kind: Mapped[str] = mapped_column(String(10))
    """`opt_out` or `opt_in` (domain.keywords)."""
    word: Mapped[str] = mapped_column(String(20))
    provider_at: Mapped[datetime | None]
    received_at: Mapped[datetime]
    applied: Mapped[bool]


class UsedSignInForm(Base):
    """A sign-in form's CSRF token once it has been posted: each is good for one use."""

    __tablename__ = "used_sign_in_form"

    token_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    used_at: Mapped[datetime] = mapped_column(index=True)


class IdempotencyRecord(Base):
    """Responses of POST /v1/intents by Idempotency-Key (IETF draft semantics)."""

    __tablename__ = "idempotency_record"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    request_sha256: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int | None] = mapped_column(Integer)
    response: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())


class PrincipalRecord(Base):
    """A person or an app with a credential.

    The token itself is stored nowhere: only its
    SHA-256, which a request's token is looked up by.
    """

    __tablename__ = "principal"
    __table_args__ = (
        UniqueConstraint("name", name="uq_principal_name"),
        UniqueConstraint("token_sha256", name="uq_principal_token_sha256"),
        UniqueConstraint("namespace", name="uq_principal_namespace"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(80))
    role: Mapped[str] = mapped_column(String(20))
    namespace: Mapped[str] = mapped_column(String(80))
    """The namespace of the business keys it records (default its name); its own, for
    ever, like the name (domain.keys)."""
    token_sha256: Mapped[str] = mapped_column(String(64))
    created_by: Mapped[str] = mapped_column(String(80))
    created_at: Mapped[datetime]
    last_used_at: Mapped[datetime | None]
    """Written at most once a minute (ledger.principals.LAST_USED_RESOLUTION)."""
    rotated_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    """Set by a revoke: the token is refused from the next request on; the row stays."""


class AuditEvent(Base):
    """An append-only audit row of an action outside an intent.

    Append-only: who did what outside an intent's own operator actions (principals
    added, revoked, rotated; consent and suppression changes), with their role.
    """

    __tablename__ = "audit_event"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    at: Mapped[datetime]
    actor: Mapped[str] = mapped_column(String(80), index=True)
    actor_role: Mapped[str] = mapped_column(String(20))
    action: Mapped[str] = mapped_column(String(40))
    """principal.added, principal.revoked, principal.rotated, consent.recorded, ..."""
    subject: Mapped[str] = mapped_column(String(240))
    """What it acted on: a principal's name, a consent or suppression id."""
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class ProviderCircuit(Base):
    """One provider's circuit breaker (domain.circuit).

    Shared by every worker and the console; changed only under a row lock
    (ledger.circuits).
    """

    __tablename__ = "provider_circuit"

    provider: Mapped[str] = mapped_column(String(40), primary_key=True)
    """The provider alias from settings (`twilio`, `telnyx`)."""
    state: Mapped[str] = mapped_column(String(12))
    """closed, open or half_open."""
    failures: Mapped[int] = mapped_column(Integer)
    """Consecutive failures in the current window."""
    first_failure_at: Mapped[datetime | None]
    opened_at: Mapped[datetime | None]
    probe_at: Mapped[datetime | None]
    """When the half-open probe was let through."""
    updated_at: Mapped[datetime]


class ArchivedIntent(Base):
    """The tombstone of an archived intent: its export, the export's hash, and the chain.

    Archiving (ledger/archive.py) moves a closed intent's rows out of the hot tables into
    `document` (canonical JSON, no ciphertext) in the same transaction that deletes them.
    `chain_sha256` links each tombstone to the one before it (by `id`), so a tombstone
    removed or a document changed shows when the chain is verified (`herald archive
    verify`). The business key stays unique here as it was in `intent`.
    """

    __tablename__ = "archived_intent"
    __table_args__ = (
        UniqueConstraint("intent_id", name="uq_archived_intent_intent_id"),
        UniqueConstraint(
            "namespace", "business_key", name="uq_archived_intent_namespace_business_key"
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    """The position in the chain."""
    intent_id: Mapped[str] = mapped_column(String(36))
    business_key: Mapped[str] = mapped_column(String(200))
    namespace: Mapped[str] = mapped_column(String(80))
    """The key's namespace: the key stays taken in it."""
    workflow_id: Mapped[str] = mapped_column(String(240))
    """The intent's workflow id, so the reconciler knows its workflow for a workflow of its."""
    recorded_at: Mapped[datetime]
    """When the intent was recorded (its `created_at`)."""
    last_activity_at: Mapped[datetime]
    """The latest time any of its rows names: what the retention counted from."""
    archived_at: Mapped[datetime]
    policy_version: Mapped[str] = mapped_column(String(60))
    """The policy whose `[retention] evidence_days` made it due."""
    evidence_days: Mapped[int] = mapped_column(Integer)
    row_counts: Mapped[dict[str, Any]] = mapped_column(JSON)
    """Rows moved, by table."""
    document: Mapped[str | None] = mapped_column(Text)
    """The canonical JSON export (`archive.canonical_json`); null once moved to cold
    storage, when the hash below is what verifies the copy there."""
    document_sha256: Mapped[str] = mapped_column(String(64))
    chain_sha256: Mapped[str] = mapped_column(String(64))
    """SHA-256 of the previous tombstone's chain hash and this one's identity and
    document hash (`archive.chain_link`)."""


class DataKeyRecord(Base):
    """A data key id the ledger has met (ledger.keys).

    A process whose ring lacks one still in use, or holds a different key under its id,
    is refused at start.
    """

    __tablename__ = "data_key"

    kid: Mapped[str] = mapped_column(String(40), primary_key=True)
    check_value: Mapped[str | None] = mapped_column(String(64))
    """HMAC-SHA256 of ledger.crypto.CHECK_LABEL under the key; null for a kid the migration
    found in use in the ledger's ciphertexts, until a ring holding it starts."""
    created_at: Mapped[datetime]
    retired_at: Mapped[datetime | None]
    """Set by `herald keys retire` once nothing in the ledger depends on the key."""


class LedgerSecret(Base):
    """A key the ledger keeps encrypted under its data keys.

    The lookup HMAC key and the action-proof key (ledger.crypto.DerivedKeys), which
    outlive every data key.
    """

    __tablename__ = "ledger_secret"

    name: Mapped[str] = mapped_column(String(40), primary_key=True)
    """`lookup` or `action_proof`."""
    value_ct: Mapped[str] = mapped_column(Text)
    """The key's base64, encrypted under the ring's primary (context `ledger-secret:<name>`)."""
    created_at: Mapped[datetime]
