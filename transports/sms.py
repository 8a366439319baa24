"""The generic SMS port: what any SMS provider adapter offers, and the facts it returns.

An adapter reports what happened and nothing more. It never retries, never falls back
and never decides whether a failure is worth another attempt; it says which of three
things is true:

- the provider refused the request and will refuse it again (:class:`SmsPermanentError`);
- nothing was processed and the same request may be sent later (:class:`SmsTransientError`);
- the request may have been processed and nobody knows (:class:`SmsAmbiguousError`):
  reconcile with :meth:`SmsTransport.find` before sending anything again.

Which of the three an HTTP exchange came to is read here once for every adapter
(:func:`unanswered`, :func:`unreadable`, :func:`answer_body`, :func:`refusal`); an
adapter brings only its provider's body shape and error table. The errors themselves are
in `transports.errors`, with the email ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Protocol, runtime_checkable

import httpx

from domain.provider_errors import Cause, ErrorKind, classify
from domain.states import AttemptState
from transports.errors import (
    SmsAmbiguousError,
    SmsError,
    SmsNotFound,
    SmsPermanentError,
    SmsTransientError,
)


@dataclass(frozen=True)
class SmsMessage:
    """One outbound SMS, as the adapter sends it."""

    token: str
    """The attempt's idempotency token. Twilio has no idempotency key on create, so the
    adapter does not send it; the caller puts it in ``status_callback`` (``?token=...``)
    so receipts carry it back."""
    to: str
    """Destination in E.164 form. Never logged."""
    body: str
    """The text. Never logged."""
    sender: str
    """The real sender (``domain.senders``): an E.164 ``From`` number, an alphanumeric
    sender id, or a Messaging Service SID (``MG`` + 32 hex), which the Twilio adapter sends
    as ``MessagingServiceSid`` instead of ``From``. Ignored when the adapter is configured
    with a Messaging Service of its own."""
    status_callback: str | None
    """Full public URL the provider POSTs receipts to, or ``None`` for no receipts."""
    validity_seconds: int | None = None
    """``ValidityPeriod``: how long the provider may keep it queued (Twilio: at most 36,000)."""
    send_at: datetime | None = None
    """Provider-side scheduling (``ScheduleType=fixed`` + ``SendAt``). Twilio needs a
    Messaging Service and a time at least 15 minutes ahead; the simulator checks neither."""


@dataclass(frozen=True)
class SmsSubmitted:
    """The provider accepted the request: the message exists remotely."""

    remote_id: str
    """The provider's message id (Twilio: ``SM`` + 32 hex)."""
    raw_status: str
    """Status word as the provider said it (``queued``, ``accepted``, ``scheduled``)."""
    provider_at: datetime | None
    """The provider's creation time (timezone-aware UTC), when it said one."""
    segments: int | None
    """Number of billed segments, when known at creation."""
    state: AttemptState | None = None
    """``raw_status`` in Herald's vocabulary, mapped by the adapter (each provider's words
    stop at its adapter); ``None`` when the word says nothing about an outbound message."""


@dataclass(frozen=True)
class ProviderStatus:
    """One observation of a remote message, from a fetch, a list or a cancel."""

    remote_id: str
    raw_status: str
    """Status word as the provider said it; normalize with
    ``domain.states.normalize_provider_status``."""
    error_code: str | None
    """The provider's error code for failed/undelivered messages (e.g. ``"30003"``)."""
    provider_at: datetime | None
    """When the provider last changed the message (``date_updated``), timezone-aware UTC."""
    sent_at: datetime | None = None
    """``date_sent``: when the provider handed it to a carrier; ``None`` while queued."""
    created_at: datetime | None = None
    """``date_created``: when the provider accepted it."""
    body_sha256: str | None = None
    """SHA-256 (hex) of the body the provider holds; how reconciliation recognizes ours."""
    segments: int | None = None
    state: AttemptState | None = None
    """``raw_status`` in Herald's vocabulary, mapped by the adapter; ``None`` when the word
    says nothing about an outbound message (an inbound status)."""


def not_found(err: SmsError, *, code: str) -> SmsError:
    """`err` as SmsNotFound when it is a 404 carrying the provider's not-found `code`."""
    if err.http_status == 404 and err.code == code:
        return SmsNotFound(err.reason, err.code, http_status=404, about=err.about)
    return err


def unanswered(exc: httpx.TransportError, *, what: str, creates: bool) -> SmsError:
    """The error for a request that got no answer: ``what`` names the call (``create``);
    ``creates`` marks the one call that is not safe to repeat."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        # Nothing left this process: a definitive non-acceptance, safe to send again.
        return SmsTransientError(
            f"{what}: could not connect ({type(exc).__name__})", "connect", about=Cause.PROVIDER
        )
    # ReadTimeout, WriteTimeout, RemoteProtocolError, ReadError...: the request may have
    # reached the provider. Only a create makes that ambiguous.
    reason = f"{what}: {type(exc).__name__} after the request was sent"
    if creates:
        code = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection"
        return SmsAmbiguousError(reason, code)
    return SmsTransientError(reason, "read")


def unreadable(what: str, *, http_status: int, creates: bool) -> SmsError:
    """The error for a 2xx answer whose body could not be read."""
    if creates:
        return SmsAmbiguousError(
            f"{what}: HTTP {http_status} with an unreadable body",
            "bad_response",
            http_status=http_status,
        )
    return SmsTransientError(f"{what}: unreadable body", "bad_response", http_status=http_status)


def answer_body(response: httpx.Response) -> dict[str, Any]:
    """An answer's JSON object; empty when it has none (a proxy's page, an empty body)."""
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def refusal(
    what: str,
    *,
    http_status: int,
    code: str | None,
    provider_text: str,
    retry_after: float | None,
    creates: bool,
    provider_body: bool,
    table: dict[str, tuple[ErrorKind, str, Cause]],
) -> SmsError:
    """Which of the three kinds a provider's non-2xx answer is.

    Args:
        what: the call, for the reason (``create``, ``GET message``).
        http_status: the answer's HTTP status.
        code: the provider's error code from the body, if it had one.
        provider_text: the provider's own words, already redacted (may be empty).
        retry_after: the ``Retry-After`` the provider asked for, in seconds.
        creates: whether the call was a create (the one call not safe to repeat).
        provider_body: whether the body is the provider's own error body (not a proxy's
            page): a 4xx carrying it is the provider refusing this request.
        table: the provider's error codes (``domain.provider_errors``).
    """
    status = http_status
    if status in (429, 503):
        # 429 is never processed; 503 means the service refused the work.
        return SmsTransientError(
            f"{what}: provider busy (HTTP {status}) {provider_text}".strip(),
            code or str(status),
            http_status=status,
            retry_after=retry_after,
            about=Cause.PROVIDER,
        )
    if status >= 500:
        reason = f"{what}: provider error HTTP {status} {provider_text}".strip()
        if creates:
            # A 500/502/504 on create may come after the message was stored.
            return SmsAmbiguousError(reason, code or str(status), http_status=status)
        return SmsTransientError(
            reason, code or str(status), http_status=status, retry_after=retry_after
        )

    verdict = classify(code, status, table=table)
    code = verdict.code or code
    about = verdict.cause
    if about == Cause.UNKNOWN and status in (401, 403):
        about = Cause.PROVIDER  # credentials and permissions belong to the account
    reason = f"{what}: {verdict.reason}"
    if provider_text:
        reason = f"{reason} (provider: {provider_text})"
    if verdict.kind == ErrorKind.TRANSIENT:
        return SmsTransientError(
            reason, code, http_status=status, retry_after=retry_after, about=about
        )
    if verdict.kind == ErrorKind.AMBIGUOUS:
        if creates and provider_body and 400 <= status < 500 and status != 429:
            # The provider's own error body on a 4xx is its answer to this request:
            # refused, nothing created, whatever the code (one the table does not know
            # included). Nothing to reconcile; the fallback rules decide next.
            return SmsPermanentError(
                f"{reason}; refused with HTTP {status}", code, http_status=status, about=about
            )
        if creates:
            return SmsAmbiguousError(reason, code, http_status=status)
        return SmsTransientError(reason, code, http_status=status)
    return SmsPermanentError(reason, code, http_status=status, about=about)


@runtime_checkable
class SmsTransport(Protocol):
    """The port every SMS provider adapter implements."""

    finds_lost_creates: ClassVar[bool]
    """Whether :meth:`find` can look a message up by destination, time and content: only
    such a provider can answer "not there" after an ambiguous create. One that cannot
    (Telnyx) ends such an attempt ``unknown`` for a person to settle, never resending."""
    lookup_sees_every_state: ClassVar[bool]
    """Whether :meth:`find` lists a message in every state a lost create could have left
    it (queued and scheduled included). Only then does "not found" mean nothing was
    created and let another provider try; otherwise it is "not seen" (``unknown``)."""
    webhook_path: ClassVar[str]
    """Herald's ingress path for this provider's signed receipts (``/v1/receipts/sms``);
    the caller builds ``status_callback`` from it with ``?token=<attempt token>``."""

    async def submit(self, msg: SmsMessage) -> SmsSubmitted:
        """Send one message. Raises one of the three :class:`SmsError` kinds."""
        ...

    async def status(self, remote_id: str) -> ProviderStatus:
        """Fetch the provider's current view of one message."""
        ...

    async def find(
        self,
        *,
        to: str,
        sent_after: datetime,
        sent_before: datetime,
        body_sha256: str,
    ) -> list[ProviderStatus]:
        """Reconciliation: messages to ``to`` in the window whose body hashes to ``body_sha256``.

        Raises :class:`SmsLookupUnavailable` when the provider has no such lookup."""
        ...

    async def cancel(self, remote_id: str) -> ProviderStatus:
        """Ask the provider to cancel a message it has not sent yet (a scheduled one)."""
        ...
