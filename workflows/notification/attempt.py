"""The attempts on a channel, one path for one provider or several (a single provider
is a failover list of one): each try authorized by the policy (a deferral waits), handed
to a provider (the next one after a definitive provider-side refusal, a deferral while
every one refuses for its own reasons), then followed by receipts and polls, or by the
provider's events, until it settles or the horizon passes."""

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        PERMANENT_ERRORS,
        AuthorizeInput,
        AuthorizeResult,
        ChannelResult,
        ErrorType,
        IntentFacts,
        PollInput,
        PollOutcome,
        SubmitInput,
        SubmitOutcome,
        VerdictInput,
    )
    from domain import (
        clocks,
        failover,
        states,
    )
    from domain import providers as providers_domain
    from domain.channels import Channel, ChannelEnd
    from domain.policy import Outcome
    from domain.states import AttemptState
    from workflows.notification.options import (
        ACTIVITY_TIMEOUT,
        ALL_REFUSED_WAIT,
        AUTHORIZE,
        AUTHORIZE_RETRY,
        LEDGER_RETRY,
        MAX_REFUSED_WAIT,
        MIN_DEFER,
        RECORD_VERDICT,
        SEND_HEARTBEAT_TIMEOUT,
        SUBMIT_RETRY,
        channel_of,
        queue_of,
    )
    from workflows.notification.web_ui import (
        Phase,
        minutes,
        utc,
    )

from workflows.notification.state import IntentRun


class Attempting(IntentRun):
    """The attempt path of the notification workflow."""

    def _why(self, channel: str, number: int) -> str:
        """Why this attempt is made, for summaries: a fallback, a resend, or the plan."""
        if number > 1:
            return f", resend approved after {channel} #{number - 1}"
        earlier = [r for r in self._durable.results if r.channel != channel]
        if earlier and self._require_facts().mode == "fallback":
            last = earlier[-1]
            return f", fallback after {last.channel} {last.state}"
        return ""

    async def _attempt(self, channel: str, number: int) -> ChannelResult:
        """Attempts on `channel` until one is followed to its end, or the channel ends
        without one: each try is its own attempt (`<key>:sms:<n>`, its own token),
        authorized by the policy, handed to a provider, then followed.

        One provider is a failover list of one (domain.failover): a definitive
        provider-side refusal hands the channel to the next provider the policy routes it
        to, or (none left, or failover forbidden) defers until one may take work again and
        tries again as a new attempt; the business expiry ends the channel `expired`
        (nothing was sent). When the policy routes the channel to more than one provider,
        each try is named for its provider (`sms #2 via telnyx`) and runs on that
        provider's own queue; a deferral then tries the whole list again with the first
        provider, where a single provider's is asked of the policy afresh."""
        spec = channel_of(channel)
        facts = self._require_facts()
        why = self._why(channel, number)
        auth = await self._authorize_plan(spec, number, why)
        if isinstance(auth, ChannelResult):
            return auth
        providers, routed = _route(spec, auth)
        run = failover.ChannelRun(providers, failover_allowed=auth.failover, first_number=number)
        moved_on: list[str] = []
        retry_at: list[datetime] = []
        at_least = timedelta(0)
        while True:
            token = auth.attempt_token
            assert token is not None
            provider = auth.provider or run.current.provider
            label = f"{channel} #{number} via {provider}" if routed else f"{channel} #{number}"
            self._durable.attempt_states[token] = AttemptState.PREPARED.value
            base = ChannelResult(
                channel,
                AttemptState.PREPARED.value,
                auth.reason,
                token,
                attempts=number,
                policy_version=auth.policy_version,
                rule=auth.rule,
            )
            # Each provider's own queue (its own rate budget, enforced by the server) when
            # there are several; the channel's otherwise.
            queue = (
                providers_domain.provider_task_queue(spec, workflow.info().task_queue, provider)
                if routed
                else queue_of(spec)
            )
            self._set_phase(
                Phase.SUBMITTING, channel=channel, details=f"handing {label} to the provider{why}"
            )
            self._transient.in_flight.add(token)
            try:
                outcome = await self._submit(
                    spec,
                    token,
                    facts,
                    summary=f"{label}{why}",
                    # With failover allowed, a try hands a definitive provider-side refusal
                    # back at once: to the next provider, or (the last) to a deferral.
                    failover_allowed=routed and auth.failover,
                    task_queue=queue,
                )
            finally:
                self._transient.in_flight.discard(token)
            self._observe(token, outcome.state, outcome.error_code)
            base.remote_id = outcome.remote_id
            if outcome.reason:
                base.reason = outcome.reason
            answer, lookup = _answer_of(outcome)
            refusal = _refusal(provider, outcome, answer, routed=routed)
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
                    spec,
                    retry_at,
                    number,
                    refusal,
                    at_least,
                    moved_on,
                    who="every provider" if routed else "the provider",
                )
                if ended is not None:
                    return ended
                number += 1
                retry_at = []
                if routed:
                    moved_on.append(refusal)
                    run = failover.ChannelRun(
                        providers, failover_allowed=auth.failover, first_number=number
                    )
                    next_auth = await self._authorize_failover(
                        spec, number, providers[0], "every provider refused; trying again"
                    )
                else:
                    why = f", after {refusal}"
                    next_auth = await self._authorize_plan(spec, number, why)
                if isinstance(next_auth, ChannelResult):
                    return next_auth
                auth = next_auth
                if not routed:
                    providers, routed = _route(spec, auth)
                    if routed:
                        at_least = timedelta(0)  # a new list of providers: its own floor
                    run = failover.ChannelRun(
                        providers, failover_allowed=auth.failover, first_number=number
                    )
                continue
            break
        await self._follow(spec, token, facts, label, queue)
        base.state = self._durable.attempt_states[token]
        base.error_code = self._durable.error_codes.get(token)
        if base.state == AttemptState.UNKNOWN.value and not base.reason:
            base.reason = "no final status before the polling horizon"
        if moved_on:
            base.reason = "; ".join([*moved_on, f"sent through {provider}: {base.reason}"])
        return base

    async def _follow(
        self, spec: Channel, token: str, facts: IntentFacts, label: str, queue: str | None
    ) -> None:
        """Follow a handed-over attempt until it settles: by receipts and polls (on the
        queue it was sent on), or by the provider's events (a channel without polls)."""
        state = self._durable.attempt_states[token]
        if spec.poll_activity is not None:
            if not states.is_terminal(AttemptState(state)) and state != AttemptState.UNKNOWN:
                await self._observe_attempt(spec, token, facts, label, task_queue=queue)
        elif state == AttemptState.SUBMITTED:
            await self._await_events(spec, token, facts, label)

    async def _wait_for_providers(
        self,
        spec: Channel,
        retry_at: list[datetime],
        number: int,
        refusal: str,
        at_least: timedelta,
        moved_on: list[str],
        *,
        who: str,
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
        if self._transient.cancelled:
            reason = self._transient.cancel_reason or "cancelled"
            return ChannelResult(
                spec.name, ChannelEnd.CANCELLED.value, reason, attempts=number
            ), next_floor
        if self._expired():
            return ChannelResult(
                spec.name,
                ChannelEnd.EXPIRED.value,
                "; ".join([*moved_on, refusal])
                + f"; {who} refused until the business expiry; nothing was sent",
                attempts=number,
            ), next_floor
        return None, next_floor

    async def _authorize_plan(
        self, spec: Channel, number: int, why: str
    ) -> AuthorizeResult | ChannelResult:
        """Authorize the plan's try (or a resend, or a single provider's try after a
        deferral): the policy picks the provider."""
        label = f"{spec.name} #{number}"
        self._set_phase(
            Phase.AUTHORIZING,
            channel=spec.name,
            details=f"asking the policy whether {label} may go{why}",
        )
        return await self._authorized(
            spec,
            number,
            AuthorizeInput(self._require_facts().intent_id, spec.name, number),
            summary=f"authorize {label}{why}",
            label=label,
        )

    async def _authorize_failover(
        self, spec: Channel, number: int, provider: str, reason: str
    ) -> AuthorizeResult | ChannelResult:
        """Authorize the next try with `provider`: the policy is asked again (an opt-out
        received meanwhile, through any provider, still holds)."""
        label = f"{spec.name} #{number} via {provider}"
        return await self._authorized(
            spec,
            number,
            AuthorizeInput(
                self._require_facts().intent_id,
                spec.name,
                number,
                provider=provider,
                failover_reason=reason,
            ),
            summary=f"authorize {label} (failover)",
            label=label,
            failover=True,
        )

    async def _authorized(
        self,
        spec: Channel,
        number: int,
        request: AuthorizeInput,
        *,
        summary: str,
        label: str,
        failover: bool = False,
    ) -> AuthorizeResult | ChannelResult:
        """Ask the policy until it allows the attempt (`request`), or the channel's end: a
        denial, the intent closed meanwhile, or (the plan's own try) a permanent problem
        preparing it. A deferral waits until eligible, bounded by the business expiry;
        backpressure is data.

        A failover try keeps what it always did (#52 changed no command): its deferral
        says nothing new in the Web UI, and a problem preparing it fails the run."""
        facts = self._require_facts()
        channel = spec.name
        while True:
            if self._transient.cancelled:
                return ChannelResult(
                    channel,
                    ChannelEnd.CANCELLED.value,
                    self._transient.cancel_reason or "cancelled",
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
                auth = await self._authorize(request, summary=summary)
            except ApplicationError as err:
                if failover:
                    raise
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
                return auth
            if not failover:
                self._set_phase(
                    Phase.DEFERRED, channel=channel, details=f"{label} deferred by policy"
                )
            until = max(
                auth.next_eligible_at or workflow.now() + timedelta(minutes=1),
                workflow.now() + MIN_DEFER,
            )
            if facts.expires_at is not None:
                until = min(until, facts.expires_at)
            if not failover:
                workflow.set_current_details(
                    f"{label} deferred by policy ({auth.rule}) until {utc(until)}"
                )
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
            if self._transient.cancelled:
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
            if self._settled(token) or self._transient.cancelled or workflow.now() >= horizon:
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
            self._transient.stopped_by[token] = source
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
            if self._transient.cancelled
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


def _route(spec: Channel, auth: AuthorizeResult) -> tuple[list[str], bool]:
    """The providers a channel's tries walk, in order, and whether the policy routes it to
    more than one (then each try is named for its provider and runs on its own queue)."""
    if spec.fails_over and len(auth.providers) > 1:
        return list(auth.providers), True
    return [auth.provider or spec.name], False


def _refusal(
    provider: str, outcome: SubmitOutcome, answer: failover.Answer, *, routed: bool
) -> str:
    """What a provider refused (or lost), as the next try's summary and the channel's
    reason say it; a single provider's refusal is one line of at most 200 characters."""
    if answer == failover.Answer.AMBIGUOUS:
        return f"{provider} lost the answer and does not hold it ({outcome.reason})"
    refusal = f"{provider} refused: {outcome.error_code or ''} {outcome.reason}"
    return refusal.strip() if routed else " ".join(refusal.split())[:200]
