"""The attempt state lattice and the one transition function.

Every observation of an attempt (the send response, a poll, a webhook receipt, a
reconciliation lookup, an operator action) goes through :func:`apply`. Nothing else
in Herald decides whether a state may change.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class AttemptState(StrEnum):
    """Normalized state of one attempt on one channel."""

    PREPARED = "prepared"
    """Persisted with its token; nothing has been sent yet."""
    SUBMITTED = "submitted"
    """The provider accepted the request (it has a remote id)."""
    SENT = "sent"
    """A carrier (or the SMTP relay) took it; may be the last word."""
    DELIVERED = "delivered"
    FAILED = "failed"
    UNDELIVERED = "undelivered"
    UNKNOWN = "unknown"
    """A horizon verdict: we stopped looking. A later real observation may settle it."""
    CANCELLED = "cancelled"
    """Closed before submission (or a scheduled provider message cancelled)."""


# The lattice: prepared < submitted < sent < {delivered, failed, undelivered}.
# Terminal states share the top rank; two different terminals are a conflict.
RANK: dict[AttemptState, int] = {
    AttemptState.PREPARED: 0,
    AttemptState.SUBMITTED: 1,
    AttemptState.SENT: 2,
    AttemptState.DELIVERED: 3,
    AttemptState.FAILED: 3,
    AttemptState.UNDELIVERED: 3,
    AttemptState.CANCELLED: 3,
}

TERMINAL: frozenset[AttemptState] = frozenset(
    {AttemptState.DELIVERED, AttemptState.FAILED, AttemptState.UNDELIVERED, AttemptState.CANCELLED}
)

# Outcomes after which a new attempt may be approved by an operator.
RETRYABLE_FAILURES: frozenset[AttemptState] = frozenset(
    {AttemptState.FAILED, AttemptState.UNDELIVERED}
)


class Verdict(StrEnum):
    """What applying one observation did."""

    APPLIED = "applied"
    """The state moved forward."""
    STALE = "stale"
    """Older, equal or weaker than what we know: kept as evidence, no change."""
    SETTLES_UNKNOWN = "settles_unknown"
    """A real observation replaced the horizon verdict `unknown`."""
    CONFLICT = "conflict"
    """A different terminal outcome than the one recorded: kept and flagged for review."""
    SUPERSEDES = "supersedes"
    """An operator's settlement replaced an earlier operator's settlement (a correction)."""
    REPLACES_SETTLEMENT = "replaces_settlement"
    """A provider's terminal replaced a different operator's settlement: applied, and the
    contradiction is flagged for review (the one exception to "the first terminal stands")."""


@dataclass(frozen=True)
class Transition:
    """The result of :func:`apply`."""

    verdict: Verdict
    state: AttemptState
    """The state after the observation (unchanged unless applied or settled)."""

    @property
    def changed(self) -> bool:
        """Whether the observation moved the attempt's state."""
        return self.verdict in CHANGING

    @property
    def conflict(self) -> bool:
        """Two different terminal words about one attempt: flagged for review."""
        return self.verdict in (Verdict.CONFLICT, Verdict.REPLACES_SETTLEMENT)


CHANGING: frozenset[Verdict] = frozenset(
    {Verdict.APPLIED, Verdict.SETTLES_UNKNOWN, Verdict.SUPERSEDES, Verdict.REPLACES_SETTLEMENT}
)
"""Verdicts that move the attempt's state."""


def is_terminal(state: AttemptState) -> bool:
    """Whether `state` is terminal (nothing later but a settlement changes it)."""
    return state in TERMINAL


def apply(
    current: AttemptState,
    observed: AttemptState,
    *,
    by_operator: bool = False,
    current_by_operator: bool = False,
    evidence_after_delivered: bool = False,
) -> Transition:
    """Apply one observation to the current state of an attempt.

    `by_operator` says the observation is an operator's settlement (source `operator`);
    `current_by_operator` that the current state was set by one.

    The rules, in order:
    - an operator's settlement settles ``unknown``, supersedes an earlier operator's
      settlement that differs (a correction), and is otherwise never applied: the same
      state is stale, a provider's different terminal stands (conflict), and an attempt
      the provider is still reporting on is not the operator's to decide (stale);
    - the same state again is a duplicate: stale, nothing changes;
    - a provider's terminal that differs from an operator's settlement replaces it and is
      flagged (the one exception to "the first terminal stands"); anything else the
      provider says after a settlement is stale;
    - ``unknown`` observed is only a verdict about an unresolved attempt: it applies to
      submitted/sent (and prepared, when the send itself was ambiguous) and is stale
      against anything terminal;
    - a real terminal observation settles ``unknown``; a non-terminal one (a late
      ``sent``, a lookup that finds the message still ``sent``) is stale: it answers
      nothing, and the attempt stays a question for a person;
    - a different terminal over a terminal is a conflict and the first one stands;
    - otherwise the higher rank wins and a lower one is stale.

    With ``evidence_after_delivered`` (an email event: a bounce message can come back after
    the receiving server took the mail), a failure observed over ``delivered`` is stale
    evidence rather than a conflict: the state stays and no review is raised.
    """
    if by_operator:
        if observed not in TERMINAL or observed == AttemptState.CANCELLED:
            raise ValueError(
                f"an operator settles to delivered, undelivered or failed, not {observed}"
            )
        if current == AttemptState.UNKNOWN:
            return Transition(Verdict.SETTLES_UNKNOWN, observed)
        if observed == current:
            return Transition(Verdict.STALE, current)
        if current_by_operator:
            return Transition(Verdict.SUPERSEDES, observed)
        if current in TERMINAL:
            return Transition(Verdict.CONFLICT, current)
        return Transition(Verdict.STALE, current)
    if observed == current:
        return Transition(Verdict.STALE, current)
    if current_by_operator and current in TERMINAL:
        if observed in TERMINAL:
            return Transition(Verdict.REPLACES_SETTLEMENT, observed)
        return Transition(Verdict.STALE, current)
    if observed == AttemptState.UNKNOWN:
        if current in TERMINAL:
            return Transition(Verdict.STALE, current)
        return Transition(Verdict.APPLIED, AttemptState.UNKNOWN)
    if current == AttemptState.UNKNOWN:
        if observed not in TERMINAL:
            # "Submitted" or "sent" after the verdict says nothing final: the question an
            # operator is asked stays open (kept as evidence, not applied).
            return Transition(Verdict.STALE, current)
        return Transition(Verdict.SETTLES_UNKNOWN, observed)
    if current in TERMINAL and observed in TERMINAL:
        if (
            evidence_after_delivered
            and current == AttemptState.DELIVERED
            and observed in RETRYABLE_FAILURES
        ):
            return Transition(Verdict.STALE, current)
        return Transition(Verdict.CONFLICT, current)
    if RANK[observed] > RANK[current]:
        return Transition(Verdict.APPLIED, observed)
    return Transition(Verdict.STALE, current)


# Twilio's whole MessageStatus enum mapped to Herald's states. `None` means the value
# says nothing about an outbound attempt (inbound statuses) and is kept only as evidence.
_PROVIDER_STATUS: dict[str, AttemptState | None] = {
    "queued": AttemptState.SUBMITTED,
    "accepted": AttemptState.SUBMITTED,
    "scheduled": AttemptState.SUBMITTED,
    "sending": AttemptState.SUBMITTED,
    "sent": AttemptState.SENT,
    "delivered": AttemptState.DELIVERED,
    "read": AttemptState.DELIVERED,
    # Some parts reached the handset, not all: the person may hold a fragment without
    # the one fact it was sent for, so it is not `delivered` (docs/transports.md).
    "partially_delivered": AttemptState.UNDELIVERED,
    "undelivered": AttemptState.UNDELIVERED,
    "failed": AttemptState.FAILED,
    "canceled": AttemptState.CANCELLED,
    "receiving": None,
    "received": None,
}


PROVIDER_STATUSES: frozenset[str] = frozenset(_PROVIDER_STATUS)
"""Every status word a provider may report (Twilio's MessageStatus enum)."""


def normalize_provider_status(raw: str) -> AttemptState | None:
    """Map a provider status word to Herald's state; raises on a word nobody knows."""
    key = raw.strip().lower()
    if key not in _PROVIDER_STATUS:
        raise ValueError(f"unknown provider status {raw!r}")
    return _PROVIDER_STATUS[key]


# Telnyx Messaging v2's per-recipient `to[].status` words. `delivery_unconfirmed` is
# Telnyx's last word when no handset receipt came: a carrier took it, nothing more is
# known, exactly Twilio's `sent`. `sending_failed` never left Telnyx (`failed`);
# `delivery_failed` left and did not arrive (`undelivered`). `expired` ran out of its
# validity before a carrier took it (Twilio says `failed`, 30036); `read` is a read receipt,
# past delivery.
_TELNYX_STATUS: dict[str, AttemptState | None] = {
    "scheduled": AttemptState.SUBMITTED,
    "queued": AttemptState.SUBMITTED,
    "sending": AttemptState.SUBMITTED,
    "sent": AttemptState.SENT,
    "cancelled": AttemptState.CANCELLED,
    "delivery_unconfirmed": AttemptState.SENT,
    "delivered": AttemptState.DELIVERED,
    "sending_failed": AttemptState.FAILED,
    "delivery_failed": AttemptState.UNDELIVERED,
    "expired": AttemptState.FAILED,
    "read": AttemptState.DELIVERED,
    "received": None,
    "webhook_delivered": None,
}

TELNYX_STATUSES: frozenset[str] = frozenset(_TELNYX_STATUS)
"""Every status word Telnyx may report for a message."""


def normalize_telnyx_status(raw: str) -> AttemptState | None:
    """Map a Telnyx status word to Herald's state; raises on a word nobody knows."""
    key = raw.strip().lower()
    if key not in _TELNYX_STATUS:
        raise ValueError(f"unknown Telnyx status {raw!r}")
    return _TELNYX_STATUS[key]
