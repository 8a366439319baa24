"""NotificationWorkflow: the whole life of one notification intent, deterministic.

It carries ids only. Every decision comes from `domain`; every side effect is an
activity that acts on the ledger or a transport and returns a fact. This module is the
class: its messages (signals, updates, the query) and the life of one intent (`run`,
`_life`); each step it takes is in the room named for it: `attempt.py` (authorize,
submit, follow), `operators.py` (the operator window), `state.py` (what the run holds).
"""

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate, VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        MOVE_TO_CURRENT_BUILD,
        CancelRequest,
        CancelResult,
        ChannelResult,
        IntentFacts,
        LoadIntentInput,
        LookupInput,
        LookupRequest,
        LookupResult,
        NotificationInput,
        NotificationResult,
        Projection,
        ReceiptSignal,
        ResendRequest,
        ResendResult,
        SettleRequest,
        SettleResult,
    )
    from domain import (
        channels,
        fallback,
        settlement,
    )
    from domain.states import AttemptState
    from workflows.notification.options import (
        ACTIVITY_TIMEOUT,
        LEDGER_RETRY,
        LOAD_INTENT,
        LOOKUP_WINDOW,
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
        utc,
    )

from workflows.notification.attempt import Attempting
from workflows.notification.operators import OperatorWindow

# Operator actions: the name of both the signal and the update.
CANCEL = "cancel"
APPROVE_RESEND = "approve_resend"
SETTLE = "settle"
LOOKUP = "lookup"

TEMPORAL_CANCEL_OPERATOR = "temporal"
"""The operator a cancel requested through Temporal (Web UI, `temporal workflow cancel`) is
recorded under; the ledger activity adds the request's identity from the history."""


# Pinned: a run lives its whole life on the build that started it, so a new build may
# change the workflow's commands freely; a run waiting for an operator may move to the
# current build when asked (MOVE_TO_CURRENT_BUILD; docs/operations.md, "Deploying a new
# build").
@workflow.defn(versioning_behavior=VersioningBehavior.PINNED)
class NotificationWorkflow(Attempting, OperatorWindow):
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
        self._transient.busy_settling = True
        try:
            return await self._settle(request)
        finally:
            self._transient.busy_settling = False

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
        self._durable.lookups[token] = workflow.now()
        if result.state:
            before = self._durable.attempt_states.get(token)
            self._observe(token, result.state)
            self._transient.operator_news = (
                self._transient.operator_news or before != self._durable.attempt_states.get(token)
            )
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
        if self._durable.settle_until is None:
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
        self._transient.move_asked = True

    @workflow.query
    def projection(self) -> Projection:
        return Projection(
            intent_id=self._transient.facts.intent_id if self._transient.facts else "",
            phase=self._transient.phase,
            cancelled=self._transient.cancelled,
            channels=list(self._durable.results),
            attempt_states=dict(self._durable.attempt_states),
            awaiting=self._transient.awaiting,
            awaiting_until=self._transient.awaiting_until,
            settlements=dict(self._durable.settlements),
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
        self._transient.facts = facts
        for name in facts.channels:
            channel_of(name)
        self._transient.cancelled = self._transient.cancelled or facts.cancelled
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
            self._transient.continued = True
            self._durable = input.carried
            await self._operator_window()
            return await self._finish("")

        if facts.send_at is not None and facts.send_at > workflow.now():
            self._set_phase(
                Phase.SCHEDULED, details=f"scheduled: waiting for send-at {utc(facts.send_at)}"
            )
            await self._wait(facts.send_at, summary=f"until send-at {utc(facts.send_at)}")
        if self._transient.cancelled:
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
        if self._durable.settle_until is not None or any(
            self._resend_refusal(ResendRequest(channel=r.channel)) is None
            for r in self._durable.results
        ):
            await self._operator_window()
        return await self._finish("")

    async def _run_channel(self, channel: str, number: int = 1) -> ChannelResult:
        result = await self._attempt(channel, number)
        self._keep_result(result)
        if (
            result.state == AttemptState.UNKNOWN.value
            and result.attempt_token
            and not self._transient.cancelled
            # The next channel follows a fallback-window or expiry stop: no question to ask.
            and self._transient.stopped_by.get(result.attempt_token)
            not in ("fallback", "expiry", "cancel")
        ):
            # The horizon verdict (or a lost send the lookup could not place) is a
            # question: open the settlement window now and file its review item at once.
            facts = self._require_facts()
            window = facts.settlement_window_seconds or settlement.DEFAULT_WINDOW_SECONDS
            self._durable.settle_until = workflow.now() + timedelta(seconds=window)
            await self._record_waiting(
                "settlement", self._durable.settle_until, [result.attempt_token]
            )
        return result

    def _should_fall_back(self, result: ChannelResult, *, more: bool) -> bool:
        if not more or self._transient.cancelled or self._expired():
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

    async def _finish(self, reason: str) -> NotificationResult:
        """Every business outcome completes the run; the outcome is in the result and in
        HeraldOutcome. A denied or undelivered intent is Herald doing its job (the policy
        said no, the carrier said no), not a run that broke: failing the run would mark it
        red beside real faults, count it in the SDK's workflow-failed metric and drop the
        result payload. Failed runs stay reserved for bugs."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        outcome = self._outcome()
        reason = reason or "; ".join(
            f"{r.channel}: {r.state} ({r.reason})" for r in self._durable.results
        )
        used = sorted({r.channel for r in self._durable.results if r.attempt_token})
        extra: list[SearchAttributeUpdate[Any]] = [
            OUTCOME.value_set(outcome),
            CHANNELS_USED.value_set(used),
        ]
        self._set_phase(Phase.FINISHED, state=outcome, extra=extra, details=f"{outcome}: {reason}")
        return NotificationResult(
            intent_id=self._require_facts().intent_id,
            outcome=outcome,
            channels=list(self._durable.results),
            reason=reason,
        )
