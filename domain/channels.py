"""Channels as data: the one place that says what a channel is.

Every layer looks a channel up here (:func:`get`) instead of comparing its name: the
workflow finds the activity to schedule and the task queue to run it on, the ledger the
destination columns to read, the console how to mask an address, the policy and template
loaders which tables they may hold. A name that is not here raises :class:`UnknownChannel`
where it first meets code, so a third channel never takes the email path by accident.

Adding a channel is a new :class:`Channel` below and the few files docs/channels.md
names ("How to add a channel"); tests/domain/test_channel_registry.py holds that document
to the code.

Standard library only (the workflow sandbox passes ``domain`` through).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from domain.states import AttemptState

ALL = "*"
"""Not a channel: the wildcard consents, suppressions and evidence may name ("every channel")."""


class ChannelEnd(StrEnum):
    """How a channel ended without an attempt state of its own.

    Beside the attempt states a channel's result otherwise carries: the policy denied it,
    or the intent closed before it went. The values are those of the intent's states.
    """

    DENIED = "denied"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


class UnknownChannel(ValueError):
    """A channel name no :class:`Channel` in :data:`REGISTRY` carries."""


class DestinationKind(StrEnum):
    """What a channel's destination is; the ledger keeps one column pair per kind."""

    PHONE = "phone"
    """A phone number, normalized to E.164 (domain.destinations.normalize_phone)."""
    EMAIL = "email"
    """An email address with a lowercased domain (domain.destinations.normalize_email)."""


@dataclass(frozen=True)
class Channel:
    """Everything Herald's layers need to know about one channel."""

    name: str
    """The channel's word in requests, the ledger, policies, templates and tokens."""
    title: str
    """How people read it on screens and in sentences (``SMS``, ``email``)."""
    destination: DestinationKind
    """What its destination is: decides normalisation, masking and the ledger columns."""
    request_field: str
    """The request field (API body, ``NotificationRequest``) that carries the destination."""
    send_activity: str
    """The activity (by name) that hands an attempt to the provider."""
    send_verb: str
    """The verb of the send in activity summaries (``submit``, ``send``)."""
    poll_activity: str | None
    """The activity that polls the provider for a status while no receipt has come, or
    None when the send's answer is the last evidence the channel gives (SMTP's 250)."""
    task_queue_suffix: str
    """Appended to the worker's task queue for the send and poll activities; ``""`` runs
    them on the workflow's own queue. A suffix gives the channel a queue whose rate the
    Temporal server enforces for the whole fleet."""
    send_heartbeat: bool
    """Whether the send heartbeats (a worker that dies mid-send is noticed sooner). Safe
    only where a retried send finds the claim the dead one left."""
    reached: frozenset[AttemptState]
    """The attempt states that count as having reached the person (domain.fallback)."""
    lookup_activity: str | None
    """The activity that asks the provider what it holds for an attempt (reconciling an
    ambiguous send, before a settlement), or None when the provider cannot be asked. A
    channel without lookup never fails over from an ambiguous send."""
    default_providers: tuple[str, ...]
    """The provider aliases, in order, a policy that names none for the channel uses."""
    handed_to: str
    """Who takes the message from Herald, for the timeline (``carrier``, ``mail relay``)."""
    mask_placeholder: str
    """How a destination reads when it may not be shown at all (no value to mask)."""
    has_subject: bool
    """Whether its templates carry a subject (required) or never have one."""
    counts_segments: bool
    """Whether a rendered body is counted in SMS segments (and bounded)."""
    takes_attachments: bool
    """Whether an intent with an attachment may use the channel (never as a fallback
    either: an intent with an artifact may not name a channel that refuses one)."""

    fails_over: bool = False
    """Whether its send activity takes `SubmitInput.failover` and answers with the class
    the failover rules need (domain.failover), so the workflow may move an attempt to
    the next provider of the policy's list."""

    @property
    def provider_lookup(self) -> bool:
        """Whether the provider can be asked whether it has a message."""
        return self.lookup_activity is not None

    def task_queue(self, base: str) -> str:
        """The task queue of this channel's send and poll activities, given the worker's."""
        return base + self.task_queue_suffix

    def reaches(self, state: str) -> bool:
        """Whether an attempt that ended in ``state`` reached the person over this channel."""
        return state in self.reached

    def mask(self, destination: str) -> str:
        """A destination masked as support and auditors see it.

        Enough to confirm with the person, not enough to contact them (see :func:`mask`).
        """
        return MASKS[self.destination](destination)

    def __str__(self) -> str:
        """The channel's name, as it is written everywhere."""
        return self.name


def _mask_phone(number: str) -> str:
    hidden = max(len(number) - 5, 1)
    return number[:3] + "*" * hidden + number[-2:]


def _mask_email(address: str) -> str:
    local, _, domain = address.rpartition("@")
    return f"{local[:1]}***@{domain}"


MASKS = {DestinationKind.PHONE: _mask_phone, DestinationKind.EMAIL: _mask_email}
"""How each kind of destination is masked: ``+447400000142`` -> ``+44********42``,
``ann.lee@example.com`` -> ``a***@example.com``."""


SMS = Channel(
    name="sms",
    title="SMS",
    destination=DestinationKind.PHONE,
    request_field="phone",
    send_activity="submit_sms",
    send_verb="submit",
    poll_activity="poll_sms",
    task_queue_suffix="-sms",
    send_heartbeat=True,
    # Carriers report delivery: `sent` means a carrier took it, not that a handset got it.
    reached=frozenset({AttemptState.DELIVERED}),
    lookup_activity="lookup_sms",
    default_providers=("twilio",),
    handed_to="carrier",
    mask_placeholder="+•• ••• ••• ••••",
    has_subject=False,
    counts_segments=True,
    takes_attachments=False,
    fails_over=True,
)

EMAIL = Channel(
    name="email",
    title="email",
    destination=DestinationKind.EMAIL,
    request_field="email",
    send_activity="send_email",
    send_verb="send",
    poll_activity=None,
    task_queue_suffix="",
    # A retried send has no claim to find; it sends again (same Message-ID).
    send_heartbeat=False,
    # SMTP has no delivery receipt: the relay's 250 is the last evidence, so `sent` reaches.
    reached=frozenset({AttemptState.SENT, AttemptState.DELIVERED}),
    lookup_activity=None,
    default_providers=("smtp",),
    handed_to="mail relay",
    mask_placeholder="•••@•••",
    has_subject=True,
    counts_segments=False,
    takes_attachments=True,
)

REGISTRY: Mapping[str, Channel] = {c.name: c for c in (SMS, EMAIL)}
"""Every channel by name, in the default plan order (sms before email)."""

NAMES: tuple[str, ...] = tuple(REGISTRY)
"""Every channel's name, in the default plan order."""

NAMES_AND_ALL: tuple[str, ...] = (*NAMES, ALL)
"""The names consents, suppressions and evidence take: every channel, or ``*``."""


def get(name: str) -> Channel:
    """The channel called ``name``.

    Raises:
        UnknownChannel: no channel has that name (the message lists those that do).
    """
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownChannel(f"unknown channel {name!r} (one of {', '.join(NAMES)})") from None


def of_destination(kind: DestinationKind) -> tuple[Channel, ...]:
    """The channels that send to this kind of destination."""
    return tuple(c for c in REGISTRY.values() if c.destination is kind)


def awaiting_delivery_report() -> tuple[str, ...]:
    """The channels whose ``sent`` does not reach.

    A ``sent`` attempt on one of them still waits for a delivery report (the reconciler
    looks for those that stopped hearing).
    """
    return tuple(c.name for c in REGISTRY.values() if not c.reaches(AttemptState.SENT))


def mask(destination: str, channel: str | None = None) -> str:
    """A destination masked for its channel.

    Without a channel (``None`` or ``*``), an ``@`` says it is an email address.
    """
    if channel is not None and channel != ALL:
        return get(channel).mask(destination)
    kind = DestinationKind.EMAIL if "@" in destination else DestinationKind.PHONE
    return MASKS[kind](destination)


def destination_kind(raw: str, channel: str | None) -> DestinationKind:
    """The kind of a destination given with a channel (or ``*`` / None: an ``@`` decides)."""
    if channel is not None and channel != ALL:
        return get(channel).destination
    return DestinationKind.EMAIL if "@" in raw else DestinationKind.PHONE
