"""The request an app makes: one business event -> one notification intent."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from domain import channels

TIME_HORIZON = timedelta(days=366)
"""How far from now `send_at` and `expires_at` may lie, either way. A year ahead covers
every scheduled alert the stories name; beyond it (or a year back) is a mistake, and far
enough out a time is not one the ledger can store and read back (year 9999 overflowed
the retention date; a moment before year 1 UTC stored as BC and broke every listing)."""


class Category(StrEnum):
    """The message category the policy rules on."""

    TRANSACTIONAL = "transactional"
    OPERATIONAL = "operational"
    PROMOTIONAL = "promotional"


class PlanMode(StrEnum):
    """How an intent's channels are used: in order, or all at once."""

    FALLBACK = "fallback"
    """Channels in order; the next one only when policy says the previous did not reach."""
    ALL = "all"
    """Every channel at once, each with its own key (e.g. an order alert over email and SMS)."""


@dataclass(frozen=True)
class NotificationRequest:
    """What an app asks for. PII (phone, email, variables) never leaves the ledger unencrypted."""

    business_key: str
    """`<event_type>:<subject ids>`, e.g. `class-opening:c-9081:m-1842`."""
    recipient_ref: str
    """The app's id for the recipient (consent evidence is kept under it)."""
    template_key: str
    category: Category = Category.TRANSACTIONAL
    phone: str | None = None
    email: str | None = None
    channels: tuple[str, ...] = ()
    """Order of channels; empty means sms then email, for whichever destinations are given."""
    mode: PlanMode = PlanMode.FALLBACK
    template_version: int | None = None
    locale: str = "en"
    variables: dict[str, Any] = field(default_factory=dict)
    send_at: datetime | None = None
    expires_at: datetime | None = None
    timezone: str | None = None
    country: str | None = None
    """Recipient country when no phone number says it (email-only intents)."""
    artifact_sha256: str | None = None

    def channel_plan(self) -> tuple[str, ...]:
        """The channels in order.

        Those given, else every channel (in the registry's order) whose destination field
        is given.
        """
        if self.channels:
            return self.channels
        return tuple(c.name for c in channels.REGISTRY.values() if self.destination_for(c.name))

    def destination_for(self, channel: str) -> str | None:
        """The raw destination given for `channel` (its `request_field`).

        Raises:
            channels.UnknownChannel: for a channel Herald does not know.
        """
        value = getattr(self, channels.get(channel).request_field)
        return value if isinstance(value, str) and value else None
