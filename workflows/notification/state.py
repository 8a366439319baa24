"""What a notification run holds, and the small reads and writes of it every step uses:
an attempt's observed state (through domain.states), the phase, durable waits, the
outcome. The steps are the rooms beside it: `attempt.py` (authorize, submit, follow),
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
        SettlementRuleFacts,
        SettlementStanding,
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


class IntentRun:
    """The state of one run; the workflow class is its steps over it."""

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

    def _latest_token(self, channel: str) -> str | None:
        result = self._results.get(channel)
        return result.attempt_token if result is not None else None

    def _unsettled_tokens(self) -> list[str]:
        """The latest attempt of each channel when it is unknown and nobody settled it."""
        return [
            r.attempt_token
            for r in self._results.values()
            if r.attempt_token
            and self._attempt_states.get(r.attempt_token) == AttemptState.UNKNOWN.value
        ]

    async def _run_channel(self, channel: str, number: int = 1) -> ChannelResult:
        """One channel's attempt, as the plan or an approved resend runs it (workflow.py)."""
        raise NotImplementedError
