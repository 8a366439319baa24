"""Business keys, their namespaces, channel keys, attempt tokens and workflow ids.

All deterministic. A business key belongs to a namespace (its app's, docs/api.md "How keys
are scoped"): two apps may use one key without meeting. What names an intent across
Herald, its workflow id and its attempt tokens, is the key's *identity*
`<namespace>~<key>`; an intent recorded before namespaces (migration 0019) keeps the bare
key as its identity, and so its workflow id and tokens.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from domain import channels

# event type: lowercase words joined by '-' or '.'; subject ids: letters, digits, '-', '_', '.'
_EVENT_TYPE = re.compile(r"^[a-z][a-z0-9]*(?:[-.][a-z0-9]+)*$")
_SUBJECT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
MAX_KEY_LENGTH = 200
"""At most this many characters in a key, and in a key's identity (namespace, `~` and key):
the workflow id, the tokens and what is made of them fit the ledger's columns."""
NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$"
"""A namespace: what a principal's name may be (its default), 1 to 80 characters."""
_NAMESPACE = re.compile(NAMESPACE_PATTERN)
NAMESPACE_SEPARATOR = "~"
"""Between a namespace and its key in an identity. Never in a key (so no identity reads as
a pre-namespace key) nor in a namespace, and unreserved in a URL: a token travels
unquoted in the unsubscribe link's path."""
DEFAULT_NAMESPACE = "starter"
"""The namespace of a Python app recording in-process through `starter` without naming
one (HERALD_KEY_NAMESPACE), and of the intents it recorded before namespaces."""


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


def validate_namespace(namespace: str) -> str:
    """Return `namespace` if it is well formed; raise InvalidKey saying what one may be."""
    if not _NAMESPACE.match(namespace):
        raise InvalidKey(
            "a namespace is 1 to 80 letters, digits, '.', '_' or '-', starting with a letter "
            "or digit"
        )
    return namespace


def identity(namespace: str, key: str) -> str:
    """What names the intent of `key` in `namespace` across Herald: `<namespace>~<key>`.

    Raises:
        InvalidKey: the identity is longer than MAX_KEY_LENGTH (the key must be shorter
            by the namespace's length and one).
    """
    found = f"{validate_namespace(namespace)}{NAMESPACE_SEPARATOR}{key}"
    if len(found) > MAX_KEY_LENGTH:
        raise InvalidKey(
            f"business key longer than {MAX_KEY_LENGTH - len(namespace) - 1} characters "
            f"(a key and its namespace, {len(namespace)} characters, hold at most "
            f"{MAX_KEY_LENGTH - 1} together)"
        )
    return found


def split_key_ref(text: str) -> tuple[str | None, str]:
    """Read how a person or an app names a key: `NAMESPACE~KEY`, or a bare `KEY`.

    Returns (namespace or None, key); the parts are not validated here (a lookup that
    finds nothing says so).
    """
    namespace, sep, key = text.partition(NAMESPACE_SEPARATOR)
    return (namespace, key) if sep else (None, text)


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
    """An attempt's idempotency token, read: `<identity>:<channel>:<number>`.

    The one format (docs/channels.md). The identity (`<namespace>~<business key>`, or
    the bare key of an intent recorded before namespaces) holds colons of its own, so the
    token is read from the right: the last part is the attempt number (1-based), the one
    before it the channel, everything before that the identity (`business_key` below).
    """

    business_key: str
    channel: str
    number: int

    def __str__(self) -> str:
        """The token as it is written: `<business key>:<channel>:<number>`."""
        return f"{self.business_key}:{self.channel}:{self.number}"


def attempt_token(key: str, channel: str, number: int) -> str:
    """The stable idempotency token of attempt `number` (1-based) on `channel`.

    `key` is the intent's identity (:func:`identity_of_workflow` reads it back from the
    intent's workflow id, whichever scheme recorded it).
    """
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


WORKFLOW_ID_PREFIX = "notification:"


def workflow_id(key: str) -> str:
    """The Temporal workflow id of an intent, from its identity: a second start dedupes.

    `notification:<namespace>~<key>`; `notification:<key>` before namespaces.
    """
    return f"{WORKFLOW_ID_PREFIX}{key}"


def identity_of_workflow(workflow_id: str) -> str:
    """The identity an intent's workflow id was made from.

    Its attempt tokens are made from it too, so an intent recorded before namespaces keeps
    its scheme for every attempt.
    """
    if not workflow_id.startswith(WORKFLOW_ID_PREFIX):
        raise InvalidKey("not a notification workflow id")
    return workflow_id.removeprefix(WORKFLOW_ID_PREFIX)


def content_sha256(text: str | bytes) -> str:
    """The SHA-256 of a text (UTF-8) or of bytes, in hex."""
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()
