"""Business keys, channel keys, attempt tokens and workflow ids: all deterministic."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from domain import channels

# event type: lowercase words joined by '-' or '.'; subject ids: letters, digits, '-', '_', '.'
_EVENT_TYPE = re.compile(r"^[a-z][a-z0-9]*(?:[-.][a-z0-9]+)*$")
_SUBJECT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
MAX_KEY_LENGTH = 200


class InvalidKey(ValueError):
    """A business key that does not follow `<event_type>:<subject id>[:<subject id>...]`."""


def business_key(event_type: str, *subject_ids: str) -> str:
    """Build and validate a business key, e.g. ``class-opening:c-9081:m-1842``."""
    return validate_business_key(":".join((event_type, *subject_ids)))


def validate_business_key(key: str) -> str:
    """Return `key` if it is a well-formed business key; raise InvalidKey naming the fault."""
    parts = key.split(":")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidKey(f"business key longer than {MAX_KEY_LENGTH} characters")
    if len(parts) < 2:
        raise InvalidKey("business key needs an event type and at least one subject id")
    if not _EVENT_TYPE.match(parts[0]):
        raise InvalidKey("the event type must be lowercase words joined by '-' or '.'")
    # The parts are not echoed: a malformed key may hold what must not be repeated (a name).
    for number, part in enumerate(parts[1:], start=1):
        if not _SUBJECT.match(part):
            raise InvalidKey(f"subject id #{number} may hold only letters, digits, '-', '_', '.'")
    return key


def event_type_of(key: str) -> str:
    """The event type of a business key (its first part)."""
    return key.split(":", 1)[0]


def channel_key(key: str, channel: str) -> str:
    """The key of one channel of an intent: `<business key>:<channel>`.

    Raises:
        channels.UnknownChannel: for a channel Herald does not know.
    """
    return f"{key}:{channels.get(channel).name}"


@dataclass(frozen=True)
class AttemptToken:
    """An attempt's idempotency token, read: `<business key>:<channel>:<number>`.

    The one format (docs/channels.md). The business key holds colons of its own, so the
    token is read from the right: the last part is the attempt number (1-based), the one
    before it the channel, everything before that the business key.
    """

    business_key: str
    channel: str
    number: int

    def __str__(self) -> str:
        """The token as it is written: `<business key>:<channel>:<number>`."""
        return f"{self.business_key}:{self.channel}:{self.number}"


def attempt_token(key: str, channel: str, number: int) -> str:
    """The stable idempotency token of attempt `number` (1-based) on `channel`."""
    if number < 1:
        raise InvalidKey("attempt numbers start at 1")
    return f"{channel_key(key, channel)}:{number}"


def parse_attempt_token(token: str) -> AttemptToken:
    """Read an attempt token (the one place that does).

    Raises:
        InvalidKey: not `<business key>:<channel>:<number>` with a number >= 1.
        channels.UnknownChannel: the channel part names no channel.
    """
    key, sep, rest = token.rpartition(":")
    business_key, sep2, channel = key.rpartition(":")
    if not (sep and sep2 and business_key and rest.isdigit() and int(rest) >= 1):
        raise InvalidKey("not an attempt token (<business key>:<channel>:<number>)")
    return AttemptToken(business_key, channels.get(channel).name, int(rest))


def channel_of_token(token: str) -> str:
    """The channel an attempt token was made for (see :func:`parse_attempt_token`)."""
    return parse_attempt_token(token).channel


def workflow_id(key: str) -> str:
    """The Temporal workflow id of an intent: derived from the key, so a second start dedupes."""
    return f"notification:{key}"


def content_sha256(text: str | bytes) -> str:
    """The SHA-256 of a text (UTF-8) or of bytes, in hex."""
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()
