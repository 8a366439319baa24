"""What operators do to a running intent: the window a run stays open in while a person
may still settle an unknown attempt or approve a resend (and where a long-lived run
continues as new), and the cancel, resend and settle they ask for, each recorded in the
ledger. Whether a request is refused is domain.operator_requests' to say."""

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        CancelRequest,
        CancelResult,
        NotificationInput,
        OperatorActionInput,
        ResendRequest,
        ResendResult,
        SettlementInput,
        SettlementRecorded,
        SettlementStanding,
        SettleRequest,
        SettleResult,
        WaitingFacts,
        WaitingInput,
    )
    from domain import (
        keys,
        operator_requests,
        settlement,
    )
    from domain.states import AttemptState
    from workflows.notification.options import (
        ACTIVITY_TIMEOUT,
        LEDGER_RETRY,
        RECORD_OPERATOR_ACTION,
        RECORD_SETTLEMENT,
        RECORD_WAITING,
    )
    from workflows.notification.web_ui import (
        Phase,
        utc,
    )

from workflows.notification.state import IntentRun

SETTLEMENT_REFUSED = "SettlementRefused"
"""The type of the error a `settle` update fails with when the ledger refuses what the
validator let through (it judges by the policy version active when it records). Raised by
the update handler, not by an activity, so it is no `ErrorType`; the run goes on."""


class OperatorWindow(IntentRun):
    """The operator window and actions of the notification workflow."""

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
