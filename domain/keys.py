"""Business keys, channel keys, attempt tokens and workflow ids: all deterministic."""

from __future__ import annotations

import hashlib
import re

# event type: lowercase words joined by '-' or '.'; subject ids: letters, digits, '-', '_', '.'
_EVENT_TYPE = re.compile(r"^[a-z][a-z0-9]*(?:[-.][a-z0-9]+)*$")
_SUBJECT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
MAX_KEY_LENGTH = 200
CHANNELS = ("sms", "email")


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
    """The key of one channel of an intent (`<key>:sms`); raise InvalidKey if unknown."""
    if channel not in CHANNELS:
        raise InvalidKey(f"unknown channel {channel!r}")
    return f"{key}:{channel}"


def attempt_token(key: str, channel: str, number: int) -> str:
    """The stable idempotency token of attempt `number` (1-based) on `channel`."""
    if number < 1:
        raise InvalidKey("attempt numbers start at 1")
    return f"{channel_key(key, channel)}:{number}"


def workflow_id(key: str) -> str:
    """The Temporal workflow id of an intent: derived from the key, so a second start dedupes."""
    return f"notification:{key}"


def content_sha256(text: str | bytes) -> str:
    """The SHA-256 of a text (UTF-8) or of bytes, in hex."""
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()
