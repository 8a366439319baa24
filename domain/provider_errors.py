"""Provider error classification, as a table.

The kind decides what Herald does next: a permanent error closes the channel for this
destination (and may trigger the email fallback at once), a transient one is retried
with backoff, and an ambiguous one means the message may or may not have gone out, so
it is reconciled before anything is sent again. An unknown code is ambiguous, never
permanent: wrongly giving up on a number costs more than one reconciliation.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ErrorKind(StrEnum):
    """What a provider error means for the next step: give up, retry, or reconcile."""

    PERMANENT = "permanent"
    """This destination will not work on this channel: do not retry it."""
    TRANSIENT = "transient"
    """Nothing was processed: retry after backing off (honouring Retry-After)."""
    AMBIGUOUS = "ambiguous"
    """It may have gone out: reconcile before any new request."""


@dataclass(frozen=True)
class ErrorClass:
    """What one provider error means for Herald."""

    kind: ErrorKind
    code: str
    """The provider's code as a string (``"21610"``), else ``"HTTP <status>"``, else ``""``."""
    reason: str
    """A short human explanation."""


# Twilio error codes (REFERENCE.md). 30003 is listed ambiguous: some operators report it
# for a phone that is off for an hour, so it must not close the number for good.
ERROR_TABLE: dict[str, tuple[ErrorKind, str]] = {
    "21211": (ErrorKind.PERMANENT, "invalid 'To' phone number"),
    # A sender the provider refuses (HERALD_SMS_SENDERS): nothing was sent, and the same
    # request is refused again, so retrying cannot help; start-up validation prevents it.
    "21212": (ErrorKind.PERMANENT, "invalid 'From' sender (check HERALD_SMS_SENDERS)"),
    "21603": (ErrorKind.PERMANENT, "no 'From' or 'MessagingServiceSid' (sender settings)"),
    "21701": (ErrorKind.PERMANENT, "invalid Messaging Service SID (sender settings)"),
    "21610": (ErrorKind.PERMANENT, "recipient unsubscribed (replied STOP)"),
    "21614": (ErrorKind.PERMANENT, "'To' number is not a mobile number"),
    "30004": (ErrorKind.PERMANENT, "message blocked"),
    "30005": (ErrorKind.PERMANENT, "unknown or inactive handset"),
    "30006": (ErrorKind.PERMANENT, "landline or unreachable carrier"),
    "30007": (ErrorKind.PERMANENT, "filtered as spam by the carrier"),
    "20429": (ErrorKind.TRANSIENT, "too many concurrent requests"),
    "21611": (ErrorKind.TRANSIENT, "queue overflow (source number queue full)"),
    "30001": (ErrorKind.TRANSIENT, "queue overflow (queued longer than the validity period)"),
    "30003": (ErrorKind.AMBIGUOUS, "unreachable destination handset"),
    "30008": (ErrorKind.AMBIGUOUS, "unknown error"),
}

# Codes that mean the person opted out: the ledger turns them into a suppression, the
# same as an inbound STOP.
OPT_OUT_CODES: frozenset[str] = frozenset({"21610"})


def _normalize(code: str | int | None) -> str:
    if code is None:
        return ""
    return str(code).strip()


def is_opt_out(code: str | int | None) -> bool:
    """Whether an error code means the recipient opted out (becomes a suppression)."""
    return _normalize(code) in OPT_OUT_CODES


def classify(code: str | int | None, http_status: int | None = None) -> ErrorClass:
    """Classify a provider error by its code, then by its HTTP status.

    A known code decides. Without one, HTTP 429 and 5xx are transient (the request was
    not processed, or the provider says to come back). Anything else is ambiguous.

    Args:
        code: The provider's error code (``21610``, ``"30007"``), if any.
        http_status: The HTTP status of the response, if any.
    """
    normalized = _normalize(code)
    if normalized in ERROR_TABLE:
        kind, reason = ERROR_TABLE[normalized]
        return ErrorClass(kind=kind, code=normalized, reason=reason)
    label = normalized or (f"HTTP {http_status}" if http_status is not None else "")
    if http_status == 429:
        return ErrorClass(ErrorKind.TRANSIENT, label, "rate limited (HTTP 429)")
    if http_status is not None and 500 <= http_status <= 599:
        return ErrorClass(ErrorKind.TRANSIENT, label, f"provider error (HTTP {http_status})")
    if normalized:
        return ErrorClass(ErrorKind.AMBIGUOUS, label, f"unrecognized error code {normalized}")
    return ErrorClass(ErrorKind.AMBIGUOUS, label, "error without a recognized code")
