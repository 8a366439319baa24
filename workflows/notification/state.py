"""What a notification run holds (the intent's durable state, which continue-as-new
carries whole, and the run's transient own), and the small reads and writes of it every
step uses: an attempt's observed state (through domain.states), the phase, durable waits,
the outcome. The steps are the rooms beside it: `attempt.py` (authorize, submit, follow),
`operators.py` (the operator window, cancel, resend, settle) and `workflow.py` (the
messages and the life of one intent)."""

from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        CarriedState,
        ChannelResult,
        IntentFacts,
        ResendRequest,
    )
    from domain import (
        intents,
        settlement,
        states,
    )
    from domain.channels import ChannelEnd
    from domain.policy import Outcome
    from domain.states import AttemptState
    from workflows.notification.web_ui import (
        Phase,
        show_phase,
    )


class Transient:
    """What one run holds for itself only: continue-as-new carries none of it. A run
    continues as new only from the operator window, with nothing in flight and no
    accepted resend or cancel left to carry out (operators.py); the next run loads the
    intent's facts again (a cancel among them) and starts its waits, and says so in the
    ledger, afresh.

    A plain class, not a dataclass: the sandbox imports this module afresh for every run,
    and building a dataclass costs milliseconds of CPU each time."""

    def __init__(self) -> None:
        self.facts: IntentFacts | None = None
        self.phase: str = Phase.STARTING.value
        self.cancelled = False
        self.cancel_reason = ""
        self.in_flight: set[str] = set()
        """Attempt tokens whose submit activity is running."""
        self.resend: ResendRequest | None = None
        """An accepted approve-resend the operator window has yet to run."""
        self.continued = False
        """This run was continued as new (the history-length hook applies to the first)."""
        self.operator_news = False
        """A settlement (or a lookup that settled an attempt) the waiting loop must weigh."""
        self.busy_settling = False
        self.awaiting = ""
        """What the ledger was last told this run waits for (settlement, resend, or "")."""
        self.awaiting_until: datetime | None = None
        self.stopped_by: dict[str, str] = {}
        """Why observing an attempt stopped unresolved (horizon, fallback, expiry, cancel)."""
        self.move_asked = False
        """An operator asked this run to move to the current build (MOVE_TO_CURRENT_BUILD)."""


class IntentRun:
    """The state of one run; the workflow class is its steps over it.

    `_durable` is the intent's state that outlives a run: the channels' results, the
    attempts' states, the settlement window and what operators settled or looked up. It
    is what continue-as-new carries, whole (activities.contracts.CarriedState), so nothing
    can be left behind. `_transient` is this run's own (Transient)."""

    def __init__(self) -> None:
        self._durable = CarriedState()
        self._transient = Transient()

    def _result(self, channel: str) -> ChannelResult | None:
        """The channel's latest result."""
        return next((r for r in self._durable.results if r.channel == channel), None)

    def _keep_result(self, result: ChannelResult) -> None:
        """`result` replaces the channel's latest in its place, or comes after the others."""
        results = self._durable.results
        for index, kept in enumerate(results):
            if kept.channel == result.channel:
                results[index] = result
                return
        results.append(result)

    def _standing(self, token: str | None) -> settlement.Standing | None:
        held = self._durable.settlements.get(token or "")
        return settlement.Standing(held.rule, held.resend_allowed) if held else None

    def _observe(self, token: str, state: str, error_code: str | None = None) -> None:
        current = AttemptState(self._durable.attempt_states.get(token, AttemptState.PREPARED.value))
        transition = states.apply(
            current, AttemptState(state), current_by_operator=token in self._durable.settlements
        )
        if transition.verdict == states.Verdict.REPLACES_SETTLEMENT:
            # The provider's own terminal replaces the operator's settlement.
            del self._durable.settlements[token]
            self._transient.operator_news = True
        if transition.changed:
            self._durable.attempt_states[token] = transition.state.value
            if error_code:
                self._durable.error_codes[token] = error_code
            # The result whose attempt this is (a token of another intent matches none).
            for result in self._durable.results:
                if result.attempt_token == token:
                    result.state = transition.state.value
                    result.error_code = self._durable.error_codes.get(token)

    def _settled(self, token: str) -> bool:
        return states.is_terminal(
            AttemptState(self._durable.attempt_states.get(token, AttemptState.PREPARED.value))
        )

    async def _wait(self, until: datetime, extra=None, *, summary: str) -> None:  # type: ignore[no-untyped-def]
        """Durable wait until `until`, woken early by a cancel (or `extra`); `summary` is
        the timer's, as the Web UI shows it."""
        remaining = (until - workflow.now()).total_seconds()
        if remaining <= 0:
            return
        try:
            await workflow.wait_condition(
                lambda: self._transient.cancelled or (extra is not None and extra()),
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
        self._transient.phase = show_phase(
            phase, details=details, channel=channel, state=state, extra=extra
        )

    def _outcome(self) -> str:
        results = self._durable.results
        denied = bool(results) and results[-1].state == ChannelEnd.DENIED.value
        return intents.derive_intent_state(
            attempt_states=[AttemptState(s) for s in self._durable.attempt_states.values()],
            last_decision=Outcome.DENY if denied else None,
            cancelled=self._transient.cancelled,
            expired=any(r.state == ChannelEnd.EXPIRED.value for r in results),
            scheduled=False,
        ).value

    def _history_is_long(self) -> bool:
        info = workflow.info()
        limit = self._require_facts().continue_as_new_after_events
        # The length limit (a test and tuning hook) applies to the first run only, so a
        # fresh run that starts above it does not continue as new again at once.
        return info.is_continue_as_new_suggested() or (
            limit > 0
            and not self._transient.continued
            and info.get_current_history_length() > limit
        )

    def _require_facts(self) -> IntentFacts:
        assert self._transient.facts is not None
        return self._transient.facts

    def _latest_token(self, channel: str) -> str | None:
        result = self._result(channel)
        return result.attempt_token if result is not None else None

    def _unsettled_tokens(self) -> list[str]:
        """The latest attempt of each channel when it is unknown and nobody settled it."""
        return [
            r.attempt_token
            for r in self._durable.results
            if r.attempt_token
            and self._durable.attempt_states.get(r.attempt_token) == AttemptState.UNKNOWN.value
        ]

    async def _run_channel(self, channel: str, number: int = 1) -> ChannelResult:
        """One channel's attempt, as the plan or an approved resend runs it (workflow.py)."""
        raise NotImplementedError
