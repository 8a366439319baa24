"""When a fallback plan moves on to its next channel.

A plan in mode ``fallback`` tries its channels in order and stops at the first one that
reached the person. What "reached" means depends on the evidence a channel can give:

- **SMS**: carriers report delivery, so only ``delivered`` reaches. ``sent`` means a
  carrier took the message, not that the handset got it; an SMS is never left at ``sent``
  when the plan decides (observation ends in a final state or the ``unknown`` verdict).
- **email**: SMTP has no delivery receipt. The relay accepting the message (``250``, the
  attempt's ``sent``) is the last evidence Herald will get, so it reaches unless a bounce
  says otherwise: a rejection in the SMTP dialogue (or a bounce recorded later) makes the
  attempt ``failed`` or ``undelivered``, and that is a failure like any other.

A channel that did not reach is followed by the next one, except after a failure, where
the policy's ``email_on_permanent_failure`` decides for either order of channels, and
after ``unknown`` (no final status by the horizon, an ambiguous hand-off never
reconciled), where the message may have reached the person: the next channel follows
only when the policy has a fallback window (``email_after_seconds`` set). A policy that
never sends email because an SMS was not delivered (promotional messages in the packaged
ones) does not send it because the SMS's fate is unknown either.
"""

from __future__ import annotations

from collections.abc import Mapping

from domain import channels
from domain.states import AttemptState

REACHED: Mapping[str, frozenset[AttemptState]] = {
    c.name: c.reached for c in channels.REGISTRY.values()
}
"""Per channel, the attempt states that count as having reached the person (each
channel's `reached` in domain.channels)."""

FAILURES: frozenset[AttemptState] = frozenset({AttemptState.FAILED, AttemptState.UNDELIVERED})
"""Outcomes after which the policy decides whether the next channel follows."""


def reached(channel: str, state: str) -> bool:
    """Whether a channel's final state means the person was reached over it.

    Args:
        channel: a channel name (domain.channels).
        state: the channel's result: an attempt state, or ``denied`` / ``expired`` (which
            never reach).

    Raises:
        channels.UnknownChannel: for a channel Herald does not know (a ValueError).
    """
    return channels.get(channel).reaches(state)


def should_fall_back(
    channel: str, state: str, *, on_permanent_failure: bool, on_unresolved: bool
) -> bool:
    """Whether the next channel of a fallback plan is tried after this channel's result.

    Cancellation, the business expiry and the end of the plan are the caller's to check:
    they close every later channel whatever this says.

    Args:
        channel: the channel that just finished (``sms`` or ``email``).
        state: its final result: an attempt state (``delivered``, ``sent``, ``failed``,
            ``undelivered``, ``unknown``, ...) or ``denied`` / ``expired``.
        on_permanent_failure: the policy's ``email_on_permanent_failure``: whether a failed
            or undelivered attempt is followed by the next channel.
        on_unresolved: whether an ``unknown`` channel is followed by the next one (the
            policy has a fallback window).
    """
    if reached(channel, state):
        return False
    if state in FAILURES:
        return on_permanent_failure
    if state == AttemptState.UNKNOWN:
        return on_unresolved
    # Denied (nothing was sent), or an SMS still `sent`: the next channel is authorized on
    # its own (an opt-out there denies it with its own reason).
    return True
