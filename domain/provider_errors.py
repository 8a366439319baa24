"""Provider error classification, as tables (one per SMS provider).

The kind decides what Herald does next: a permanent error closes the channel for this
destination (and may trigger the email fallback at once), a transient one is retried
with backoff, and an ambiguous one means the message may or may not have gone out, so
it is reconciled before anything is sent again. An unknown code is ambiguous, never
permanent: wrongly giving up on a number costs more than one reconciliation.

Each code also says what it is *about* (:class:`Cause`): the destination (the next
provider would refuse it too, so failover never follows), or this provider (its
credentials, its sender, its account: another provider may take the same request).
Twilio's messaging codes (2xxxx, 3xxxx) and Telnyx's (1xxxx, 4xxxx) do not overlap, so
one merged table serves code-only callers (a workflow reading a stored code); a test
holds them apart.

A permanent refusal about the provider is a refusal about **the account** (its
credentials, its suspension, its permissions, the sender it was given):
:attr:`ErrorClass.about_the_account`. It is not a kind of its own: the kind still says the
same request is refused again (until someone fixes the account), and the cause says it is
not this message's fault, and together they say what to do: defer until the provider may
take work again (its circuit half-opens) or fail over, never end the intent
(docs/transports.md, "Account refusals"). A bare HTTP 401 or 403 is one too:
authentication and permission are checked before a request is processed, whatever body
came with the answer.
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


class Cause(StrEnum):
    """What a provider's refusal is about; decides whether another provider may try."""

    DESTINATION = "destination"
    """The number, or the person behind it (invalid, landline, opted out): every provider
    would refuse it, so failover never follows."""
    PROVIDER = "provider"
    """This provider's side (credentials, permissions, the sender it was given, its own
    outage): another provider may take the very same request."""
    UNKNOWN = "unknown"
    """Not said: treated as the destination's (no failover), the cautious reading."""


@dataclass(frozen=True)
class ErrorClass:
    """What one provider error means for Herald."""

    kind: ErrorKind
    code: str
    """The provider's code as a string (``"21610"``), else ``"HTTP <status>"``, else ``""``."""
    reason: str
    """A short human explanation."""
    cause: Cause = Cause.UNKNOWN
    """Whose problem it is: the destination's or this provider's (failover rules)."""

    @property
    def about_the_account(self) -> bool:
        """A refusal about the account (:func:`about_the_account`)."""
        return about_the_account(self.kind, self.cause)


def about_the_account(kind: ErrorKind, cause: Cause) -> bool:
    """Whether a refusal is about the provider account.

    Its credentials, a suspension, its permissions, the sender it was given: the provider
    refuses every such request until someone fixes the account, and nothing in it is
    about the message. It defers or fails over; it never ends an intent.
    """
    return kind == ErrorKind.PERMANENT and cause == Cause.PROVIDER


_P, _T, _A = ErrorKind.PERMANENT, ErrorKind.TRANSIENT, ErrorKind.AMBIGUOUS
_DEST, _PROV = Cause.DESTINATION, Cause.PROVIDER

# Twilio error codes (REFERENCE.md). 30003 is listed ambiguous: some operators report it
# for a phone that is off for an hour, so it must not close the number for good.
TWILIO_ERRORS: dict[str, tuple[ErrorKind, str, Cause]] = {
    "21211": (_P, "invalid 'To' phone number", _DEST),
    # A sender the provider refuses (HERALD_SMS_SENDERS): nothing was sent, and the same
    # request is refused again, so retrying cannot help; start-up validation prevents it.
    # It is this provider's sender that is wrong: another provider has its own.
    "21212": (_P, "invalid 'From' sender (check HERALD_SMS_SENDERS)", _PROV),
    "21603": (_P, "no 'From' or 'MessagingServiceSid' (sender settings)", _PROV),
    "21701": (_P, "invalid Messaging Service SID (sender settings)", _PROV),
    "20003": (_P, "authentication failed (provider credentials)", _PROV),
    "20005": (_P, "account not active (suspended or out of funds)", _PROV),
    "20403": (_P, "forbidden: the account lacks permission (suspended or closed)", _PROV),
    "21408": (_P, "permission to send to this region is not enabled", _PROV),
    "21610": (_P, "recipient unsubscribed (replied STOP)", _DEST),
    "21614": (_P, "'To' number is not a mobile number", _DEST),
    "30004": (_P, "message blocked", _DEST),
    "30005": (_P, "unknown or inactive handset", _DEST),
    "30006": (_P, "landline or unreachable carrier", _DEST),
    "30007": (_P, "filtered as spam by the carrier", _DEST),
    "20429": (_T, "too many concurrent requests", _PROV),
    "21611": (_T, "queue overflow (source number queue full)", _PROV),
    "30001": (_T, "queue overflow (queued longer than the validity period)", _PROV),
    "30003": (_A, "unreachable destination handset", _DEST),
    "30008": (_A, "unknown error", Cause.UNKNOWN),
    # Email provider events (domain.email_events): the receiving server said the mailbox
    # does not exist, or the provider will not deliver to the address at all (its own
    # bounce, unsubscribe or spam-report list); a resend fails the same way.
    "email_bounce": (_P, "hard bounce: the mailbox does not exist", _DEST),
    "email_dropped": (_P, "dropped by the email provider for this address", _DEST),
}

# Telnyx Messaging v2 codes: API request errors (1xxxx, answered at once, nothing was
# created) and delivery errors (4xxxx, in `message.finalized` and on a retrieved message).
TELNYX_ERRORS: dict[str, tuple[ErrorKind, str, Cause]] = {
    "10001": (_P, "inactive phone number", _DEST),
    "10002": (_P, "invalid phone number", _DEST),
    "10009": (_P, "authentication failed (provider credentials)", _PROV),
    "10010": (_P, "authorization failed (provider account permissions)", _PROV),
    "10011": (_T, "too many requests", _PROV),
    "10016": (_P, "phone number must be in +E.164 format", _DEST),
    "40001": (_P, "not routable (landline or non-routable number)", _DEST),
    "40002": (_T, "blocked as spam (temporary)", _DEST),
    "40003": (_P, "blocked as spam (sending number blocked)", _PROV),
    "40004": (_A, "rejected by destination for an unknown reason", _DEST),
    "40005": (_T, "message expired before delivery", _PROV),
    "40006": (_A, "recipient's carrier unavailable", _DEST),
    "40008": (_P, "undeliverable", _DEST),
    "40300": (_P, "recipient unsubscribed (replied STOP)", _DEST),
    "40305": (_P, "invalid 'from' sender (check the Telnyx senders)", _PROV),
    "40310": (_P, "invalid 'to' address", _DEST),
}

ERROR_TABLE: dict[str, tuple[ErrorKind, str, Cause]] = {**TWILIO_ERRORS, **TELNYX_ERRORS}
"""Every provider's codes, for callers that hold a code and not its provider."""

# Codes that mean the person opted out: the ledger turns them into a suppression, the
# same as an inbound STOP, for every SMS provider.
OPT_OUT_CODES: frozenset[str] = frozenset({"21610", "40300"})


def _normalize(code: str | int | None) -> str:
    if code is None:
        return ""
    return str(code).strip()


def is_opt_out(code: str | int | None) -> bool:
    """Whether an error code means the recipient opted out (becomes a suppression)."""
    return _normalize(code) in OPT_OUT_CODES


def classify(
    code: str | int | None,
    http_status: int | None = None,
    *,
    table: dict[str, tuple[ErrorKind, str, Cause]] | None = None,
) -> ErrorClass:
    """Classify a provider error by its code, then by its HTTP status.

    A known code decides. Without one, HTTP 429 and 5xx are transient (the request was
    not processed, or the provider says to come back), and 401 and 403 are refusals about
    the account (authentication and permission come before any processing). Anything
    else is ambiguous.

    Args:
        code: The provider's error code (``21610``, ``"30007"``), if any.
        http_status: The HTTP status of the response, if any.
        table: One provider's table (an adapter passes its own); default: every one.
    """
    normalized = _normalize(code)
    known = ERROR_TABLE if table is None else table
    if normalized in known:
        kind, reason, cause = known[normalized]
        return ErrorClass(kind=kind, code=normalized, reason=reason, cause=cause)
    label = normalized or (f"HTTP {http_status}" if http_status is not None else "")
    if http_status == 429:
        return ErrorClass(ErrorKind.TRANSIENT, label, "rate limited (HTTP 429)", Cause.PROVIDER)
    if http_status in (401, 403):
        what = "authentication" if http_status == 401 else "permission"
        return ErrorClass(
            ErrorKind.PERMANENT,
            label,
            f"{what} refused (HTTP {http_status}): the provider account's credentials or "
            "permissions",
            Cause.PROVIDER,
        )
    if http_status is not None and 500 <= http_status <= 599:
        return ErrorClass(
            ErrorKind.TRANSIENT, label, f"provider error (HTTP {http_status})", Cause.PROVIDER
        )
    if normalized:
        return ErrorClass(ErrorKind.AMBIGUOUS, label, f"unrecognized error code {normalized}")
    return ErrorClass(ErrorKind.AMBIGUOUS, label, "error without a recognized code")


WHAT_TO_EXPECT: dict[ErrorKind, str] = {
    ErrorKind.PERMANENT: "permanent: this destination will not work on this channel; "
    "Herald does not retry it",
    ErrorKind.TRANSIENT: "temporary: Herald retries it after a pause",
    ErrorKind.AMBIGUOUS: "the message may or may not have gone out: it is settled "
    "before anything is sent again",
}


PROVIDER_REFUSED_RULE = "provider.refused"
"""The rule a deferral after a refusal about the provider (its account, its open circuit) is
recorded under: not a policy rule, the provider's own word (activities.refusals)."""

ABOUT_THE_ACCOUNT = (
    "about the provider account, not this message: Herald waits until the provider takes "
    "work again (or another provider takes it) and never ends the notification for it"
)


def meaning(code: str | int | None, http_status: int | None = None) -> str:
    """A provider error in words for a person, from the table above.

    The code, what it means and what Herald does about it.

    `meaning("30003")` -> ``"30003: unreachable destination handset (the message may or
    may not have gone out: it is settled before anything is sent again)"``.
    """
    found = classify(code, http_status)
    expect = ABOUT_THE_ACCOUNT if found.about_the_account else WHAT_TO_EXPECT[found.kind]
    return f"{found.code or 'no code'}: {found.reason} ({expect})"
