"""What an email provider's delivery event means for Herald, as a table.

SendGrid's Event Webhook reports what happened to a message after Mail Send accepted it
(202, the attempt's ``submitted``). Each event word maps to at most one attempt state and
at most one effect on the address's suppressions; nothing else in Herald reads the words.

- ``processed`` and ``deferred`` keep the attempt open (``submitted``: the provider has
  it, the receiving server has not taken it yet).
- ``delivered`` reaches the person's mailbox provider: the attempt's ``delivered``.
- ``bounce`` (``type`` bounce) and ``dropped`` end it ``undelivered`` with the reason; a
  hard bounce also suppresses the address for email.
- ``bounce`` with ``type`` blocked (and SendGrid's separate ``blocked`` word) is transient:
  the receiving server refused for now (reputation, content, rate). It moves no state;
  the policy's ``email_blocks`` rule decides after how many in a window the address is
  suppressed.
- ``spamreport`` is a complaint: the address is suppressed for the message's category.
  ``unsubscribe`` and ``group_unsubscribe`` are opt-outs for that category;
  ``group_resubscribe`` lifts one.
- ``open`` and ``click`` are diagnostics only: an open may be a privacy proxy fetching
  images, not a reader, so neither ever moves a state.

An ``undelivered`` that arrives after ``delivered`` (a bounce message sent back later by
the receiving domain: it happens) is evidence, not a contradiction: it never moves the
state back and raises no review item (``domain.states.apply`` with
``evidence_after_delivered``), but its suppression still holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from domain.states import AttemptState

SIGNATURE_HEADER = "X-Twilio-Email-Event-Webhook-Signature"
"""SendGrid's signed Event Webhook: base64 DER ECDSA P-256 over the timestamp + raw body."""
TIMESTAMP_HEADER = "X-Twilio-Email-Event-Webhook-Timestamp"
TOKEN_ARG = "herald_token"
"""The ``custom_args`` key that carries the attempt token (echoed in every event)."""
ADDRESS = "email"
"""The JSON field SendGrid names an address with (a party, an event's recipient); a field
name, not Herald's email channel."""

_ADDRESS_TEXT = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


def without_addresses(text: str) -> str:
    """Provider text with every email address replaced by ``<address>``.

    An SMTP reply or a bounce reason often quotes the recipient; such text reaches
    exceptions, Temporal history, evidence and logs only scrubbed.
    """
    return _ADDRESS_TEXT.sub("<address>", text)


class SuppressionEffect(StrEnum):
    """What an event does to the address's suppressions."""

    NONE = "none"
    SUPPRESS_CHANNEL = "suppress_channel"
    """Suppress the address for every email (a hard bounce: the mailbox does not exist)."""
    SUPPRESS_CATEGORY = "suppress_category"
    """Suppress the address for the message's category only (complaint, unsubscribe)."""
    LIFT_CATEGORY = "lift_category"
    """Lift the category's unsubscribe (the person subscribed again)."""
    COUNT_BLOCK = "count_block"
    """A transient block: counted; the policy suppresses after enough in a window."""


@dataclass(frozen=True)
class EventMeaning:
    """One provider event word, read."""

    state: AttemptState | None
    """The attempt state the event is evidence of, or None (diagnostic: kept, moves nothing)."""
    effect: SuppressionEffect
    reason: str
    """The suppression reason this event records (a machine word), when it has an effect."""
    source: str
    """The suppression source (``bounce``, ``spamreport``, ...), when it has an effect."""


_NOTHING = (SuppressionEffect.NONE, "", "")

_EVENTS: dict[str, tuple[AttemptState | None, tuple[SuppressionEffect, str, str]]] = {
    "processed": (AttemptState.SUBMITTED, _NOTHING),
    "deferred": (AttemptState.SUBMITTED, _NOTHING),
    "delivered": (AttemptState.DELIVERED, _NOTHING),
    "bounce": (
        AttemptState.UNDELIVERED,
        (SuppressionEffect.SUPPRESS_CHANNEL, "hard_bounce", "bounce"),
    ),
    "blocked": (None, (SuppressionEffect.COUNT_BLOCK, "blocked", "blocked")),
    "dropped": (AttemptState.UNDELIVERED, _NOTHING),
    "open": (None, _NOTHING),
    "click": (None, _NOTHING),
    "spamreport": (None, (SuppressionEffect.SUPPRESS_CATEGORY, "complaint", "spamreport")),
    "unsubscribe": (None, (SuppressionEffect.SUPPRESS_CATEGORY, "unsubscribed", "unsubscribe")),
    "group_unsubscribe": (
        None,
        (SuppressionEffect.SUPPRESS_CATEGORY, "unsubscribed", "group_unsubscribe"),
    ),
    "group_resubscribe": (
        None,
        (SuppressionEffect.LIFT_CATEGORY, "unsubscribed", "group_resubscribe"),
    ),
}

EVENT_WORDS: frozenset[str] = frozenset(_EVENTS)
"""Every event word Herald reads."""

DIAGNOSTIC_WORDS: frozenset[str] = frozenset({"open", "click"})
"""Engagement events: recorded as diagnostics, never a state, never a rate's numerator."""


ERROR_CODES: dict[str, str] = {"bounce": "email_bounce", "dropped": "email_dropped"}
"""The error code an ending event records on its attempt (domain.provider_errors: both are
permanent, so no approve-resend is offered for them)."""


def meaning(event: str, *, bounce_type: str | None = None) -> EventMeaning:
    """Read one event word (and a bounce's ``type``).

    Raises:
        ValueError: for an event word Herald does not know (the ingress keeps such an
            event as ignored evidence instead of guessing).
    """
    word = event.strip().lower()
    if word == "bounce" and (bounce_type or "bounce").strip().lower() == "blocked":
        word = "blocked"
    if word not in _EVENTS:
        raise ValueError(f"unknown email event {event!r}")
    state, (effect, reason, source) = _EVENTS[word]
    return EventMeaning(state, effect, reason, source)


def is_bounce(event: str, *, bounce_type: str | None = None) -> bool:
    """A hard bounce (counted in the bounce rate): ``bounce`` whose type is not blocked."""
    return meaning(event, bounce_type=bounce_type).effect == SuppressionEffect.SUPPRESS_CHANNEL


def is_complaint(event: str) -> bool:
    """A spam report (counted in the complaint rate)."""
    return event.strip().lower() == "spamreport"


def blocks_suppress(count_in_window: int, threshold: int) -> bool:
    """Whether ``count_in_window`` transient blocks (this one included) suppress the address.

    A threshold of 0 never suppresses on blocks.
    """
    return threshold > 0 and count_in_window >= threshold
