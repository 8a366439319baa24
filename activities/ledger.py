"""Ledger activities: load an intent, authorize + prepare an attempt, record verdicts and
operator actions. Each is one database transaction; the rules come from `domain`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import Row, Select, Table, bindparam, select
from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities import now_utc
from activities.contracts import (
    AuthorizeInput,
    AuthorizeResult,
    ErrorType,
    IntentFacts,
    LoadIntentInput,
    OperatorActionInput,
    SettlementInput,
    SettlementRecorded,
    SettlementRuleFacts,
    VerdictInput,
    WaitingFacts,
    WaitingInput,
)
from activities.key_errors import stopping_on_key_errors
from domain import channels, keys, policy, proof, settlement, templates
from domain.clocks import parse_iso_utc
from domain.senders import SenderBook
from domain.states import AttemptState
from ledger import metrics, observations, operator_actions, settlements
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.models import Attempt, Intent, PolicyDecision, PolicyVersion, intent_destination
from ledger.observations import ObservationFacts
from ledger.templates import active_templates
from ledger.transactions import Transactions


class PolicyCache:
    """Parsed policy documents by version: versions are immutable, so caching is safe."""

    def __init__(self) -> None:
        self._by_version: dict[str, policy.Policy] = {}

    def get(self, row: PolicyVersion) -> policy.Policy:
        if row.version not in self._by_version:
            self._by_version[row.version] = policy.load_policy(row.document)
        return self._by_version[row.version]

    def active(self, session: Session) -> tuple[str, policy.Policy]:
        """The active version and its parsed policy; the document is read only the first
        time a version is seen (every load_intent and authorize asks)."""
        version = repo.active_policy_version(session)
        if version not in self._by_version:
            self._by_version[version] = policy.load_policy(repo.policy_document(session, version))
        return version, self._by_version[version]


NO_WINDOW_SECONDS = 10**9
"""The SMS observation's fallback timer when the policy has no window (never fires)."""


def window_seconds(email_after_seconds: int | None) -> float:
    """The policy's fallback window as the workflow's timer (0 is a window: email at once)."""
    return float(NO_WINDOW_SECONDS if email_after_seconds is None else email_after_seconds)


_INTENTS = cast(Table, Intent.__table__)
_INTENT = _INTENTS.c
_LOADED_INTENT = select(
    _INTENT.id,
    _INTENT.business_key,
    _INTENT.event_type,
    _INTENT.category,
    _INTENT.region,
    _INTENT.channel_plan,
    _INTENT.send_at,
    _INTENT.expires_at,
    _INTENT.created_at,
    _INTENT.cancelled_at,
)
"""What load_intent reads of an intent (a plain row: no entity, no identity map)."""
_AUTHORIZED_INTENT = select(
    _INTENT.id,
    _INTENT.business_key,
    _INTENT.workflow_id,
    _INTENT.category,
    _INTENT.region,
    _INTENT.country,
    _INTENT.timezone,
    _INTENT.recipient_ref,
    _INTENT.channel_plan,
    _INTENT.template_key,
    _INTENT.template_version,
    _INTENT.template_pins,
    _INTENT.locale,
    _INTENT.variables_ct,
    _INTENT.sms_destination_ct,
    _INTENT.sms_destination_hmac,
    _INTENT.email_destination_ct,
    _INTENT.email_destination_hmac,
)
"""What authorize reads of an intent."""
_ATTEMPT = cast(Table, Attempt.__table__).c


_LOADED_INTENT = _LOADED_INTENT.where(_INTENT.id == bindparam("intent"))
_AUTHORIZED_INTENT = _AUTHORIZED_INTENT.where(_INTENT.id == bindparam("intent"))
_DECISION_OF_TOKEN = select(_ATTEMPT.decision_id).where(_ATTEMPT.token == bindparam("token"))


def _intent_row(session: Session, query: Select[Any], intent_id: str) -> Row[Any]:
    row = session.execute(query, {"intent": intent_id}).one_or_none()
    if row is None:
        raise ApplicationError(
            f"no intent {intent_id}", type=ErrorType.NOT_FOUND, non_retryable=True
        )
    return row


class LedgerActivities:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        cipher: FieldCipher,
        *,
        retention_days: int = 30,
        senders: SenderBook | None = None,
        default_providers: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        """`default_providers`: channel -> provider aliases where the policy names none
        (settings: HERALD_EMAIL_PROVIDER); else the registry's defaults."""
        self._default_providers = dict(default_providers or {})
        self._sessions = sessions
        self._tx = Transactions(sessions)
        self._cipher = cipher
        self._senders = senders or SenderBook.build()
        self._policies = PolicyCache()
        self._retention = timedelta(days=retention_days)

    @activity.defn(name="load_intent")
    async def load_intent(self, input: LoadIntentInput) -> IntentFacts:
        def work(session: Session) -> IntentFacts:
            intent = _intent_row(session, _LOADED_INTENT, input.intent_id)
            _, pol = self._policies.active(session)
            rule = policy.fallback_for(pol, intent.region, intent.category)
            expires_at = intent.expires_at or (
                intent.created_at + timedelta(seconds=rule.expiry_seconds)
            )
            return IntentFacts(
                intent_id=intent.id,
                business_key=intent.business_key,
                event_type=intent.event_type,
                category=intent.category,
                region=intent.region,
                channels=list(intent.channel_plan["channels"]),
                mode=intent.channel_plan["mode"],
                send_at=intent.send_at,
                expires_at=expires_at,
                cancelled=intent.cancelled_at is not None,
                email_after_seconds=window_seconds(rule.email_after_seconds),
                email_on_permanent_failure=rule.email_on_permanent_failure,
                fallback_when_unresolved=rule.email_after_seconds is not None,
                poll_initial_seconds=rule.poll_initial_seconds,
                poll_max_seconds=rule.poll_max_seconds,
                poll_horizon_seconds=float(rule.sms_poll_horizon_seconds),
                email_events_horizon_seconds=float(rule.email_events_horizon_seconds),
                resend_window_seconds=float(getattr(rule, "resend_window_seconds", 3600)),
                submit_window_seconds=float(getattr(rule, "submit_window_seconds", 600)),
                settlement_window_seconds=float(pol.settlement.window_seconds),
            )

        return await self._tx(work)

    @activity.defn(name="authorize")
    async def authorize(self, input: AuthorizeInput) -> AuthorizeResult:
        """Evaluate the active policy; if allowed, persist the attempt `prepared` in the same
        transaction, before anything is sent. A retry returns the attempt already prepared."""
        now = now_utc()

        # An unknown channel is refused before anything is read or recorded.
        try:
            channel = channels.get(input.channel)
        except channels.UnknownChannel as err:
            raise ApplicationError(
                str(err), type=ErrorType.UNKNOWN_CHANNEL, non_retryable=True
            ) from err

        def work(session: Session) -> AuthorizeResult:
            intent = _intent_row(session, _AUTHORIZED_INTENT, input.intent_id)
            # Made from the identity the workflow id was made from: an intent recorded
            # before key namespaces keeps its bare-key tokens (domain.keys).
            token = keys.attempt_token(
                keys.identity_of_workflow(intent.workflow_id), input.channel, input.attempt_number
            )
            existing = session.execute(_DECISION_OF_TOKEN, {"token": token}).scalar_one_or_none()
            if existing is not None:
                decision_row = session.get(PolicyDecision, existing)
                assert decision_row is not None
                recorded = decision_row.inputs or {}
                prepared = session.execute(
                    select(Attempt.provider).where(Attempt.token == token)
                ).scalar_one_or_none()
                return AuthorizeResult(
                    "allow",
                    decision_row.rule,
                    decision_row.reason,
                    decision_row.policy_version,
                    decision_row.id,
                    attempt_token=token,
                    providers=list(recorded.get("providers") or []),
                    failover=bool(recorded.get("failover", False)),
                    provider=prepared,
                )
            version, pol = self._policies.active(session)
            destination_ct, destination_hmac = intent_destination(intent, input.channel)
            if destination_ct is None or destination_hmac is None:
                raise ApplicationError(
                    f"the intent has no {input.channel} destination",
                    type=ErrorType.INVALID_DESTINATION,
                    non_retryable=True,
                )
            rule_window = pol.rule_for(intent.region, input.channel, intent.category).cooldown
            since = now - timedelta(
                seconds=max(rule_window.window_seconds, rule_window.min_gap_seconds, 1)
            )
            consents = [
                policy.Consent(
                    channel=c.channel,
                    purpose=c.purpose,
                    granted_at=c.granted_at,
                    revoked_at=c.revoked_at,
                    source=c.source,
                    id=str(c.id),
                    revoked_source=c.revoked_source or "",
                )
                for c in repo.consents_for(session, intent.recipient_ref, input.channel)
            ]
            suppressions = [
                policy.Suppression(
                    channel=s.channel,
                    reason=s.reason,
                    at=s.at,
                    id=str(s.id),
                    category=s.category,
                )
                for s in repo.suppressions_for(session, destination_hmac, input.channel)
            ]
            recent = [
                policy.RecentContact(at=t, channel=input.channel)
                for t in repo.recent_contacts(
                    session, destination_hmac, input.channel, since, intent.id
                )
            ]
            decision = policy.evaluate(
                pol,
                policy.PolicyRequest(
                    channel=input.channel,
                    category=intent.category,
                    country=intent.country,
                    timezone=intent.timezone,
                    region=intent.region,
                ),
                consents=consents,
                suppressions=suppressions,
                recent=recent,
                now=now,
            )
            routed = list(
                pol.providers_for(intent.region, input.channel, defaults=self._default_providers)
            )
            provider = input.provider or routed[0]
            if provider not in routed:
                raise ApplicationError(
                    f"provider {provider!r} is not one the policy routes {input.channel} in "
                    f"{intent.region} to ({', '.join(routed)})",
                    type=ErrorType.NOT_FOUND,
                    non_retryable=True,
                )
            may_fail_over = pol.rule_for(intent.region, input.channel, intent.category).failover
            inputs = dict(decision.inputs)
            if len(routed) > 1:
                # Failover is decided by the policy too: the evidence says what it allowed.
                inputs["providers"] = routed
                inputs["failover"] = may_fail_over
            if input.provider is not None:
                inputs["provider"] = provider
                inputs["failover_reason"] = input.failover_reason
            reason = decision.reason
            if input.provider is not None and input.failover_reason:
                # On the timeline: why this try goes to another provider.
                reason = f"{reason}; failover to {provider}: {input.failover_reason}"[:1000]
            decision_id = repo.record_decision(
                session,
                intent_id=intent.id,
                channel=input.channel,
                policy_version=version,
                outcome=decision.outcome.value,
                rule=decision.rule,
                reason=reason,
                inputs=json.loads(json.dumps(inputs, default=str)),
                next_eligible_at=decision.next_eligible_at,
                decided_at=now,
            )
            result = AuthorizeResult(
                decision.outcome.value,
                decision.rule,
                reason,
                version,
                decision_id,
                next_eligible_at=decision.next_eligible_at,
                providers=routed,
                failover=may_fail_over,
                provider=provider,
            )
            if decision.outcome != policy.Outcome.ALLOW:
                return result
            rendered = self._render(session, intent, input.channel, decision.footer)
            repo.prepare_attempt_id(
                session,
                intent_id=intent.id,
                channel=input.channel,
                number=input.attempt_number,
                token=token,
                decision_id=decision_id,
                destination_ct=self._cipher.encrypt(
                    self._cipher.decrypt(destination_ct, context=intent.business_key), context=token
                ),
                destination_hmac=destination_hmac,
                body_ct=self._cipher.encrypt(rendered.body, context=token),
                subject_ct=(
                    self._cipher.encrypt(rendered.subject, context=token)
                    if rendered.subject
                    else None
                ),
                content_sha256=rendered.sha256,
                template_key=rendered.template_key,
                template_version=rendered.template_version,
                sender=decision.sender,
                sender_address=self._senders.resolve(input.channel, decision.sender),
                provider=provider,
                segments=rendered.segments if channel.counts_segments else None,
                purge_after=now + self._retention,
            )
            metrics.note_prepared(
                session,
                metrics.attempt_labels(
                    input.channel, intent.region, rendered.template_key, rendered.template_version
                ),
                role=metrics.attempt_role(intent.channel_plan, input.channel, input.attempt_number),
            )
            result.attempt_token = token
            return result

        async with stopping_on_key_errors(self._tx, "authorize", intent_id=input.intent_id):
            return await self._tx(work)

    def _render(
        self, session: Session, intent: Row[Any], channel: str, footer: str | None
    ) -> templates.Rendered:
        variables: dict[str, Any] = {}
        if intent.variables_ct:
            variables = json.loads(
                self._cipher.decrypt(intent.variables_ct, context=intent.business_key)
            )
        try:
            # The version pinned at intake: a fallback or a resend after a rollback sends
            # the text the first attempt did.
            locale, version = templates.attempt_choice(
                intent.template_pins, channel, intent.locale, intent.template_version
            )
            chosen = templates.select_template(
                active_templates(session, pinned=version, key=intent.template_key),
                intent.template_key,
                channel,
                locale,
                version=version,
            )
            return templates.render(chosen, variables, footer=footer)
        except templates.TemplateError as err:
            raise ApplicationError(
                str(err), type=ErrorType.TEMPLATE_ERROR, non_retryable=True
            ) from err

    @activity.defn(name="record_verdict")
    async def record_verdict(self, input: VerdictInput) -> str:
        """Record a workflow verdict (e.g. `unknown` at the polling horizon) as an observation."""
        now = now_utc()

        def work(session: Session) -> str:
            result = observations.record_observation(
                session,
                ObservationFacts(
                    source=input.source,
                    raw_status=input.state,
                    normalized=AttemptState(input.state),
                    observed_at=now,
                    dedupe_key=f"{input.source}:{input.attempt_token}:{input.state}",
                    detail={"reason": input.reason} if input.reason else {},
                ),
                token=input.attempt_token,
            )
            if input.answer_state:
                return result.state or input.state
            return result.verdict

        return await self._tx(work)

    def _acting(
        self, action: str, intent_id: str, operator: str, role: str, reason: str, subject: str,
        given: str,
    ) -> tuple[str, str | None, dict[str, str]]:  # fmt: skip
        """(operator, role, detail) to record: the principal the surface proved, or the
        unauthenticated Temporal caller with the identity it claimed."""
        claim = proof.ActingClaim(action, intent_id, operator, role, reason, subject)
        if given and proof.verify(self._cipher.action_key, claim, given, now=now_utc()):
            return operator, role or None, {}
        claimed = {"claimed_operator": operator[:120]}
        if role:
            claimed["claimed_role"] = role[:20]
        claimed["proof"] = "invalid" if given else "none"
        return proof.UNAUTHENTICATED, None, claimed

    @activity.defn(name="record_operator_action")
    async def record_operator_action(self, input: OperatorActionInput) -> None:
        now = parse_iso_utc(input.requested_at) or now_utc()
        claimed: dict[str, str] = {}
        operator, role = input.operator, input.operator_role or None
        if input.requested_in_temporal:
            # A cancellation requested through Temporal carries no operator, only the
            # identity the server recorded on the request.
            operator = await _cancel_requester(input.operator)
        else:
            operator, role, claimed = self._acting(
                input.action,
                input.intent_id,
                input.operator,
                input.operator_role,
                input.reason,
                input.subject,
                input.proof,
            )

        def work(session: Session) -> None:
            operator_actions.record_operator_action(
                session,
                intent_id=input.intent_id,
                action=input.action,
                operator=operator,
                operator_role=role,
                reason=input.reason,
                outcome=input.outcome,
                at=now,
                detail={**dict(input.detail), **claimed},
            )

        await self._tx(work)

    @activity.defn(name="record_settlement")
    async def record_settlement(self, input: SettlementInput) -> SettlementRecorded:
        """Judge a settlement by the policy version active now and record it (observation,
        operator action, audit row, review items closed) in one transaction."""
        now = now_utc()
        # The surface signs the channel it asked to settle (it never sees the token).
        channel = keys.channel_of_token(input.attempt_token)
        subject = f"{channel}|{input.rule}|{input.reference}"
        operator, role, claimed = self._acting(
            "settle",
            input.intent_id,
            input.operator,
            input.operator_role,
            input.reason,
            subject,
            input.proof,
        )

        def work(session: Session) -> SettlementRecorded:
            done = settlements.record_settlement(
                session,
                intent_id=input.intent_id,
                token=input.attempt_token,
                claim=settlement.SettlementClaim(input.rule, input.reason, input.reference),
                operator=operator,
                operator_role=role,
                at=now,
                window_until=input.window_until,
                detail=claimed,
            )
            return SettlementRecorded(
                refused=done.refused,
                state=done.state,
                verdict=done.verdict,
                rule=done.rule,
                resend_allowed=done.resend_allowed,
                policy_version=done.policy_version,
                operator=operator,
            )

        return await self._tx(work)

    @activity.defn(name="record_waiting")
    async def record_waiting(self, input: WaitingInput) -> WaitingFacts:
        """Record what the workflow waits for and until when (the console and the API read
        it from the ledger); file the unknown attempts' review items at once."""
        now = now_utc()

        def work(session: Session) -> WaitingFacts:
            rules = settlements.record_waiting(
                session,
                intent_id=input.intent_id,
                awaiting=input.awaiting,
                until=input.until,
                tokens=list(input.attempt_tokens),
                expired_unsettled=list(input.expired_unsettled),
                at=now,
            )
            return WaitingFacts(
                [
                    SettlementRuleFacts(r.name, r.outcome.value, r.evidence.value, r.resend_allowed)
                    for r in rules
                ]
            )

        return await self._tx(work)


async def _cancel_requester(prefix: str) -> str:
    """`temporal:<identity>` of the latest cancel request in this workflow's history.

    The SDK hands the workflow only the request's reason; who asked is the `identity` of
    the WorkflowExecutionCancelRequested event (the Temporal CLI sends
    `temporal-cli:<user>@<host>` unless given `--identity`; the Web UI its own). Read
    newest first, it is one page. When it cannot be read, the cancel is still recorded,
    under `prefix` alone."""
    info = activity.info()
    try:
        client = activity.client()
        response = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=info.workflow_namespace or client.namespace,
                execution=WorkflowExecution(
                    workflow_id=info.workflow_id or "", run_id=info.workflow_run_id or ""
                ),
                maximum_page_size=100,
            )
        )
    except (RuntimeError, RPCError) as err:
        activity.logger.warning("cancel requester not read: %s", type(err).__name__)
        return prefix
    for event in response.history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED:
            identity = event.workflow_execution_cancel_requested_event_attributes.identity
            # operator_action.operator holds 120 characters; a longer identity would be
            # refused by Postgres on every retry and hold the run open for ever.
            return f"{prefix}:{identity}"[:120] if identity else prefix
    return prefix
