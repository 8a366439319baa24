"""Dataclasses that cross the workflow boundary: inputs, outputs, signals, updates, queries.

Standard library only, so the workflow sandbox passes them through. They carry ids and
facts, never a phone number, an email address or a message body. New fields get
defaults, so histories recorded by older code still replay.
"""

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from domain.channels import SMS


class ErrorType(StrEnum):
    """The `type` of every `ApplicationError` an activity raises, which the workflow's retry
    policies and its handling of a failed submit match on. One spelling on both sides: a
    typo would otherwise make a permanent error retryable."""

    PERMANENT_PROVIDER_ERROR = "PermanentProviderError"
    """The provider refused for good (invalid number, opt-out, mailbox unavailable)."""
    INVALID_DESTINATION = "InvalidDestination"
    """The recipient has no usable destination on this channel."""
    TEMPLATE_ERROR = "TemplateError"
    """The template could not be rendered with the intent's variables."""
    ARTIFACT_MISMATCH = "ArtifactMismatch"
    """An attachment's content no longer matches the hash it was recorded with."""
    NOT_FOUND = "NotFound"
    """The intent or attempt is not in the ledger (or its contact data was purged)."""
    TRANSIENT_PROVIDER_ERROR = "TransientProviderError"
    """Nothing was processed (429, 5xx, no connection): retried, after Retry-After."""
    AMBIGUOUS_SUBMISSION = "AmbiguousSubmission"
    """The request may have reached the provider: the retry reconciles before sending."""
    UNKNOWN_CHANNEL = "UnknownChannel"
    """A channel no entry of domain.channels carries: a bug, refused where it is first met."""
    PROVIDER_NOT_CONFIGURED = "ProviderNotConfigured"
    """The attempt's provider alias has no settings on this worker: retried (a worker that
    has them takes it), never sent through another account."""
    RECONCILE_PENDING = "ReconcilePending"
    """An ambiguous submission is not visible at the provider yet: an expected retry,
    raised as benign so it does not read as a failure in the Web UI."""
    DATA_KEY_UNREADABLE = "DataKeyUnreadable"
    """The worker's data key ring cannot read the intent's contact data (a key id it lacks,
    a ciphertext that does not open): raised non-retryable, after a review item is filed
    (activities.key_errors). Not in PERMANENT_ERRORS: the flag on the error itself stops
    the retries, so the workflow's commands are unchanged."""
    PROVIDER_REFUSED = "ProviderRefused"
    """A definitive refusal for the provider's own reason (credentials, sender, a refused
    connection, an open circuit), raised only when the workflow fails over: the next
    provider (or a deferral of them all) takes it, never this provider again."""


PERMANENT_ERRORS: list[str] = [
    ErrorType.PERMANENT_PROVIDER_ERROR.value,
    ErrorType.INVALID_DESTINATION.value,
    ErrorType.TEMPLATE_ERROR.value,
    ErrorType.ARTIFACT_MISMATCH.value,
    ErrorType.NOT_FOUND.value,
    ErrorType.PROVIDER_REFUSED.value,
]
"""The error types no retry can cure (the workflow's `non_retryable_error_types`)."""


@dataclass
class SettlementRuleFacts:
    """One settlement rule of the active policy, as the workflow's validator judges by it."""

    name: str
    outcome: str
    """delivered, not_delivered or undeliverable (domain.settlement.SettlementOutcome)."""
    evidence: str
    resend_allowed: bool


@dataclass
class SettlementStanding:
    rule: str
    resend_allowed: bool


@dataclass
class ChannelResult:
    channel: str
    state: str
    """An AttemptState value, or `denied`, `expired`, `cancelled`, `skipped`, `deferred`."""
    reason: str = ""
    attempt_token: str | None = None
    remote_id: str | None = None
    attempts: int = 0
    policy_version: str = ""
    rule: str = ""
    error_code: str | None = None
    """The provider's code when the attempt failed (decides whether a resend may help)."""


@dataclass
class CarriedState:
    """The part of a notification run's state that outlives the run: the workflow holds
    its state in one of these (workflows/notification/state.py) and continue-as-new
    carries it whole. Recorded histories hold it as JSON: keep the field names, and give
    a new field a default."""

    results: list[ChannelResult] = field(default_factory=list)
    """Each channel's latest result, in the order the channels first ended."""
    attempt_states: dict[str, str] = field(default_factory=dict)
    error_codes: dict[str, str] = field(default_factory=dict)
    resend_until: datetime | None = None
    """When the resend window closes (None: none open yet, or a new attempt reopens it)."""
    settle_until: datetime | None = None
    """When the settlement window closes (None: the run that carried it had none open)."""
    settlements: dict[str, SettlementStanding] = field(default_factory=dict)
    """The operator's settlements standing, by attempt token."""
    settlement_rules: list[SettlementRuleFacts] = field(default_factory=list)
    lookups: dict[str, datetime] = field(default_factory=dict)
    """When each attempt was last looked up at the provider through this workflow."""


@dataclass
class NotificationInput:
    intent_id: str
    """The ledger's id; everything else is loaded by an activity."""
    carried: CarriedState | None = None
    """Set only when the workflow continued as new (ids and states, no PII)."""


@dataclass
class LoadIntentInput:
    intent_id: str


@dataclass
class IntentFacts:
    intent_id: str
    business_key: str
    event_type: str
    category: str
    region: str
    channels: list[str]
    mode: str
    """`fallback` or `all` (see domain.requests.PlanMode)."""
    send_at: datetime | None = None
    expires_at: datetime | None = None
    cancelled: bool = False
    email_after_seconds: float = 600.0
    email_on_permanent_failure: bool = True
    fallback_when_unresolved: bool = True
    """Whether a channel that ended `unknown` is followed by the next one: false when the
    policy has no fallback window (`email_after_seconds = false`), since the message may
    have reached the person. Results recorded before the field existed decode as true,
    the rule those runs followed."""
    poll_initial_seconds: float = 5.0
    poll_max_seconds: float = 120.0
    poll_horizon_seconds: float = 1800.0
    email_events_horizon_seconds: float = 3600.0
    """How long an email accepted by a provider that reports events waits for a final one
    before `sent` is recorded (the policy's `email_events_horizon_seconds`)."""
    resend_window_seconds: float = 3600.0
    submit_window_seconds: float = 600.0
    """The transport retry window: how long submit keeps retrying transient errors."""
    continue_as_new_after_events: int = 0
    """0: continue as new only when the server suggests it; > 0 also past this length."""
    settlement_window_seconds: float = 0.0
    """How long after an unknown verdict the workflow waits for a settlement (the active
    policy's [settlement] window); 0 in results recorded before settlements existed."""


@dataclass
class AuthorizeInput:
    intent_id: str
    channel: str
    attempt_number: int
    provider: str | None = None
    """A failover try: the alias (one the policy routes the channel to) this attempt
    goes to. None: the first of the policy's list."""
    failover_reason: str = ""
    """A failover try: why the provider before gave way (recorded with the decision)."""


@dataclass
class AuthorizeResult:
    outcome: str
    """allow, defer or deny (domain.policy.Outcome)."""
    rule: str
    reason: str
    policy_version: str
    decision_id: int
    next_eligible_at: datetime | None = None
    attempt_token: str | None = None
    providers: list[str] = field(default_factory=list)
    """The provider aliases the policy routes this channel and region to, in order."""
    failover: bool = False
    """Whether the policy lets another provider take over for this category."""
    provider: str | None = None
    """The alias the prepared attempt goes to."""


@dataclass
class SubmitInput:
    attempt_token: str
    failover: bool = False
    """Another provider may take over: a definitive provider-side refusal (its error
    body, a refused connection, an open circuit) is then returned at once as
    ``ProviderRefused`` instead of being retried with this provider."""


@dataclass
class SubmitOutcome:
    state: str
    """A domain AttemptState value after the submission was recorded."""
    remote_id: str | None = None
    error_code: str | None = None
    reason: str = ""
    reconciled: bool = False
    """True when an ambiguous submission was looked up at the provider."""
    lookup: str | None = None
    """After an ambiguous submission: what the lookup found (domain.failover.Lookup:
    found, not_found, unavailable); None when there was nothing to look up."""
    answer: str | None = None
    """The failover class of the provider's answer (domain.failover.Answer), when the
    workflow needs it to choose the next move; None for answers older code knew."""
    provider: str | None = None
    """The provider alias the attempt went to."""
    retry_at: datetime | None = None
    """For a refusal by an open circuit: when its provider lets a probe through."""


@dataclass
class PollInput:
    attempt_token: str


@dataclass
class PollOutcome:
    state: str
    raw_status: str = ""
    error_code: str | None = None


@dataclass
class VerdictInput:
    attempt_token: str
    state: str
    source: str
    reason: str = ""
    answer_state: bool = False
    """Answer the attempt's state in the ledger afterwards instead of the verdict: a
    receipt the workflow was never signalled about (the ingress could not reach Temporal)
    is then still the workflow's outcome (the email events horizon asks for it)."""


@dataclass
class OperatorActionInput:
    intent_id: str
    action: str
    operator: str
    reason: str
    outcome: str
    detail: dict[str, str] = field(default_factory=dict)
    requested_in_temporal: bool = False
    """A cancel requested through Temporal (Web UI, `temporal workflow cancel`): the ledger
    activity records the request's identity, read from the workflow's history."""
    operator_role: str = ""
    """The authenticated principal's role; empty in histories recorded before roles."""
    proof: str = ""
    """The surface's MAC over the request (domain.proof); without a valid one the action
    is recorded as an unauthenticated Temporal caller, the operator kept as claimed."""
    subject: str = ""
    """What the proof covers beyond the intent (domain.proof.ActingClaim.subject)."""
    requested_at: str = ""
    """When the workflow took the request (ISO 8601, its clock): the action's time in the
    ledger, so it reads before what it caused (a lookup's answer, a resend's decision).
    Empty in histories recorded before: the time it is recorded, as then."""


@dataclass
class ReceiptSignal:
    """Sent by the ingress after it recorded a receipt in the ledger."""

    attempt_token: str
    state: str
    error_code: str | None = None


@dataclass
class CancelRequest:
    operator: str = "temporal-ui"
    reason: str = ""
    operator_role: str = ""
    """The role of the principal who asked (the API and CLI set it; a signal sent from the
    Temporal UI leaves it empty)."""
    proof: str = ""
    """Herald's surfaces prove the principal (domain.proof); a caller through Temporal
    cannot, and is recorded as unauthenticated with the operator it claimed."""


@dataclass
class CancelResult:
    accepted: bool
    closed: list[str] = field(default_factory=list)
    """What the cancel closed: the scheduled send, a deferral, polls, later channels."""
    in_flight: list[str] = field(default_factory=list)
    """Attempt tokens submitted and not yet settled: not recalled, only no longer followed."""
    message: str = ""
    delivered: list[str] = field(default_factory=list)
    """Attempt tokens already delivered when the cancel came (nothing to recall)."""


@dataclass
class ResendRequest:
    channel: str = SMS.name
    operator: str = "temporal-ui"
    reason: str = ""
    operator_role: str = ""
    proof: str = ""


@dataclass
class SettleRequest:
    """`settle`: a person's decision on the channel's unknown attempt under a named rule."""

    channel: str = "sms"
    rule: str = ""
    reason: str = ""
    reference: str = ""
    """A carrier ticket, or how the recipient gave their word (the rule's evidence)."""
    operator: str = "temporal-ui"
    operator_role: str = ""
    proof: str = ""


@dataclass
class SettleResult:
    accepted: bool
    message: str
    state: str = ""
    """The attempt's state after the settlement."""
    rule: str = ""
    resend_allowed: bool = False
    policy_version: str = ""
    attempt_token: str = ""


@dataclass
class SettlementInput:
    intent_id: str
    attempt_token: str
    rule: str
    reason: str
    reference: str
    operator: str
    operator_role: str
    proof: str
    window_until: datetime | None


@dataclass
class SettlementRecorded:
    """What the ledger made of a settlement: refused (with why) or its new state."""

    refused: str = ""
    state: str = ""
    verdict: str = ""
    rule: str = ""
    resend_allowed: bool = False
    policy_version: str = ""
    operator: str = ""


@dataclass
class WaitingInput:
    intent_id: str
    awaiting: str | None
    """`settlement`, `resend`, or None when the workflow no longer waits for anyone."""
    until: datetime | None = None
    attempt_tokens: list[str] = field(default_factory=list)
    """The unknown attempts a settlement window is open for (review items are filed)."""
    expired_unsettled: list[str] = field(default_factory=list)
    """Attempts whose settlement window closed with nothing decided (recorded so)."""


@dataclass
class WaitingFacts:
    settlement_rules: list[SettlementRuleFacts] = field(default_factory=list)
    """The active policy's rules offered for these attempts' providers."""


@dataclass
class LookupRequest:
    channel: str = "sms"
    operator: str = "temporal-ui"
    operator_role: str = ""
    proof: str = ""


@dataclass
class LookupInput:
    attempt_token: str
    requested_by: str = ""


@dataclass
class LookupResult:
    found: bool
    raw_status: str = ""
    """What the provider holds (`not_found` when it holds nothing)."""
    state: str = ""
    """The attempt's state after the lookup was recorded (it may have settled it)."""
    provider_at: datetime | None = None
    observed_at: datetime | None = None
    message: str = ""


@dataclass
class ResendResult:
    accepted: bool
    message: str
    attempt_number: int | None = None


@dataclass
class NotificationResult:
    intent_id: str
    outcome: str
    """The derived intent state (domain.intents.IntentState)."""
    channels: list[ChannelResult] = field(default_factory=list)
    reason: str = ""


@dataclass
class Projection:
    """What the `projection` query returns: the workflow's current view, no PII."""

    intent_id: str
    phase: str
    cancelled: bool
    channels: list[ChannelResult]
    attempt_states: dict[str, str]
    awaiting: str = ""
    """`settlement` or `resend` when the workflow waits for an operator, else empty."""
    awaiting_until: datetime | None = None
    settlements: dict[str, SettlementStanding] = field(default_factory=dict)


# --- search attributes (set by workflows/notification/web_ui.py) -----------------------

STATE_ATTRIBUTE = "HeraldState"
"""The intent's coarse phase (pending, scheduled, sending, ...), kept current while it runs."""
SEARCH_ATTRIBUTES = {
    STATE_ATTRIBUTE: "Keyword",
    "HeraldChannel": "Keyword",
    "HeraldRegion": "Keyword",
    "HeraldEventType": "Keyword",
    "HeraldOutcome": "Keyword",
    "HeraldChannelsUsed": "KeywordList",
}
"""Every search attribute the notification workflow sets, with its Temporal type: what a
namespace must have registered (`herald dev` registers them; docs/operations.md)."""


# --- Worker Versioning (workflows/notification/, cli/deploy.py) ------------------------

MOVE_TO_CURRENT_BUILD = "move_to_current_build"
"""The signal (no argument) that asks a run waiting for an operator, pinned to a build that
is no longer the deployment's target, to continue as new on the current build, carrying
its state (`herald deploy move-waiting`; docs/operations.md, "Deploying a new build")."""


# --- maintenance jobs (workflows/maintenance.py) ---------------------------------------

MAINTENANCE_WORKFLOW = "MaintenanceWorkflow"
"""The maintenance workflow's type, which the schedules start (runtime.schedules)."""
RECONCILE = "reconcile"
PURGE = "purge"
ARCHIVE = "archive"
JOBS = (RECONCILE, PURGE, ARCHIVE)


@dataclass
class MaintenanceInput:
    job: str
    """`reconcile`, `purge` or `archive`."""


@dataclass
class MaintenanceResult:
    job: str
    rows_by_kind: dict[str, int] = field(default_factory=dict)
    """reconcile: rows found, by kind."""
    review_items_recorded: int = 0
    """reconcile: review items newly filed (each kind and subject is filed once)."""
    intents_purged: int = 0
    """purge: intents whose readable PII was removed."""
    attempts_purged: int = 0
    """purge: attempts whose readable PII was removed."""
    held: int = 0
    """purge: intents due but kept readable by a legal hold; archive: intents recorded
    before the retention's cutoff that a legal hold keeps."""
    batches: int = 0
    """purge: transactions used (PII batches, then idempotency-key batches); archive:
    transactions used."""
    idempotency_keys_expired: int = 0
    """purge: Idempotency-Key records past their retention, deleted."""
    intents_archived: int = 0
    """archive: closed intents past the evidence retention moved to the archive."""
