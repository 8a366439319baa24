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

    async def _operator_window(self) -> None:
        """Stay open while an operator may still act, and say so in the ledger. An unknown
        attempt waits for a settlement until the settlement window closes (then it is
        recorded as expired unsettled); a retryable failure, or a settlement whose rule
        allows it, waits for an approve-resend until the resend window closes.

        This is where an intent can live long (resend after resend), so it is where the
        workflow continues as new when the history grows long, carrying its state."""
        facts = self._require_facts()
        kept, this_run = self._durable, self._transient

        def resend_end() -> datetime:
            end = workflow.now() + timedelta(seconds=facts.resend_window_seconds)
            return min(end, facts.expires_at) if facts.expires_at is not None else end

        expired_recorded: set[str] = set()
        while not this_run.cancelled:
            now = workflow.now()
            unsettled = self._unsettled_tokens()
            open_settle = bool(unsettled) and (
                kept.settle_until is not None and now < kept.settle_until
            )
            if unsettled and not open_settle:
                expired = [t for t in unsettled if t not in expired_recorded]
                if expired:
                    expired_recorded.update(expired)
                    await self._record_waiting(None, None, [], expired_unsettled=expired)
            resendable = [
                r
                for r in kept.results
                if self._resend_refusal(ResendRequest(channel=r.channel)) is None
            ]
            if resendable and kept.resend_until is None:
                kept.resend_until = resend_end()
            open_resend = (
                bool(resendable) and kept.resend_until is not None and now < kept.resend_until
            )
            if not open_settle and not open_resend:
                break
            kind, until = (
                ("settlement", kept.settle_until) if open_settle else ("resend", kept.resend_until)
            )
            assert until is not None
            if open_settle and open_resend and kept.resend_until is not None:
                until = min(until, kept.resend_until)
            if (kind, until) != (this_run.awaiting, this_run.awaiting_until):
                await self._record_waiting(kind, until, unsettled if open_settle else [])
            waiting = ", ".join(
                f"{r.channel} #{r.attempts} {r.state}"
                for r in kept.results
                if r.attempt_token in unsettled or r in resendable
            )
            action = "a settlement (settle)" if open_settle else "an approve_resend"
            if open_settle and open_resend:
                action = "a settlement or an approve_resend"
            self._set_phase(
                Phase.AWAITING_OPERATOR,
                details=f"{waiting}; open for {action} until {utc(until)}",
            )
            if self._history_is_long() and await self._nothing_left_to_carry_out():
                workflow.continue_as_new(NotificationInput(facts.intent_id, kept))
            if this_run.move_asked and this_run.resend is None:
                # Asked stays set while a request is carried out first: the move follows.
                if not workflow.info().is_target_worker_deployment_version_changed():
                    this_run.move_asked = False
                elif await self._nothing_left_to_carry_out():
                    workflow.continue_as_new(
                        NotificationInput(facts.intent_id, kept),
                        initial_versioning_behavior=(
                            workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE
                        ),
                    )
            this_run.operator_news = False
            await self._wait(
                until,
                extra=lambda: (
                    this_run.resend is not None or this_run.operator_news or this_run.move_asked
                ),
                summary=f"{kind} window until {utc(until)}",
            )
            request, this_run.resend = this_run.resend, None
            if request is not None:
                previous = self._result(request.channel)
                assert previous is not None  # a resend is accepted only after a result
                await self._run_channel(request.channel, previous.attempts + 1)
                kept.resend_until = None  # a new attempt opens its own resend window
        if this_run.awaiting:
            await self._record_waiting(None, None, [])

    async def _nothing_left_to_carry_out(self) -> bool:
        """Wait until no handler is left running, then say whether this run may continue
        as new: not while an operator's request it accepted is still to be carried out.
        An approve-resend or a cancel is accepted (the operator is told yes, the ledger
        records it) while its handler runs, so one can land during this very wait; the
        run's Transient is not carried, and a new run would start its waits afresh: the
        resend never run, the ledger still told the intent waits. So this run carries
        the request out first (the window's wait returns at once for it): a resend runs
        once, then the run continues as new at the next turn; a cancel closes the window
        it was taken in and tells the ledger the run no longer waits.

        Not by carrying the request in CarriedState: this branch is taken only where the
        request used to be lost, so no recorded history takes it and every one replays
        unchanged, and the carried state keeps to the intent's own (no request an older
        run accepted and recorded)."""
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self._transient.resend is None and not self._transient.cancelled

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
        self._transient.awaiting, self._transient.awaiting_until = (
            awaiting or "",
            until if awaiting else None,
        )
        if awaiting == "settlement":
            self._durable.settlement_rules = list(facts.settlement_rules)

    def _settle_refusal(self, request: SettleRequest) -> str | None:
        token = self._latest_token(request.channel)
        return operator_requests.settle_refusal(
            request.channel,
            settlement.SettlementClaim(
                request.rule,
                request.reason,
                request.reference,
                self._durable.lookups.get(token or ""),
            ),
            token=token,
            offered=[
                settlement.SettlementRule(
                    r.name,
                    settlement.SettlementOutcome(r.outcome),
                    settlement.Evidence(r.evidence),
                    r.resend_allowed,
                )
                for r in self._durable.settlement_rules
            ],
            current=AttemptState(
                self._durable.attempt_states.get(token or "", AttemptState.PREPARED.value)
            ),
            current_by_operator=token in self._durable.settlements,
            busy=self._transient.busy_settling,
            now=workflow.now(),
            window_until=self._durable.settle_until,
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
                self._durable.settle_until,
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
        self._durable.attempt_states[token] = recorded.state
        self._durable.settlements[token] = SettlementStanding(
            recorded.rule, recorded.resend_allowed
        )
        result = self._result(request.channel)
        assert result is not None  # the validator refused the rest
        result.state = recorded.state
        result.reason = f"settled under {recorded.rule} by {recorded.operator}"
        self._transient.operator_news = True
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
        if self._transient.cancelled:
            return CancelResult(True, message="already cancelled")
        # Closed at once; only the ledger record waits for the intent to be loaded.
        self._transient.cancelled = True
        # Not "cancelled by <operator>": the request's operator is only a claim until the
        # ledger activity checks its proof; the ledger names who it was.
        self._transient.cancel_reason = f"cancelled: {request.reason}".strip(": ")
        closed = [self._transient.phase]
        # A receipt may settle an attempt while its submit activity is still running
        # (accept-then-timeout): what the receipt said wins over "still submitting".
        submitted = self._transient.in_flight | {
            t
            for t, s in self._durable.attempt_states.items()
            if s in (AttemptState.SUBMITTED.value, AttemptState.SENT.value)
        }
        in_flight = sorted(t for t in submitted if not self._settled(t))
        delivered = sorted(
            t for t, s in self._durable.attempt_states.items() if s == AttemptState.DELIVERED.value
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
        result = self._result(request.channel)
        latest = (
            operator_requests.Latest(result.attempt_token, result.state, result.error_code)
            if result is not None and result.attempt_token is not None
            else None
        )
        return operator_requests.resend_refusal(
            request.channel,
            latest,
            cancelled=self._transient.cancelled,
            in_flight=request.channel
            in {keys.channel_of_token(t) for t in self._transient.in_flight},
            standing=self._standing(latest.token if latest else None),
        )

    async def _accept_resend(self, request: ResendRequest) -> ResendResult:
        result = self._result(request.channel)
        assert result is not None  # refused otherwise
        self._transient.resend = request
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
        await workflow.wait_condition(lambda: self._transient.facts is not None)
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
