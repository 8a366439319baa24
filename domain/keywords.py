"""Inbound SMS keywords: opt-out and opt-in."""

from __future__ import annotations

from typing import Literal

OPT_OUT_KEYWORDS: frozenset[str] = frozenset(
    {"STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT"}
)
OPT_IN_KEYWORDS: frozenset[str] = frozenset({"START", "YES", "UNSTOP"})

# People type "Stop." or "STOP!"; honouring an opt-out generously is the safe side,
# so trailing punctuation is ignored. Anything longer than one word is a conversation.
_TRAILING = ".!?;,"


def classify_keyword(body: str) -> Literal["opt_out", "opt_in"] | None:
    """Whether an inbound message, as a whole, is an opt-out or opt-in keyword.

    Case and surrounding whitespace are ignored, and so is trailing punctuation;
    the keyword must be the whole message ("stop sending me deals" is not a keyword).
    """
    word = body.strip().rstrip(_TRAILING).strip().upper()
    if word in OPT_OUT_KEYWORDS:
        return "opt_out"
    if word in OPT_IN_KEYWORDS:
        return "opt_in"
    return None
