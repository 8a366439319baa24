"""The intent state, derived from attempts and decisions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.intents import IntentState, derive_intent_state
from domain.policy import Outcome
from domain.states import AttemptState

S = AttemptState
I = IntentState  # noqa: E741


def derive(
    *states: S,
    decision: Outcome | None = None,
    cancelled: bool = False,
    expired: bool = False,
    scheduled: bool = False,
) -> IntentState:
    return derive_intent_state(
        attempt_states=list(states),
        last_decision=decision,
        cancelled=cancelled,
        expired=expired,
        scheduled=scheduled,
    )


def test_a_new_intent_is_pending_or_scheduled() -> None:
    assert derive() == I.PENDING
    assert derive(scheduled=True) == I.SCHEDULED


def test_a_cancel_after_a_delivery_still_reads_delivered() -> None:
    assert derive(S.DELIVERED, cancelled=True) == I.DELIVERED
    assert derive(S.DELIVERED, expired=True) == I.DELIVERED


def test_a_delivered_email_after_a_failed_sms_reads_delivered() -> None:
    assert derive(S.FAILED, S.DELIVERED, decision=Outcome.ALLOW) == I.DELIVERED


def test_a_cancel_cannot_recall_a_message_the_provider_accepted() -> None:
    assert derive(S.SUBMITTED, cancelled=True) == I.SENDING
    assert derive(S.SENT, cancelled=True) == I.SENT
    assert derive(S.UNKNOWN, cancelled=True) == I.UNKNOWN


def test_a_prepared_attempt_that_was_cancelled_reads_cancelled() -> None:
    assert derive(S.PREPARED, decision=Outcome.ALLOW) == I.SENDING
    assert derive(S.PREPARED, decision=Outcome.ALLOW, cancelled=True) == I.CANCELLED
    assert derive(S.CANCELLED) == I.CANCELLED


def test_policy_outcomes_without_attempts() -> None:
    assert derive(decision=Outcome.DENY) == I.DENIED
    assert derive(decision=Outcome.DEFER, scheduled=True) == I.DEFERRED
    assert derive(decision=Outcome.DENY, expired=True) == I.EXPIRED


def test_a_deferred_fallback_after_a_failed_sms_reads_deferred() -> None:
    assert derive(S.FAILED, decision=Outcome.DEFER) == I.DEFERRED


def test_a_failed_sms_with_a_denied_email_reads_failed() -> None:
    assert derive(S.FAILED, decision=Outcome.DENY) == I.FAILED
    assert derive(S.UNDELIVERED, S.FAILED, decision=Outcome.DENY) == I.UNDELIVERED


@given(
    states=st.lists(st.sampled_from(list(AttemptState)), max_size=4),
    decision=st.none() | st.sampled_from(list(Outcome)),
    cancelled=st.booleans(),
    expired=st.booleans(),
    scheduled=st.booleans(),
)
def test_any_delivered_attempt_wins_and_order_never_matters(
    states: list[S], decision: Outcome | None, cancelled: bool, expired: bool, scheduled: bool
) -> None:
    forward = derive(
        *states, decision=decision, cancelled=cancelled, expired=expired, scheduled=scheduled
    )
    backward = derive(
        *reversed(states),
        decision=decision,
        cancelled=cancelled,
        expired=expired,
        scheduled=scheduled,
    )
    assert forward == backward
    assert (forward == I.DELIVERED) == (S.DELIVERED in states)


@pytest.mark.parametrize("state", list(IntentState))
def test_every_intent_state_is_reachable(state: IntentState) -> None:
    examples = {
        I.PENDING: derive(),
        I.SCHEDULED: derive(scheduled=True),
        I.DEFERRED: derive(decision=Outcome.DEFER),
        I.SENDING: derive(S.SUBMITTED),
        I.DELIVERED: derive(S.DELIVERED),
        I.SENT: derive(S.SENT),
        I.UNDELIVERED: derive(S.UNDELIVERED),
        I.FAILED: derive(S.FAILED),
        I.UNKNOWN: derive(S.UNKNOWN),
        I.CANCELLED: derive(cancelled=True),
        I.DENIED: derive(decision=Outcome.DENY),
        I.EXPIRED: derive(expired=True),
    }
    assert examples[state] == state


def test_the_ledger_reads_an_intent_past_its_expiry_as_expired_only_if_nothing_was_tried():
    """`ledger.listing.derived_state`, the one reading of the ledger's facts behind every
    list, count and metric by state: an attempt's own outcome says more than the expiry."""
    from ledger.listing import derived_state

    def read(*states: str, past_expiry: bool) -> IntentState:
        return derived_state(
            states, None, cancelled=False, past_expiry=past_expiry, scheduled=False
        )

    assert read(past_expiry=True) == I.EXPIRED
    assert read("failed", past_expiry=True) == I.FAILED
    assert read("delivered", past_expiry=True) == I.DELIVERED
    assert read(past_expiry=False) == I.PENDING
