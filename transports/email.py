"""The email port: what any email provider adapter offers (:class:`EmailTransport`), the
message it is given and the fact it returns; the adapters are `transports.smtp` and
`transports.sendgrid`, their errors are in `transports.errors`.

The ``Message-ID`` is derived from the attempt token: ``<sha256(token)[:32]@herald>``
(the domain is configurable), so every try of the same attempt carries the same id and
receivers and the ledger can recognise a repeat.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

DEFAULT_MESSAGE_ID_DOMAIN = "herald"


def message_id_for(token: str, domain: str = DEFAULT_MESSAGE_ID_DOMAIN) -> str:
    """The Message-ID of an attempt: ``<`` + first 32 hex of SHA-256(token) + ``@domain>``."""
    return f"<{hashlib.sha256(token.encode()).hexdigest()[:32]}@{domain}>"


@dataclass(frozen=True)
class EmailAttachment:
    """One attachment, already resolved to bytes."""

    filename: str
    media_type: str
    """``maintype/subtype``, e.g. ``application/pdf``."""
    content: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()


@dataclass(frozen=True)
class EmailMessageSpec:
    """One outbound email, as the adapter sends it."""

    token: str
    """The attempt's idempotency token; the Message-ID is derived from it."""
    to: str
    """Recipient address (``addr`` or ``Name <addr>``). Never logged."""
    sender: str
    """``From`` (``addr`` or ``Name <addr>``); its address is also the envelope sender."""
    subject: str
    text: str
    """The plain-text body."""
    attachments: Sequence[EmailAttachment] = ()
    unsubscribe_url: str | None = None
    """Set for subscription-like categories: adds RFC 8058 one-click unsubscribe headers."""
    max_bytes: int = 10_000_000
    """Refuse (permanently) a message whose encoded size exceeds this."""
    html: str | None = None
    """An optional HTML alternative to ``text``."""
    reply_to: str | None = None
    date: datetime | None = None
    """The ``Date`` header; now, if not given."""
    extra_headers: dict[str, str] = field(default_factory=dict)
    categories: Sequence[str] = ()
    """The message's categories (Herald's intent category); a provider that reports
    events (SendGrid) echoes them in each event. SMTP ignores them."""


@dataclass(frozen=True)
class EmailSubmitted:
    """The relay answered 250 to the message content."""

    message_id: str
    accepted_at: datetime
    """When the 250 arrived (UTC). Accepted by the relay, not read by anyone."""
    response: str = ""
    """The relay's answer text (often carries its queue id)."""
    size: int = 0
    """Encoded size in bytes."""
    remote_id: str | None = None
    """The provider's id of the message (SendGrid's ``X-Message-Id``); None over SMTP."""


class EmailTransport(Protocol):
    """What the email activity needs of a provider (SMTP, SendGrid)."""

    provider: str
    reports_events: bool
    """Whether delivered/bounce/complaint events come back (SendGrid) or the acceptance is
    the last word (SMTP)."""
    resend_after_ambiguity: bool
    """Whether a lost answer may be sent again (same Message-ID) rather than settled."""

    async def send(self, spec: EmailMessageSpec) -> EmailSubmitted: ...
