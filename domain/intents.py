"""The state of an intent, derived from its attempts and its latest policy decision.

The intent state is never stored as an independent truth: it is a projection, computed
again whenever an attempt or a decision changes, so it can never disagree with them.

Derivation table, first matching row wins:

====  ==============================================================  ============
row   condition                                                        state
====  ==============================================================  ============
1     any attempt ``delivered``                                        delivered
2     any attempt ``sent``                                             sent
3     any attempt ``submitted``                                        sending
4     any attempt ``prepared``, intent neither cancelled nor expired   sending
5     any attempt ``unknown``                                          unknown
6     ``cancelled``, or every attempt ``cancelled`` (and at least one) cancelled
7     ``expired``                                                      expired
8     latest decision ``defer``                                        deferred
9     any attempt ``undelivered``                                      undelivered
10    any attempt ``failed``                                           failed
11    latest decision ``deny``                                         denied
12    ``scheduled`` and no decision yet                                scheduled
13    otherwise                                                        pending
====  ==============================================================  ============

Why this order:

- What reached a person comes first (rows 1-2): a cancel or an expiry after a delivery
  still reads ``delivered``; Herald never claims to recall a message.
- A message the provider accepted is still in flight even after a cancel (row 3): cancel
  closes future work only. The workflow settles such an attempt to ``unknown`` when it
  stops polling, and row 5 then applies.
- ``unknown`` (row 5) outranks cancel and expiry: the person may have received it.
- Cancel and expiry (rows 6-7) are how the intent was closed; they outrank attempt
  failures because a failed SMS with a pending email fallback that an operator then
  cancels is, above all, cancelled. The failures stay visible per attempt.
- A deferral (row 8) outranks earlier failures: after a failed SMS, a deferred email
  means the intent is still working.
- A denial (row 11) ranks below attempt failures: "the SMS failed and email was not
  allowed" reads ``failed``; a denial of the very first channel reads ``denied``.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from domain.policy import Outcome
from domain.states import AttemptState


class IntentState(StrEnum):
    """An intent's state, derived from its attempts, its latest decision and its clocks."""

    PENDING = "pending"
    """Recorded; nothing decided yet."""
    SCHEDULED = "scheduled"
    """Waiting for its ``send_at``."""
    DEFERRED = "deferred"
    """Policy said later (quiet hours, cooldown); it has a next-eligible time."""
    SENDING = "sending"
    """An attempt is prepared or accepted by the provider, without a carrier verdict yet."""
    DELIVERED = "delivered"
    SENT = "sent"
    """A carrier (or SMTP relay) took it; no delivery receipt (yet)."""
    UNDELIVERED = "undelivered"
    FAILED = "failed"
    UNKNOWN = "unknown"
    """Polling stopped at its horizon without a final word; may still be settled."""
    CANCELLED = "cancelled"
    DENIED = "denied"
    EXPIRED = "expired"


FINAL_STATES = frozenset(
    {
        IntentState.DELIVERED,
        IntentState.SENT,
        IntentState.UNDELIVERED,
        IntentState.FAILED,
        IntentState.DENIED,
        IntentState.CANCELLED,
        IntentState.EXPIRED,
        IntentState.UNKNOWN,
    }
)
"""The states a finished workflow can leave (its HeraldOutcome); the others are on the way."""
REACHED = frozenset({IntentState.DELIVERED, IntentState.SENT})
"""The states in which the message reached the person: delivered, or (email) accepted by
the relay."""


def derive_intent_state(
    *,
    attempt_states: Sequence[AttemptState],
    last_decision: Outcome | None,
    cancelled: bool,
    expired: bool,
    scheduled: bool,
) -> IntentState:
    """Derive the state of an intent; see the module docstring for the table.

    Args:
        attempt_states: Current state of every attempt, any channel, any order.
        last_decision: Outcome of the latest policy decision, ``None`` if none yet.
        cancelled: An operator (or the app) cancelled the intent.
        expired: The business expiry passed before the intent finished.
        scheduled: The intent has a future ``send_at``.
    """
    states = set(attempt_states)
    if AttemptState.DELIVERED in states:
        return IntentState.DELIVERED
    if AttemptState.SENT in states:
        return IntentState.SENT
    if AttemptState.SUBMITTED in states:
        return IntentState.SENDING
    if AttemptState.PREPARED in states and not (cancelled or expired):
        return IntentState.SENDING
    if AttemptState.UNKNOWN in states:
        return IntentState.UNKNOWN
    if cancelled or (states and states == {AttemptState.CANCELLED}):
        return IntentState.CANCELLED
    if expired:
        return IntentState.EXPIRED
    if last_decision == Outcome.DEFER:
        return IntentState.DEFERRED
    if AttemptState.UNDELIVERED in states:
        return IntentState.UNDELIVERED
    if AttemptState.FAILED in states:
        return IntentState.FAILED
    if last_decision == Outcome.DENY:
        return IntentState.DENIED
    if scheduled and last_decision is None:
        return IntentState.SCHEDULED
    return IntentState.PENDING
