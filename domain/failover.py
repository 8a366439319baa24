"""Failover between SMS providers that never sends twice, as a table.

Every answer a provider gives to a create is first put in one class (:class:`Answer`),
from the three kinds the transports already report (docs/transports.md) and what the
refusal is about (``domain.provider_errors.Cause``). Each class has one rule
(:data:`RULES`); :func:`decide` applies it with the three facts that can change it:
whether another provider is left in the channel's ordered list, whether the policy
allows failover for the message's category, and, for an ambiguous answer, what the
reconciliation with the same provider found.

The invariant (property-tested): per intent and channel, at most one submission that a
provider could have accepted, until a reconciliation or a person says otherwise. Only a
*definitive* non-acceptance (nothing was created), or a lookup that sees every state a lost
create could have left (queued and scheduled included) and found nothing, lets another
provider try; a message that may exist is never sent again elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from domain.provider_errors import Cause, ErrorKind


class Answer(StrEnum):
    """One provider's answer to one create, in the terms failover needs."""

    ACCEPTED = "accepted"
    """It exists at the provider (a remote id)."""
    REFUSED_BY_PROVIDER = "refused_by_provider"
    """Definitive non-acceptance for a provider-side reason: its error body refusing the
    request (credentials, sender, permissions), a connection refused before any byte
    left, or its circuit open. Nothing was created."""
    REFUSED_FOR_DESTINATION = "refused_for_destination"
    """A refusal about the number or the person (invalid, not mobile, opted out), or one
    whose subject is unknown: every provider would refuse it too."""
    BUSY = "busy"
    """429 or 503 with Retry-After: nothing processed; this provider, later (its own
    rate budget). Repeated 5xx open its circuit, which is a provider-side refusal."""
    AMBIGUOUS = "ambiguous"
    """A timeout or reset after the request left, a 5xx the provider does not document
    as unprocessed: it may exist."""


class Lookup(StrEnum):
    """What reconciling an ambiguous create with the same provider found."""

    FOUND = "found"
    NOT_FOUND = "not_found"
    """Not there after the grace, by a lookup that sees every state (queued and scheduled
    included): nothing was created."""
    NOT_SEEN = "not_seen"
    """Not listed after the grace by a lookup that cannot see every state (Twilio's
    ``DateSent`` list skips a message still queued or scheduled): it may exist."""
    PENDING = "pending"
    """Not looked up yet, or not visible yet (inside the grace)."""
    UNAVAILABLE = "unavailable"
    """The provider has no lookup by destination (Telnyx): it can never say "not there"."""


class Move(StrEnum):
    """What happens next on the channel."""

    OBSERVE = "observe"
    """Accepted: follow it (receipts, polls). No other provider will try."""
    NEXT_PROVIDER = "next_provider"
    """The next provider in the list tries at once, as a new attempt with its own token."""
    SAME_PROVIDER_LATER = "same_provider_later"
    """Retry the same attempt with the same provider (Retry-After, RetryPolicy)."""
    RECONCILE = "reconcile"
    """Look the message up with the same provider before anything else is sent."""
    FAIL = "fail"
    """The channel fails for this destination (no failover)."""
    UNKNOWN = "unknown"
    """It may exist and nobody can say: the attempt ends `unknown` for a person to
    settle. Nothing is sent again."""
    DEFER = "defer"
    """Every provider allowed to try refused for its own reasons: the intent defers until
    a circuit half-opens or the business expiry closes (then fails, nothing sent)."""


@dataclass(frozen=True)
class Rule:
    """One row of the failover table."""

    answer: Answer
    move: Move
    """The move when another provider is allowed and left."""
    otherwise: Move
    """The move when no other provider may try (none left, or the policy forbids it)."""
    why: str


RULES: dict[Answer, Rule] = {
    r.answer: r
    for r in (
        Rule(Answer.ACCEPTED, Move.OBSERVE, Move.OBSERVE, "it exists: one message, one provider"),
        Rule(
            Answer.REFUSED_BY_PROVIDER,
            Move.NEXT_PROVIDER,
            Move.DEFER,
            "nothing was created, and another provider may take the same request",
        ),
        Rule(
            Answer.REFUSED_FOR_DESTINATION,
            Move.FAIL,
            Move.FAIL,
            "the next provider would refuse it too; an opt-out is never bypassed",
        ),
        Rule(
            Answer.BUSY,
            Move.SAME_PROVIDER_LATER,
            Move.SAME_PROVIDER_LATER,
            "nothing was processed; the provider named when to come back",
        ),
        Rule(
            Answer.AMBIGUOUS,
            Move.RECONCILE,
            Move.RECONCILE,
            "it may exist: the same provider is asked first",
        ),
    )
}
"""The failover table (docs/transports.md, "Failover"). An ambiguous answer's rule
continues in :data:`AFTER_LOOKUP`."""

AFTER_LOOKUP: dict[Lookup, Rule] = {
    Lookup.FOUND: Rule(Answer.AMBIGUOUS, Move.OBSERVE, Move.OBSERVE, "found: it was accepted"),
    Lookup.PENDING: Rule(
        Answer.AMBIGUOUS, Move.RECONCILE, Move.RECONCILE, "not visible yet: look again"
    ),
    Lookup.NOT_FOUND: Rule(
        Answer.AMBIGUOUS,
        Move.NEXT_PROVIDER,
        Move.UNKNOWN,
        "not there after the grace: nothing was created",
    ),
    Lookup.NOT_SEEN: Rule(
        Answer.AMBIGUOUS,
        Move.UNKNOWN,
        Move.UNKNOWN,
        "the lookup cannot see a queued or scheduled message: not listed is not absent",
    ),
    Lookup.UNAVAILABLE: Rule(
        Answer.AMBIGUOUS,
        Move.UNKNOWN,
        Move.UNKNOWN,
        "the provider has no lookup: nobody can say it is not there",
    ),
}


def found_nothing(*, sees_every_state: bool) -> Lookup:
    """What a lookup that found nothing after the grace says.

    ``NOT_FOUND`` only when it sees every state a lost create could have left (queued and
    scheduled included), else ``NOT_SEEN``.
    """
    return Lookup.NOT_FOUND if sees_every_state else Lookup.NOT_SEEN


@dataclass(frozen=True)
class Decision:
    """The next move on a channel, and why."""

    move: Move
    why: str


def classify_answer(
    kind: ErrorKind | None,
    about: Cause = Cause.UNKNOWN,
    *,
    code: str | None = None,
    http_status: int | None = None,
) -> Answer:
    """The failover class of one create's outcome.

    Args:
        kind: ``None`` when the provider accepted it, else the transport's kind.
        about: what a refusal is about (``SmsError.about``).
        code: the provider's or the transport's code (``"connect"``, ``"circuit_open"``).
        http_status: the HTTP status, when there was one.
    """
    if kind is None:
        return Answer.ACCEPTED
    if kind == ErrorKind.AMBIGUOUS:
        return Answer.AMBIGUOUS
    if kind == ErrorKind.PERMANENT:
        return (
            Answer.REFUSED_BY_PROVIDER
            if about == Cause.PROVIDER
            else Answer.REFUSED_FOR_DESTINATION
        )
    # Transient: nothing was processed. A connection refused before any byte left (or an
    # open circuit) is a definitive non-acceptance; 429/503 ask us to come back.
    if code in ("connect", "circuit_open") and http_status is None:
        return Answer.REFUSED_BY_PROVIDER
    return Answer.BUSY


def decide(
    answer: Answer,
    *,
    another_provider: bool,
    failover_allowed: bool,
    lookup: Lookup = Lookup.PENDING,
) -> Decision:
    """The next move on the channel after ``answer``.

    For an ambiguous answer, after the lookup with the same provider found ``lookup``.
    """
    rule = AFTER_LOOKUP[lookup] if answer == Answer.AMBIGUOUS else RULES[answer]
    may_move_on = another_provider and failover_allowed
    move = rule.move if may_move_on else rule.otherwise
    return Decision(move, rule.why)


def may_be_accepted(answer: Answer, lookup: Lookup = Lookup.PENDING) -> bool:
    """Whether a provider could hold the message after this answer.

    What the invariant counts. Only a definitive refusal, a busy answer, or a lookup
    that sees every state and found nothing says it does not.
    """
    if answer == Answer.ACCEPTED:
        return True
    if answer == Answer.AMBIGUOUS:
        return lookup != Lookup.NOT_FOUND
    return False


@dataclass
class ProviderTry:
    """One attempt on the channel: one provider, its own token (``<key>:sms:<number>``)."""

    provider: str
    number: int
    answers: list[Answer] = field(default_factory=list)
    lookup: Lookup = Lookup.PENDING
    moved_on_because: str | None = None
    """Why the next provider took over from this one (for the timeline)."""

    @property
    def may_be_accepted(self) -> bool:
        """Whether a provider could hold this try's message."""
        return any(may_be_accepted(a, self.lookup) for a in self.answers)


class ChannelRun:
    """The failover walk of one channel for one intent.

    The ordered providers, the tries made, and the move after each answer. Pure and
    deterministic (the workflow keeps one per channel); the property tests drive it with
    arbitrary provider answers.
    """

    def __init__(
        self, providers: Sequence[str], *, failover_allowed: bool, first_number: int = 1
    ) -> None:
        """Start the walk at the first provider, as attempt ``first_number``."""
        if not providers:
            raise ValueError("a channel needs at least one provider")
        self.providers = list(providers)
        self.failover_allowed = failover_allowed
        self.tries: list[ProviderTry] = [ProviderTry(self.providers[0], first_number)]
        self.finished: Move | None = None

    @property
    def current(self) -> ProviderTry:
        """The try being made now."""
        return self.tries[-1]

    def _another(self) -> bool:
        return len(self.tries) < len(self.providers)

    def step(self, answer: Answer, lookup: Lookup = Lookup.PENDING, *, why: str = "") -> Decision:
        """Record the current try's answer and return the next move.

        For an ambiguous answer the lookup is recorded too; NEXT_PROVIDER opens the next
        try.
        """
        if self.finished is not None:
            raise ValueError(f"the channel already ended ({self.finished})")
        current = self.current
        current.answers.append(answer)
        if answer == Answer.AMBIGUOUS or Answer.AMBIGUOUS in current.answers:
            current.lookup = lookup
        effective = Answer.AMBIGUOUS if Answer.AMBIGUOUS in current.answers else answer
        if answer == Answer.ACCEPTED:
            effective = Answer.ACCEPTED
        decision = decide(
            effective,
            another_provider=self._another(),
            failover_allowed=self.failover_allowed,
            lookup=current.lookup,
        )
        if decision.move == Move.NEXT_PROVIDER:
            current.moved_on_because = why or decision.why
            self.tries.append(ProviderTry(self.providers[len(self.tries)], current.number + 1))
        elif decision.move in (Move.OBSERVE, Move.FAIL, Move.UNKNOWN, Move.DEFER):
            self.finished = decision.move
        return decision


__all__ = [
    "AFTER_LOOKUP",
    "ChannelRun",
    "ProviderTry",
    "RULES",
    "Answer",
    "Decision",
    "Lookup",
    "Move",
    "Rule",
    "classify_answer",
    "decide",
    "found_nothing",
    "may_be_accepted",
]
