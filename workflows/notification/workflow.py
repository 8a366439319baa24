"""NotificationWorkflow: the whole life of one notification intent, deterministic.

It carries ids only. Every decision comes from `domain`; every side effect is an
activity that acts on the ledger or a transport and returns a fact.
"""

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate, VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError

from workflows.notification.options import (
    ACTIVITY_TIMEOUT,
    ALL_REFUSED_WAIT,
    AUTHORIZE,
    AUTHORIZE_RETRY,
    LEDGER_RETRY,
    LOAD_INTENT,
    LOOKUP_WINDOW,
    MAX_REFUSED_WAIT,
    MIN_DEFER,
    RECORD_OPERATOR_ACTION,
    RECORD_SETTLEMENT,
    RECORD_VERDICT,
    RECORD_WAITING,
    SEND_HEARTBEAT_TIMEOUT,
    SUBMIT_RETRY,
    channel_of,
    queue_of,
)
from workflows.notification.web_ui import (
    CHANNEL,
    CHANNELS_USED,
    EVENT_TYPE,
    OUTCOME,
    REGION,
    Phase,
    minutes,
    show_phase,
    utc,
)

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        MOVE_TO_CURRENT_BUILD,
        PERMANENT_ERRORS,
        AuthorizeInput,
        AuthorizeResult,
        CancelRequest,
        CancelResult,
        CarriedState,
        ChannelResult,
        ErrorType,
        IntentFacts,
        LoadIntentInput,
        LookupInput,
        LookupRequest,
        LookupResult,
        NotificationInput,
        NotificationResult,
        OperatorActionInput,
        PollInput,
        PollOutcome,
        Projection,
        ReceiptSignal,
        ResendRequest,
        ResendResult,
        SettlementInput,
        SettlementRecorded,
        SettlementRuleFacts,
        SettlementStanding,
        SettleRequest,
        SettleResult,
        SubmitInput,
        SubmitOutcome,
        VerdictInput,
        WaitingFacts,
        WaitingInput,
    )
    from domain import (
        channels,
        clocks,
        failover,
        fallback,
        intents,
        keys,
        operator_requests,
        settlement,
        states,
    )
    from domain import providers as providers_domain
    from domain.channels import Channel, ChannelEnd
    from domain.policy import Outcome
    from domain.states import AttemptState

# Operator actions: the name of both the signal and the update.
CANCEL = "cancel"
APPROVE_RESEND = "approve_resend"
SETTLE = "settle"
LOOKUP = "lookup"

SETTLEMENT_REFUSED = "SettlementRefused"
"""The type of the error a `settle` update fails with when the ledger refuses what the
validator let through (it judges by the policy version active when it records). Raised by
the update handler, not by an activity, so it is no `ErrorType`; the run goes on."""

TEMPORAL_CANCEL_OPERATOR = "temporal"
"""The operator a cancel requested through Temporal (Web UI, `temporal workflow cancel`) is
recorded under; the ledger activity adds the request's identity from the history."""


# Pinned: a run lives its whole life on the build that started it, so a new build may
# change the workflow's commands freely; a run waiting for an operator may move to the
# current build when asked (MOVE_TO_CURRENT_BUILD; docs/operations.md, "Deploying a new
# build").
@workflow.defn(versioning_behavior=VersioningBehavior.PINNED)
class NotificationWorkflow:
    def __init__(self) -> None:
        self._facts: IntentFacts | None = None
        self._phase: str = Phase.STARTING.value
        self._cancelled = False
        self._cancel_reason = ""
        self._attempt_states: dict[str, str] = {}
        self._results: dict[str, ChannelResult] = {}
        self._in_flight: set[str] = set()
        self._resend: ResendRequest | None = None
        self._error_codes: dict[str, str] = {}
        self._continued = False
        # Settling ambiguity: the window opens when an attempt ends `unknown`.
        self._settle_until: datetime | None = None
        self._settle_rules: list[SettlementRuleFacts] = []
        self._settlements: dict[str, SettlementStanding] = {}
        self._lookups: dict[str, datetime] = {}
        self._operator_news = False
        """A settlement (or a lookup that settled an attempt) the waiting loop must weigh."""
        self._busy_settling = False
        self._awaiting = ""
        self._awaiting_until: datetime | None = None
        self._stopped_by: dict[str, str] = {}
        """Why observing an attempt stopped unresolved (horizon, fallback, expiry, cancel)."""
        self._move_asked = False
        """An operator asked this run to move to the current build (MOVE_TO_CURRENT_BUILD)."""

    # --- messages ------------------------------------------------------------------

    @workflow.signal
    def receipt(self, signal: ReceiptSignal) -> None:
        """A receipt recorded by the ingress; signals may repeat, `apply` makes them idempotent."""
        self._observe(signal.attempt_token, signal.state, signal.error_code)

    # Each operator action is a signal and an update of the same name (the SDK keeps the
    # two kinds apart): `temporal workflow update execute --name cancel` says what it does.

    @workflow.signal(
        name=CANCEL,
        description="Close the intent's future work; nothing sent is recalled. "
        '{"operator": "...", "reason": "..."}',
    )
    async def cancel_signal(self, request: CancelRequest) -> None:
        await self._cancel(request)

    @workflow.update(
        name=CANCEL,
        description="Close the intent's future work and say what was already handed to a "
        'carrier. {"operator": "...", "reason": "..."}',
    )
    async def cancel_update(self, request: CancelRequest) -> CancelResult:
        return await self._cancel(request)

    @workflow.signal(
        name=APPROVE_RESEND,
        description="A new attempt after a retryable failure; a refusal is recorded. "
        '{"channel": "sms", "operator": "...", "reason": "..."}',
    )
    async def approve_resend_signal(self, request: ResendRequest) -> None:
        refusal = self._resend_refusal(request)
        if refusal:
            await self._record_action(
                "approve-resend",
                request.operator,
                request.reason,
                "refused",
                {"why": refusal},
                role=request.operator_role,
                proof=request.proof,
                subject=request.channel,
            )
            return
        await self._accept_resend(request)

    @workflow.update(
        name=APPROVE_RESEND,
        description="A new attempt after a retryable failure, refused with the reason "
        'otherwise. {"channel": "sms", "operator": "...", "reason": "..."}',
    )
    async def approve_resend_update(self, request: ResendRequest) -> ResendResult:
        return await self._accept_resend(request)

    @approve_resend_update.validator
    def _validate_resend(self, request: ResendRequest) -> None:
        refusal = self._resend_refusal(request)
        if refusal:
            raise ValueError(refusal)

    @workflow.update(
        name=SETTLE,
        description="A person's decision on the channel's unknown attempt under a named "
        "settlement rule of the active policy; refused with the reason otherwise. "
        '{"channel": "sms", "rule": "...", "reason": "...", "reference": "..."}',
    )
    async def settle_update(self, request: SettleRequest) -> SettleResult:
        self._busy_settling = True
        try:
            return await self._settle(request)
        finally:
            self._busy_settling = False

    @settle_update.validator
    def _validate_settle(self, request: SettleRequest) -> None:
        refusal = self._settle_refusal(request)
        if refusal:
            raise ValueError(refusal)

    @workflow.update(
        name=LOOKUP,
        description="Ask the provider what it holds for the channel's unknown attempt before "
        'settling it; the lookup and its answer are recorded. {"channel": "sms"}',
    )
    async def lookup_update(self, request: LookupRequest) -> LookupResult:
        asked_at = workflow.now()  # the request reads before the answer it brought
        token = self._latest_token(request.channel)
        lookup = channel_of(request.channel).lookup_activity
        assert token is not None and lookup is not None  # the validator refused the rest
        result = await workflow.execute_activity(
            lookup,
            LookupInput(token, requested_by=request.operator),
            result_type=LookupResult,
            task_queue=queue_of(channel_of(request.channel)),
            start_to_close_timeout=ACTIVITY_TIMEOUT,
            # An operator waits on this answer: a provider that keeps failing is a refusal
            # after LOOKUP_WINDOW (the update fails; the client records why), not a wait
            # without end.
            schedule_to_close_timeout=LOOKUP_WINDOW,
            retry_policy=LEDGER_RETRY,
            summary=f"look {request.channel} up at the provider before a settlement",
        )
        self._lookups[token] = workflow.now()
        if result.state:
            before = self._attempt_states.get(token)
            self._observe(token, result.state)
            self._operator_news = self._operator_news or before != self._attempt_states.get(token)
        await self._record_action(
            "lookup",
            request.operator,
            "",
            "accepted",
            {"channel": request.channel, "attempt": token, "found": result.raw_status},
            role=request.operator_role,
            proof=request.proof,
            subject=request.channel,
            at=asked_at,
        )
        return result

    @lookup_update.validator
    def _validate_lookup(self, request: LookupRequest) -> None:
        if self._settle_until is None:
            raise ValueError("the intent is not waiting for a settlement")
        token = self._latest_token(request.channel)
        if token is None:
            raise ValueError(f"no {request.channel} attempt to look up")
        if (
            request.channel not in channels.NAMES
            or not channels.get(request.channel).provider_lookup
        ):
            raise ValueError(f"the {request.channel} provider has no lookup")

    @workflow.signal(
        name=MOVE_TO_CURRENT_BUILD,
        description="While waiting for an operator, continue as new on the deployment's "
        "current build, carrying the state; ignored elsewhere, or when this run's build is "
        "still the target.",
    )
    def move_to_current_build(self) -> None:
        # The server tells a run that its target build changed only on a workflow task;
        # this signal is that task, and the waiting loop decides at its safe point.
        self._move_asked = True

    @workflow.query
    def projection(self) -> Projection:
        return Projection(
            intent_id=self._facts.intent_id if self._facts else "",
            phase=self._phase,
            cancelled=self._cancelled,
            channels=list(self._results.values()),
            attempt_states=dict(self._attempt_states),
            awaiting=self._awaiting,
            awaiting_until=self._awaiting_until,
            settlements=dict(self._settlements),
        )

    # --- the run -------------------------------------------------------------------

    @workflow.run
    async def run(self, input: NotificationInput) -> NotificationResult:
        """The intent's life, shielded from a cancellation requested through Temporal.

        Such a request (Web UI, `temporal workflow cancel`) takes the path of `herald
        cancel`: the ledger records it (with what was already handed to a carrier), the
        life below closes its future work and finishes as it would after an operator's
        cancel, and then the run ends as Temporal was asked: cancelled."""
        life = asyncio.ensure_future(self._life(input))
        try:
            return await asyncio.shield(life)
        except asyncio.CancelledError:
            reason = workflow.cancellation_reason()
            if reason is None:
                raise  # not a request from the server (e.g. the worker evicting the run)
            await self._cancel(
                CancelRequest(
                    TEMPORAL_CANCEL_OPERATOR, reason or "cancellation requested in Temporal"
                ),
                requested_in_temporal=True,
            )
            await life
            raise

    async def _life(self, input: NotificationInput) -> NotificationResult:
        # A local activity: one short read, recorded as a marker in the same workflow task
        # instead of a scheduled/started/completed round trip through the server.
        facts = await workflow.execute_local_activity(
            LOAD_INTENT,
            LoadIntentInput(input.intent_id),
            result_type=IntentFacts,
            start_to_close_timeout=ACTIVITY_TIMEOUT,
            retry_policy=LEDGER_RETRY,
            summary="load the intent's facts from the ledger",
        )
        self._facts = facts
        for name in facts.channels:
            channel_of(name)
        self._cancelled = self._cancelled or facts.cancelled
        # The starter sets state/channel/region/event type at start; only fill what is missing.
        missing = [
            key.value_set(value)
            for key, value in (
                (REGION, facts.region),
                (EVENT_TYPE, facts.event_type),
                (CHANNEL, facts.channels[0] if facts.channels else "none"),
            )
            if workflow.info().typed_search_attributes.get(key) is None
        ]
        if missing:
            workflow.upsert_search_attributes(missing)

        if input.carried is not None:
            # Continued as new while waiting for an operator: pick the window up again.
            self._continued = True
            self._restore(input.carried)
            await self._operator_window(input.carried.resend_until)
            return await self._finish("")

        if facts.send_at is not None and facts.send_at > workflow.now():
            self._set_phase(
                Phase.SCHEDULED, details=f"scheduled: waiting for send-at {utc(facts.send_at)}"
            )
            await self._wait(facts.send_at, summary=f"until send-at {utc(facts.send_at)}")
        if self._cancelled:
            return await self._finish("cancelled before send-at; no attempt was made")

        if facts.mode == "all":
            await asyncio.gather(*(self._run_channel(ch) for ch in facts.channels))
        else:
            for index, channel in enumerate(facts.channels):
                result = await self._run_channel(channel)
                if not self._should_fall_back(result, more=index + 1 < len(facts.channels)):
                    break
        # An operator may still settle an unknown attempt, or approve a resend after a
        # retryable failure or a settlement that allows one.
        if self._settle_until is not None or any(
            self._resend_refusal(ResendRequest(channel=c)) is None for c in self._results
        ):
            await self._operator_window()
        return await self._finish("")

    async def _run_channel(self, channel: str, number: int = 1) -> ChannelResult:
        result = await self._attempt(channel, number)
        self._results[channel] = result
        if (
            result.state == AttemptState.UNKNOWN.value
            and result.attempt_token
            and not self._cancelled
            # The next channel follows a fallback-window or expiry stop: no question to ask.
            and self._stopped_by.get(result.attempt_token) not in ("fallback", "expiry", "cancel")
        ):
            # The horizon verdict (or a lost send the lookup could not place) is a
            # question: open the settlement window now and file its review item at once.
            facts = self._require_facts()
            window = facts.settlement_window_seconds or settlement.DEFAULT_WINDOW_SECONDS
            self._settle_until = workflow.now() + timedelta(seconds=window)
            await self._record_waiting("settlement", self._settle_until, [result.attempt_token])
        return result

    def _why(self, channel: str, number: int) -> str:
        """Why this attempt is made, for summaries: a fallback, a resend, or the plan."""
        if number > 1:
            return f", resend approved after {channel} #{number - 1}"
        earlier = [r for r in self._results.values() if r.channel != channel]
        if earlier and self._require_facts().mode == "fallback":
            last = earlier[-1]
            return f", fallback after {last.channel} {last.state}"
        return ""

    async def _attempt(self, channel: str, number: int) -> ChannelResult:
        why = self._why(channel, number)
        at_least = timedelta(0)
        while True:
            result = await self._attempt_once(channel, number, why)
            if isinstance(result, ChannelResult):
                return result
            # The provider refused for its own reasons (its account, its open circuit), and
            # no other provider may take it: wait until it may take work again, then try a
            # new attempt, authorized again; the intent's closing ends the channel.
            refusal, retry_at = result
            ended, at_least = await self._wait_for_providers(
                channel_of(channel), [retry_at] if retry_at else [], number, refusal, at_least
            )
            if ended is not None:
                return ended
            number += 1
            why = f", after {refusal}"

    async def _attempt_once(
        self, channel: str, number: int, why: str
    ) -> ChannelResult | tuple[str, datetime | None]:
        """One attempt on `channel`: authorized, submitted, followed. A refusal about the
        provider that no other provider may take returns (what was refused, when the
        provider may take work again) instead of a result."""
        spec = channel_of(channel)
        facts = self._require_facts()
        label = f"{channel} #{number}"
        self._set_phase(
            Phase.AUTHORIZING,
            channel=channel,
            details=f"asking the policy whether {label} may go{why}",
        )
        while True:
            if self._cancelled:
                return ChannelResult(
                    channel,
                    ChannelEnd.CANCELLED.value,
                    self._cancel_reason or "cancelled",
                    attempts=number - 1,
                )
            if self._expired():
                return ChannelResult(
                    channel,
                    ChannelEnd.EXPIRED.value,
                    "the business expiry passed",
                    attempts=number - 1,
                )
            try:
                auth = await self._authorize(
                    AuthorizeInput(facts.intent_id, channel, number),
                    summary=f"authorize {label}{why}",
                )
            except ApplicationError as err:
                # A permanent problem preparing this channel (template, destination, a data
                # key the worker cannot use): this channel fails with the reason; the
                # fallback rules still apply. A local activity's failure is raised as its
                # ApplicationError itself, not wrapped in an ActivityError.
                return ChannelResult(
                    channel,
                    AttemptState.FAILED.value,
                    err.message,
                    attempts=number - 1,
                    rule="prepare.failed",
                )
            if auth.outcome == Outcome.DENY.value:
                return ChannelResult(
                    channel,
                    ChannelEnd.DENIED.value,
                    auth.reason,
                    attempts=number - 1,
                    policy_version=auth.policy_version,
                    rule=auth.rule,
                )
            if auth.outcome == Outcome.ALLOW.value:
                break
            # Deferred: backpressure is data. Wait until eligible, bounded by the expiry.
            self._set_phase(Phase.DEFERRED, channel=channel, details=f"{label} deferred by policy")
            until = max(
                auth.next_eligible_at or workflow.now() + timedelta(minutes=1),
                workflow.now() + MIN_DEFER,
            )
            if facts.expires_at is not None:
                until = min(until, facts.expires_at)
            workflow.set_current_details(
                f"{label} deferred by policy ({auth.rule}) until {utc(until)}"
            )
            await self._wait(until, summary=f"{label} deferred ({auth.rule}) until {utc(until)}")
        token = auth.attempt_token
        assert token is not None
        if spec.fails_over and len(auth.providers) > 1:
            return await self._attempt_across_providers(spec, number, auth, why)
        self._attempt_states[token] = AttemptState.PREPARED.value
        base = ChannelResult(
            channel,
            AttemptState.PREPARED.value,
            auth.reason,
            token,
            attempts=number,
            policy_version=auth.policy_version,
            rule=auth.rule,
        )
        self._set_phase(
            Phase.SUBMITTING, channel=channel, details=f"handing {label} to the provider{why}"
        )
        self._in_flight.add(token)
        try:
            outcome = await self._submit(spec, token, facts, summary=f"{label}{why}")
        finally:
            self._in_flight.discard(token)
        self._observe(token, outcome.state, outcome.error_code)
        if outcome.answer == failover.Answer.REFUSED_BY_PROVIDER.value:
            provider = auth.provider or spec.name
            refusal = f"{provider} refused: {outcome.error_code or ''} {outcome.reason}"
            return " ".join(refusal.split())[:200], outcome.retry_at
        base.remote_id = outcome.remote_id
        if outcome.reason:
            base.reason = outcome.reason
        if (
            spec.poll_activity is not None
            and not states.is_terminal(AttemptState(self._attempt_states[token]))
            and self._attempt_states[token] != AttemptState.UNKNOWN.value
        ):
            await self._observe_attempt(spec, token, facts, label)
        elif (
            spec.poll_activity is None
            and self._attempt_states[token] == AttemptState.SUBMITTED.value
        ):
            await self._await_events(spec, token, facts, label)
        base.state = self._attempt_states[token]
        base.error_code = self._error_codes.get(token)
        if base.state == AttemptState.UNKNOWN.value and not base.reason:
            base.reason = "no final status before the polling horizon"
        return base

    async def _attempt_across_providers(
        self, spec: Channel, number: int, auth: AuthorizeResult, why: str
    ) -> ChannelResult:
        """Attempts on one channel across the providers the policy routes it to
        (domain.failover): each try is its own attempt (`<key>:sms:<n>`, its own token and
        provider alias); the next provider tries only after a definitive provider-side
        refusal, or after the lookup found a lost create absent. Every provider refusing
        defers until one may take work again, then tries them all as a new attempt; the
        business expiry ends the channel `expired` (nothing was sent)."""
        facts = self._require_facts()
        providers = list(auth.providers)
        run = failover.ChannelRun(providers, failover_allowed=auth.failover, first_number=number)
        moved_on: list[str] = []
        retry_at: list[datetime] = []
        at_least = timedelta(0)
        while True:
            token = auth.attempt_token
            assert token is not None
            provider = auth.provider or run.current.provider
            label = f"{spec.name} #{number} via {provider}"
            self._attempt_states[token] = AttemptState.PREPARED.value
            base = ChannelResult(
                spec.name,
                AttemptState.PREPARED.value,
                auth.reason,
                token,
                attempts=number,
                policy_version=auth.policy_version,
                rule=auth.rule,
            )
            # With failover allowed, every try hands a definitive provider-side refusal back
            # at once: to the next provider, or (the last one) to a deferral of them all.
            hand_back = auth.failover
            # Each provider's own queue: its own rate budget, enforced by the server.
            queue = providers_domain.provider_task_queue(spec, workflow.info().task_queue, provider)
            self._set_phase(
                Phase.SUBMITTING, channel=spec.name, details=f"handing {label} to the provider{why}"
            )
            self._in_flight.add(token)
            try:
                outcome = await self._submit(
                    spec,
                    token,
                    facts,
                    summary=f"{label}{why}",
                    failover_allowed=hand_back,
                    task_queue=queue,
                )
            finally:
                self._in_flight.discard(token)
            self._observe(token, outcome.state, outcome.error_code)
            base.remote_id = outcome.remote_id
            if outcome.reason:
                base.reason = outcome.reason
            answer, lookup = _answer_of(outcome)
            refusal = f"{provider} refused: {outcome.error_code or ''} {outcome.reason}".strip()
            if answer == failover.Answer.AMBIGUOUS:
                refusal = f"{provider} lost the answer and does not hold it ({outcome.reason})"
            decision = run.step(answer, lookup, why=refusal)
            if outcome.retry_at is not None:
                retry_at.append(outcome.retry_at)
            if decision.move == failover.Move.NEXT_PROVIDER:
                moved_on.append(refusal)
                number += 1
                nxt = run.current.provider
                why = f", failover from {provider}"
                next_auth = await self._authorize_failover(spec, number, nxt, refusal)
                if isinstance(next_auth, ChannelResult):
                    next_auth.reason = "; ".join([*moved_on, next_auth.reason])
                    return next_auth
                auth = next_auth
                continue
            if decision.move == failover.Move.DEFER:
                ended, at_least = await self._wait_for_providers(
                    spec, retry_at, number, refusal, at_least, moved_on, who="every provider"
                )
                if ended is not None:
                    return ended
                moved_on.append(refusal)
                number += 1
                run = failover.ChannelRun(
                    providers, failover_allowed=auth.failover, first_number=number
                )
                retry_at = []
                next_auth = await self._authorize_failover(
                    spec, number, providers[0], "every provider refused; trying again"
                )
                if isinstance(next_auth, ChannelResult):
                    return next_auth
                auth = next_auth
                continue
            break
        if (
            spec.poll_activity is not None
            and not states.is_terminal(AttemptState(self._attempt_states[token]))
            and self._attempt_states[token] != AttemptState.UNKNOWN.value
        ):
            await self._observe_attempt(spec, token, facts, label, task_queue=queue)
        base.state = self._attempt_states[token]
        base.error_code = self._error_codes.get(token)
        if base.state == AttemptState.UNKNOWN.value and not base.reason:
            base.reason = "no final status before the polling horizon"
        if moved_on:
            base.reason = "; ".join([*moved_on, f"sent through {provider}: {base.reason}"])
        return base

    async def _wait_for_providers(
        self,
        spec: Channel,
        retry_at: list[datetime],
        number: int,
        refusal: str,
        at_least: timedelta,
        moved_on: list[str] | None = None,
        *,
        who: str = "the provider",
    ) -> tuple[ChannelResult | None, timedelta]:
        """Every provider that may take the channel refused for its own reasons (an account
        refusal, an open circuit): wait until the first may take work again (the time it
        said, else ALL_REFUSED_WAIT), and `at_least` after the refusals before it (each
        wait doubles the next one's floor, up to MAX_REFUSED_WAIT); bounded by the
        business expiry.

        Returns (None, the next floor) to try again (a new attempt), or the channel's end
        when the intent closed meanwhile: `cancelled`, or `expired` with what was refused
        (nothing was sent; the refusals are each attempt's `failed` in the ledger, never
        the intent's).
        """
        facts = self._require_facts()
        now = workflow.now()
        until = min(retry_at) if retry_at else now + ALL_REFUSED_WAIT
        until = max(until, now + MIN_DEFER, now + at_least)
        next_floor = min(2 * (until - now), MAX_REFUSED_WAIT)
        if facts.expires_at is not None:
            until = min(until, facts.expires_at)
        self._set_phase(
            Phase.DEFERRED,
            channel=spec.name,
            details=f"{refusal}; {spec.name} #{number} deferred, trying again at {utc(until)}",
        )
        await self._wait(until, summary=f"{refusal}; {spec.name} again at {utc(until)}")
        if self._cancelled:
            reason = self._cancel_reason or "cancelled"
            return ChannelResult(
                spec.name, ChannelEnd.CANCELLED.value, reason, attempts=number
            ), next_floor
        if self._expired():
            return ChannelResult(
                spec.name,
                ChannelEnd.EXPIRED.value,
                "; ".join([*(moved_on or []), refusal])
                + f"; {who} refused until the business expiry; nothing was sent",
                attempts=number,
            ), next_floor
        return None, next_floor

    async def _authorize_failover(
        self, spec: Channel, number: int, provider: str, reason: str
    ) -> AuthorizeResult | ChannelResult:
        """Authorize the next try with `provider`: the policy is asked again (an opt-out
        received meanwhile, through any provider, still holds). A deferral waits; a denial
        or a closed intent ends the channel."""
        facts = self._require_facts()
        label = f"{spec.name} #{number} via {provider}"
        while True:
            if self._cancelled:
                return ChannelResult(
                    spec.name,
                    ChannelEnd.CANCELLED.value,
                    self._cancel_reason or "cancelled",
                    attempts=number - 1,
                )
            if self._expired():
                return ChannelResult(
                    spec.name,
                    ChannelEnd.EXPIRED.value,
                    "the business expiry passed",
                    attempts=number - 1,
                )
            auth = await self._authorize(
                AuthorizeInput(
                    facts.intent_id, spec.name, number, provider=provider, failover_reason=reason
                ),
                summary=f"authorize {label} (failover)",
            )
            if auth.outcome == Outcome.ALLOW.value:
                return auth
            if auth.outcome == Outcome.DENY.value:
                return ChannelResult(
                    spec.name,
                    ChannelEnd.DENIED.value,
                    auth.reason,
                    attempts=number - 1,
                    policy_version=auth.policy_version,
                    rule=auth.rule,
                )
            until = max(
                auth.next_eligible_at or workflow.now() + timedelta(minutes=1),
                workflow.now() + MIN_DEFER,
            )
            if facts.expires_at is not None:
                until = min(until, facts.expires_at)
            await self._wait(until, summary=f"{label} deferred ({auth.rule}) until {utc(until)}")

    async def _authorize(self, request: AuthorizeInput, *, summary: str) -> AuthorizeResult:
        """One policy decision (and the attempt it allows), in one ledger transaction.

        A local activity: it runs in the workflow task that asked for it and is recorded as
        a marker, instead of a scheduled/started/completed activity and a workflow task of
        its own. A re-run after a lost workflow task finds the attempt it prepared (keyed by
        its token) and allows it again."""
        return await workflow.execute_local_activity(
            AUTHORIZE,
            request,
            result_type=AuthorizeResult,
            start_to_close_timeout=ACTIVITY_TIMEOUT,
            retry_policy=AUTHORIZE_RETRY,
            summary=summary,
        )

    async def _submit(
        self,
        channel: Channel,
        token: str,
        facts: IntentFacts,
        *,
        summary: str,
        failover_allowed: bool = False,
        task_queue: str | None = None,
    ) -> SubmitOutcome:
        try:
            return await workflow.execute_activity(
                channel.send_activity,
                SubmitInput(token, failover=True) if failover_allowed else SubmitInput(token),
                result_type=SubmitOutcome,
                task_queue=task_queue or queue_of(channel),
                start_to_close_timeout=ACTIVITY_TIMEOUT,
                heartbeat_timeout=SEND_HEARTBEAT_TIMEOUT if channel.send_heartbeat else None,
                schedule_to_close_timeout=timedelta(seconds=facts.submit_window_seconds),
                retry_policy=SUBMIT_RETRY,
                summary=f"{channel.send_verb} {summary}",
            )
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type in PERMANENT_ERRORS:
                code = str(cause.details[0]) if cause.details else None
                answer = None
                retry_at = None
                if cause.type == ErrorType.PROVIDER_REFUSED:
                    answer = failover.Answer.REFUSED_BY_PROVIDER.value
                    # An open circuit says when its provider lets a probe through.
                    if len(cause.details) > 2 and cause.details[2]:
                        retry_at = datetime.fromisoformat(str(cause.details[2]))
                elif cause.type == ErrorType.PERMANENT_PROVIDER_ERROR:
                    answer = failover.Answer.REFUSED_FOR_DESTINATION.value
                return SubmitOutcome(
                    AttemptState.FAILED.value,
                    error_code=code,
                    reason=cause.message,
                    answer=answer,
                    retry_at=retry_at,
                )
            # The transport retry window closed with the outcome still open.
            return SubmitOutcome(
                AttemptState.UNKNOWN.value,
                reason="transport retry window closed without a final answer",
            )

    async def _observe_attempt(
        self,
        channel: Channel,
        token: str,
        facts: IntentFacts,
        label: str,
        *,
        task_queue: str | None = None,
    ) -> None:
        """Wait for a receipt or poll with jittered backoff until terminal or the horizon
        (channels with a `poll_activity`).

        In fallback mode the timer of the next channel is the same wait: when it fires
        first, polling stops. Whenever observation stops with the attempt unresolved
        (horizon, fallback, cancel) the ledger gets the verdict `unknown` with that
        reason; a late receipt through the ingress may still settle it.
        """
        started = workflow.now()
        horizon = started + timedelta(seconds=facts.poll_horizon_seconds)
        stop_reason = ("horizon", "no final status before the polling horizon")
        plan = facts.channels
        later = plan[plan.index(channel.name) + 1 :] if channel.name in plan else []
        if facts.mode == "fallback" and later:
            fallback_at = started + timedelta(seconds=facts.email_after_seconds)
            if fallback_at < horizon:
                horizon = fallback_at
                stop_reason = (
                    "fallback",
                    "not delivered within the fallback window; no longer followed",
                )
        if facts.expires_at is not None and facts.expires_at < horizon:
            horizon = max(facts.expires_at, started)
            stop_reason = ("expiry", "the business expiry passed before a final status")
        ends = {
            "horizon": f"polling horizon at {utc(horizon)}",
            "fallback": (
                f"fallback window {minutes(facts.email_after_seconds)}, "
                f"then {later[0] if later else 'the next channel'} at {utc(horizon)}"
            ),
            "expiry": f"business expiry at {utc(horizon)}",
        }[stop_reason[0]]
        self._set_phase(
            Phase.OBSERVING,
            channel=channel.name,
            details=f"waiting for a receipt for {label} until {utc(horizon)}",
        )
        rand = workflow.random()
        retry = 0
        while not self._settled(token):
            if self._cancelled:
                stop_reason = (
                    "cancel",
                    "cancelled by an operator; not recalled, no longer followed",
                )
                break
            if workflow.now() >= horizon:
                break
            delay = clocks.backoff_delay(
                retry,
                initial=facts.poll_initial_seconds,
                maximum=facts.poll_max_seconds,
                rand=rand.random,
            )
            next_poll = workflow.now() + timedelta(seconds=delay)
            self._set_phase(
                Phase.OBSERVING,
                channel=channel.name,
                details=(
                    f"waiting for a receipt for {label} until {utc(horizon)} ({ends}); "
                    + (f"next poll at {utc(next_poll)}" if next_poll < horizon else "no more polls")
                ),
            )
            await self._wait(
                min(next_poll, horizon),
                extra=lambda: self._settled(token),
                summary=(
                    f"receipt for {label} or poll {retry + 1} at {utc(next_poll)}"
                    if next_poll < horizon
                    else f"receipt for {label} until the {ends}"
                ),
            )
            if self._settled(token) or self._cancelled or workflow.now() >= horizon:
                continue
            assert channel.poll_activity is not None
            polled = await workflow.execute_activity(
                channel.poll_activity,
                PollInput(token),
                result_type=PollOutcome,
                task_queue=task_queue or queue_of(channel),
                start_to_close_timeout=ACTIVITY_TIMEOUT,
                retry_policy=LEDGER_RETRY,
                summary=f"poll {label}, poll {retry + 1} before {utc(horizon)}",
            )
            self._observe(token, polled.state, polled.error_code)
            retry += 1
        if not self._settled(token):
            source, reason = stop_reason
            self._stopped_by[token] = source
            await self._record_verdict(
                token, AttemptState.UNKNOWN.value, source, reason, label=label
            )

    async def _await_events(
        self, channel: Channel, token: str, facts: IntentFacts, label: str
    ) -> None:
        """A provider that reports events instead of being polled (SendGrid): wait for the
        ingress to signal a final one, until the events horizon.

        No event by then (or a cancel first) records `sent`, the last word an SMTP relay
        gives: the provider took the message and nothing said it failed. A later event
        through the ingress still settles the attempt in the ledger (delivered, or a
        bounce, which also suppresses the address)."""
        horizon = workflow.now() + timedelta(seconds=facts.email_events_horizon_seconds)
        self._set_phase(
            Phase.OBSERVING,
            channel=channel.name,
            details=f"waiting for a delivery event for {label} until {utc(horizon)}",
        )
        await self._wait(
            horizon,
            extra=lambda: self._settled(token),
            summary=f"delivery event for {label} until {utc(horizon)}",
        )
        if self._settled(token):
            return
        reason = (
            "cancelled while waiting for a delivery event; accepted by the provider, not recalled"
            if self._cancelled
            else f"accepted by the provider; no delivery event within "
            f"{minutes(facts.email_events_horizon_seconds)}"
        )
        # The ledger answers its state after the verdict: an event the ingress recorded but
        # could not signal (Temporal unreachable) still decides the outcome.
        in_ledger = await workflow.execute_activity(
            RECORD_VERDICT,
            VerdictInput(token, AttemptState.SENT.value, "horizon", reason, answer_state=True),
            result_type=str,
            start_to_close_timeout=ACTIVITY_TIMEOUT,
            retry_policy=LEDGER_RETRY,
            summary=f"record {label} sent (horizon)",
        )
        self._observe(token, AttemptState.SENT.value)
        self._observe(token, in_ledger)

    async def _record_verdict(
        self, token: str, state: str, source: str, reason: str, *, label: str
    ) -> None:
        await workflow.execute_activity(
            RECORD_VERDICT,
            VerdictInput(token, state, source, reason),
            start_to_close_timeout=ACTIVITY_TIMEOUT,
            retry_policy=LEDGER_RETRY,
            summary=f"record {label} {state} ({source})",
        )
        self._observe(token, state)

    def _should_fall_back(self, result: ChannelResult, *, more: bool) -> bool:
        if not more or self._cancelled or self._expired():
            return False
        facts = self._require_facts()
        fall_back = fallback.should_fall_back(
            result.channel,
            result.state,
            on_permanent_failure=facts.email_on_permanent_failure,
            on_unresolved=facts.fallback_when_unresolved,
        )
        # A channel whose provider cannot be asked (email: SMTP, SendGrid) that ended
        # `unknown` may well have reached the person; a person settles it, and the plan
        # does not add another channel on a guess.
        if (
            fall_back
            and result.state == AttemptState.UNKNOWN.value
            and not channel_of(result.channel).provider_lookup
        ):
            return False
        return fall_back

    async def _operator_window(self, resend_until: datetime | None = None) -> None:
        """Stay open while an operator may still act, and say so in the ledger. An unknown
        attempt waits for a settlement until the settlement window closes (then it is
        recorded as expired unsettled); a retryable failure, or a settlement whose rule
        allows it, waits for an approve-resend until the resend window closes.

        This is where an intent can live long (resend after resend), so it is where the
        workflow continues as new when the history grows long, carrying its state."""
        facts = self._require_facts()

        def resend_end() -> datetime:
            end = workflow.now() + timedelta(seconds=facts.resend_window_seconds)
            return min(end, facts.expires_at) if facts.expires_at is not None else end

        expired_recorded: set[str] = set()
        while not self._cancelled:
            now = workflow.now()
            unsettled = self._unsettled_tokens()
            open_settle = bool(unsettled) and (
                self._settle_until is not None and now < self._settle_until
            )
            if unsettled and not open_settle:
                expired = [t for t in unsettled if t not in expired_recorded]
                if expired:
                    expired_recorded.update(expired)
                    await self._record_waiting(None, None, [], expired_unsettled=expired)
            resendable = [
                r
                for r in self._results.values()
                if self._resend_refusal(ResendRequest(channel=r.channel)) is None
            ]
            if resendable and resend_until is None:
                resend_until = resend_end()
            open_resend = bool(resendable) and resend_until is not None and now < resend_until
            if not open_settle and not open_resend:
                break
            kind, until = (
                ("settlement", self._settle_until) if open_settle else ("resend", resend_until)
            )
            assert until is not None
            if open_settle and open_resend and resend_until is not None:
                until = min(until, resend_until)
            if (kind, until) != (self._awaiting, self._awaiting_until):
                await self._record_waiting(kind, until, unsettled if open_settle else [])
            waiting = ", ".join(
                f"{r.channel} #{r.attempts} {r.state}"
                for r in self._results.values()
                if r.attempt_token in unsettled or r in resendable
            )
            action = "a settlement (settle)" if open_settle else "an approve_resend"
            if open_settle and open_resend:
                action = "a settlement or an approve_resend"
            self._set_phase(
                Phase.AWAITING_OPERATOR,
                details=f"{waiting}; open for {action} until {utc(until)}",
            )
            if self._history_is_long():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(
                    NotificationInput(facts.intent_id, self._carry(resend_until))
                )
            if self._move_asked and self._resend is None:
                self._move_asked = False
                if workflow.info().is_target_worker_deployment_version_changed():
                    # A safe point: nothing in flight here, and no handler left running.
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    workflow.continue_as_new(
                        NotificationInput(facts.intent_id, self._carry(resend_until)),
                        initial_versioning_behavior=(
                            workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE
                        ),
                    )
            self._operator_news = False
            await self._wait(
                until,
                extra=lambda: self._resend is not None or self._operator_news or self._move_asked,
                summary=f"{kind} window until {utc(until)}",
            )
            request, self._resend = self._resend, None
            if request is not None:
                previous = self._results[request.channel]
                await self._run_channel(request.channel, previous.attempts + 1)
                resend_until = None  # a new attempt opens its own resend window
        if self._awaiting:
            await self._record_waiting(None, None, [])

    async def _record_waiting(
        self,
        awaiting: str | None,
        until: datetime | None,
        tokens: list[str],
        *,
        expired_unsettled: list[str] | None = None,
    ) -> None:
        facts = await workflow.execute_activity(
            RECORD_WAITING,
            WaitingInput(
                self._require_facts().intent_id,
                awaiting,
                until,
                tokens,
                expired_unsettled or [],
            ),
            result_type=WaitingFacts,
            start_to_close_timeout=ACTIVITY_TIMEOUT,
            retry_policy=LEDGER_RETRY,
            summary=(
                f"record: waiting for {awaiting} until {utc(until)}"
                if awaiting and until
                else "record: settlement window closed unsettled"
                if expired_unsettled
                else "record: no longer waiting for an operator"
            ),
        )
        self._awaiting, self._awaiting_until = awaiting or "", until if awaiting else None
        if awaiting == "settlement":
            self._settle_rules = list(facts.settlement_rules)

    def _unsettled_tokens(self) -> list[str]:
        """The latest attempt of each channel when it is unknown and nobody settled it."""
        return [
            r.attempt_token
            for r in self._results.values()
            if r.attempt_token
            and self._attempt_states.get(r.attempt_token) == AttemptState.UNKNOWN.value
        ]

    def _latest_token(self, channel: str) -> str | None:
        result = self._results.get(channel)
        return result.attempt_token if result is not None else None

    def _settle_refusal(self, request: SettleRequest) -> str | None:
        token = self._latest_token(request.channel)
        return operator_requests.settle_refusal(
            request.channel,
            settlement.SettlementClaim(
                request.rule, request.reason, request.reference, self._lookups.get(token or "")
            ),
            token=token,
            offered=[
                settlement.SettlementRule(
                    r.name,
                    settlement.SettlementOutcome(r.outcome),
                    settlement.Evidence(r.evidence),
                    r.resend_allowed,
                )
                for r in self._settle_rules
            ],
            current=AttemptState(
                self._attempt_states.get(token or "", AttemptState.PREPARED.value)
            ),
            current_by_operator=token in self._settlements,
            busy=self._busy_settling,
            now=workflow.now(),
            window_until=self._settle_until,
        )

    async def _settle(self, request: SettleRequest) -> SettleResult:
        token = self._latest_token(request.channel)
        assert token is not None
        facts = self._require_facts()
        recorded = await workflow.execute_activity(
            RECORD_SETTLEMENT,
            SettlementInput(
                facts.intent_id,
                token,
                request.rule,
                request.reason,
                request.reference,
                request.operator,
                request.operator_role,
                request.proof,
                self._settle_until,
            ),
            result_type=SettlementRecorded,
            start_to_close_timeout=ACTIVITY_TIMEOUT,
            retry_policy=LEDGER_RETRY,
            # The operator's name is left out: the summary shows in every list of events.
            summary=f"record settlement of {request.channel} under {request.rule}",
        )
        if recorded.refused:
            # The ledger judged it by the policy version active now: its word stands.
            raise ApplicationError(recorded.refused, type=SETTLEMENT_REFUSED)
        self._attempt_states[token] = recorded.state
        self._settlements[token] = SettlementStanding(recorded.rule, recorded.resend_allowed)
        result = self._results[request.channel]
        result.state = recorded.state
        result.reason = f"settled under {recorded.rule} by {recorded.operator}"
        self._operator_news = True
        return SettleResult(
            True,
            f"settled as {recorded.state} under {recorded.rule} (policy "
            f"{recorded.policy_version}); "
            + (
                "an approve-resend may follow"
                if recorded.resend_allowed
                else "no resend may follow"
            ),
            state=recorded.state,
            rule=recorded.rule,
            resend_allowed=recorded.resend_allowed,
            policy_version=recorded.policy_version,
            attempt_token=token,
        )

    async def _finish(self, reason: str) -> NotificationResult:
        """Every business outcome completes the run; the outcome is in the result and in
        HeraldOutcome. A denied or undelivered intent is Herald doing its job (the policy
        said no, the carrier said no), not a run that broke: failing the run would mark it
        red beside real faults, count it in the SDK's workflow-failed metric and drop the
        result payload. Failed runs stay reserved for bugs."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        outcome = self._outcome()
        reason = reason or "; ".join(
            f"{r.channel}: {r.state} ({r.reason})" for r in self._results.values()
        )
        used = sorted({r.channel for r in self._results.values() if r.attempt_token})
        extra: list[SearchAttributeUpdate[Any]] = [
            OUTCOME.value_set(outcome),
            CHANNELS_USED.value_set(used),
        ]
        self._set_phase(Phase.FINISHED, state=outcome, extra=extra, details=f"{outcome}: {reason}")
        return NotificationResult(
            intent_id=self._require_facts().intent_id,
            outcome=outcome,
            channels=list(self._results.values()),
            reason=reason,
        )

    # --- operators -----------------------------------------------------------------

    async def _cancel(
        self, request: CancelRequest, *, requested_in_temporal: bool = False
    ) -> CancelResult:
        if self._cancelled:
            return CancelResult(True, message="already cancelled")
        # Closed at once; only the ledger record waits for the intent to be loaded.
        self._cancelled = True
        # Not "cancelled by <operator>": the request's operator is only a claim until the
        # ledger activity checks its proof; the ledger names who it was.
        self._cancel_reason = f"cancelled: {request.reason}".strip(": ")
        closed = [self._phase]
        # A receipt may settle an attempt while its submit activity is still running
        # (accept-then-timeout): what the receipt said wins over "still submitting".
        submitted = self._in_flight | {
            t
            for t, s in self._attempt_states.items()
            if s in (AttemptState.SUBMITTED.value, AttemptState.SENT.value)
        }
        in_flight = sorted(t for t in submitted if not self._settled(t))
        delivered = sorted(
            t for t, s in self._attempt_states.items() if s == AttemptState.DELIVERED.value
        )
        message = "future work closed"
        if in_flight:
            message += "; already-submitted messages are not recalled, only no longer followed"
        if delivered:
            message += "; already-delivered messages stay delivered, nothing recalled"
        await self._record_action(
            "cancel",
            request.operator,
            request.reason,
            "accepted",
            {
                "closed": ",".join(closed),
                "in_flight": ",".join(in_flight),
                "delivered": ",".join(delivered),
                "note": message,
            },
            requested_in_temporal=requested_in_temporal,
            role=request.operator_role,
            proof=request.proof,
        )
        return CancelResult(True, closed, in_flight, message, delivered=delivered)

    def _resend_refusal(self, request: ResendRequest) -> str | None:
        result = self._results.get(request.channel)
        latest = (
            operator_requests.Latest(result.attempt_token, result.state, result.error_code)
            if result is not None and result.attempt_token is not None
            else None
        )
        return operator_requests.resend_refusal(
            request.channel,
            latest,
            cancelled=self._cancelled,
            in_flight=request.channel in {keys.channel_of_token(t) for t in self._in_flight},
            standing=self._standing(latest.token if latest else None),
        )

    async def _accept_resend(self, request: ResendRequest) -> ResendResult:
        result = self._results[request.channel]
        self._resend = request
        await self._record_action(
            "approve-resend",
            request.operator,
            request.reason,
            "accepted",
            {"channel": request.channel, "after": f"{result.attempt_token}={result.state}"},
            role=request.operator_role,
            proof=request.proof,
            subject=request.channel,
        )
        return ResendResult(True, "a new attempt will be authorized", result.attempts + 1)

    async def _record_action(
        self,
        action: str,
        operator: str,
        reason: str,
        outcome: str,
        detail: dict[str, str],
        *,
        requested_in_temporal: bool = False,
        role: str = "",
        proof: str = "",
        subject: str = "",
        at: datetime | None = None,
    ) -> None:
        """Record an operator's action in the ledger at `at` (default now, in workflow
        time: when the request was taken, before what it causes runs)."""
        requested_at = (at or workflow.now()).isoformat()
        await workflow.wait_condition(lambda: self._facts is not None)
        await workflow.execute_activity(
            RECORD_OPERATOR_ACTION,
            OperatorActionInput(
                self._require_facts().intent_id,
                action,
                operator,
                reason,
                outcome,
                detail,
                requested_in_temporal=requested_in_temporal,
                operator_role=role,
                proof=proof,
                subject=subject,
                requested_at=requested_at,
            ),
            start_to_close_timeout=ACTIVITY_TIMEOUT,
            retry_policy=LEDGER_RETRY,
            # The operator's name is left out: the summary shows in every list of events.
            summary=f"record {action} ({outcome})"
            + (" requested in Temporal" if requested_in_temporal else ""),
        )

    # --- small pieces --------------------------------------------------------------

    def _standing(self, token: str | None) -> settlement.Standing | None:
        held = self._settlements.get(token or "")
        return settlement.Standing(held.rule, held.resend_allowed) if held else None

    def _observe(self, token: str, state: str, error_code: str | None = None) -> None:
        current = AttemptState(self._attempt_states.get(token, AttemptState.PREPARED.value))
        transition = states.apply(
            current, AttemptState(state), current_by_operator=token in self._settlements
        )
        if transition.verdict == states.Verdict.REPLACES_SETTLEMENT:
            # The provider's own terminal replaces the operator's settlement.
            del self._settlements[token]
            self._operator_news = True
        if transition.changed:
            self._attempt_states[token] = transition.state.value
            if error_code:
                self._error_codes[token] = error_code
            # The result whose attempt this is (a token of another intent matches none).
            for result in self._results.values():
                if result.attempt_token == token:
                    result.state = transition.state.value
                    result.error_code = self._error_codes.get(token)

    def _settled(self, token: str) -> bool:
        return states.is_terminal(
            AttemptState(self._attempt_states.get(token, AttemptState.PREPARED.value))
        )

    async def _wait(self, until: datetime, extra=None, *, summary: str) -> None:  # type: ignore[no-untyped-def]
        """Durable wait until `until`, woken early by a cancel (or `extra`); `summary` is
        the timer's, as the Web UI shows it."""
        remaining = (until - workflow.now()).total_seconds()
        if remaining <= 0:
            return
        try:
            await workflow.wait_condition(
                lambda: self._cancelled or (extra is not None and extra()),
                timeout=timedelta(seconds=remaining),
                timeout_summary=summary,
            )
        except TimeoutError:
            pass

    def _expired(self) -> bool:
        facts = self._require_facts()
        return facts.expires_at is not None and workflow.now() >= facts.expires_at

    def _set_phase(
        self,
        phase: Phase,
        *,
        details: str,
        channel: str | None = None,
        state: str | None = None,
        extra: list[SearchAttributeUpdate[Any]] | None = None,
    ) -> None:
        self._phase = show_phase(phase, details=details, channel=channel, state=state, extra=extra)

    def _outcome(self) -> str:
        results = list(self._results.values())
        denied = bool(results) and results[-1].state == ChannelEnd.DENIED.value
        return intents.derive_intent_state(
            attempt_states=[AttemptState(s) for s in self._attempt_states.values()],
            last_decision=Outcome.DENY if denied else None,
            cancelled=self._cancelled,
            expired=any(r.state == ChannelEnd.EXPIRED.value for r in results),
            scheduled=False,
        ).value

    def _history_is_long(self) -> bool:
        info = workflow.info()
        limit = self._require_facts().continue_as_new_after_events
        # The length limit (a test and tuning hook) applies to the first run only, so a
        # fresh run that starts above it does not continue as new again at once.
        return info.is_continue_as_new_suggested() or (
            limit > 0 and not self._continued and info.get_current_history_length() > limit
        )

    def _carry(self, resend_until: datetime | None) -> CarriedState:
        return CarriedState(
            results=list(self._results.values()),
            attempt_states=dict(self._attempt_states),
            error_codes=dict(self._error_codes),
            resend_until=resend_until,
            settle_until=self._settle_until,
            settlements=dict(self._settlements),
            settlement_rules=list(self._settle_rules),
            lookups=dict(self._lookups),
        )

    def _restore(self, carried: CarriedState) -> None:
        self._results = {r.channel: r for r in carried.results}
        self._attempt_states = dict(carried.attempt_states)
        self._error_codes = dict(carried.error_codes)
        self._settle_until = carried.settle_until
        self._settlements = dict(carried.settlements)
        self._settle_rules = list(carried.settlement_rules)
        self._lookups = dict(carried.lookups)

    def _require_facts(self) -> IntentFacts:
        assert self._facts is not None
        return self._facts


def _answer_of(outcome: SubmitOutcome) -> tuple[failover.Answer, failover.Lookup]:
    """The failover class of a submit's outcome, and what a lookup found."""
    lookup = failover.Lookup(outcome.lookup) if outcome.lookup else failover.Lookup.PENDING
    if outcome.answer:
        return failover.Answer(outcome.answer), lookup
    if outcome.state == AttemptState.FAILED.value:
        return failover.Answer.REFUSED_FOR_DESTINATION, lookup
    if outcome.state == AttemptState.UNKNOWN.value:
        # The transport window closed with the outcome open: nobody said "not there".
        return failover.Answer.AMBIGUOUS, lookup
    return failover.Answer.ACCEPTED, lookup
