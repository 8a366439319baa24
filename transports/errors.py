"""Every error a transport raises, in one place: what an adapter says happened when a
provider interaction produced no result, and what an account check says when an account
cannot be used. The activities map them to Temporal's `ApplicationError` types
(`activities.contracts`); nothing here carries a phone number, an address or a body.

Both channels report the same three kinds (``kind``): permanent (refused, and will be
refused again), transient (nothing was processed; may be sent again later) and ambiguous
(may have been processed: reconcile before sending again). SMS adds two answers to a
lookup (`SmsNotFound`, `SmsLookupUnavailable`). The SMS ones carry the provider's error
code and whose problem it is (`domain.provider_errors.Cause`); the email ones the SMTP
reply code, when there was one.
"""

from __future__ import annotations

from domain.provider_errors import Cause, ErrorKind, about_the_account


class AccountCheckFailed(Exception):
    """The account cannot be used as configured; the message is one line saying why."""


# --- SMS (transports.twilio, transports.telnyx) -----------------------------------------


class SmsError(Exception):
    """A provider interaction did not produce a result. Never carries a number or a body."""

    kind = "error"

    def __init__(
        self,
        reason: str,
        code: str | None = None,
        *,
        http_status: int | None = None,
        about: Cause = Cause.UNKNOWN,
    ) -> None:
        super().__init__(reason, code)
        self.reason = reason
        """Why, in a sentence; safe to log (phone numbers are redacted)."""
        self.code = code
        """The provider's error code (``"21211"``) or a transport code (``"timeout"``)."""
        self.http_status = http_status
        self.about = about
        """Whose problem it is (``domain.provider_errors.Cause``): a refusal about this
        provider (credentials, sender, outage) lets another provider try; one about the
        destination, or an unknown one, never does."""

    def __str__(self) -> str:
        code = f" [{self.code}]" if self.code else ""
        status = f" (HTTP {self.http_status})" if self.http_status else ""
        return f"{self.kind}{code}{status}: {self.reason}"


class SmsPermanentError(SmsError):
    """The provider refused it and will refuse the same request again (bad number, STOP)."""

    kind = "permanent"

    @property
    def about_the_account(self) -> bool:
        """A refusal about the provider account (credentials, suspension, permissions, its
        sender): refused again until someone fixes the account, never the message's fault
        (``domain.provider_errors.about_the_account``)."""
        return about_the_account(ErrorKind.PERMANENT, self.about)


class SmsTransientError(SmsError):
    """Nothing was processed; the same request may be sent later (429, connect failure)."""

    kind = "transient"

    def __init__(
        self,
        reason: str,
        code: str | None = None,
        *,
        http_status: int | None = None,
        retry_after: float | None = None,
        about: Cause = Cause.UNKNOWN,
    ) -> None:
        super().__init__(reason, code, http_status=http_status, about=about)
        self.retry_after = retry_after
        """Seconds the provider asked us to wait (from ``Retry-After``), if it said."""


class SmsAmbiguousError(SmsError):
    """The request may have been processed (read timeout or reset after sending it).

    Record the attempt as ``unknown`` and reconcile with :meth:`SmsTransport.find`
    before any new request is made.
    """

    kind = "ambiguous"


class SmsNotFound(SmsError):
    """The provider answered, in its own error body, that it holds no such message (Twilio
    20404, Telnyx 10005 on a 404). Only that: a 404 without the provider's own code (a
    proxy's page, a wrong base URL) stays an error, since "not found" is evidence an
    operator may settle on."""

    kind = "not_found"


class SmsLookupUnavailable(SmsError):
    """The provider offers no lookup by destination: a lost create cannot be placed."""

    kind = "lookup_unavailable"


# --- email (transports.smtp, transports.sendgrid) ----------------------------------------


class EmailError(Exception):
    kind = "error"

    def __init__(self, reason: str, code: int | None = None) -> None:
        super().__init__(reason, code)
        self.reason = reason
        self.code = code
        """The SMTP reply code, when there was one."""

    def __str__(self) -> str:
        code = f" [{self.code}]" if self.code else ""
        return f"{self.kind}{code}: {self.reason}"


class EmailPermanentError(EmailError):
    """Refused and will be refused again (5xx, too large, malformed address)."""

    kind = "permanent"

    def __init__(
        self, reason: str, code: int | None = None, *, about_the_account: bool = False
    ) -> None:
        super().__init__(reason, code)
        self.about_the_account = about_the_account
        """Refused for the provider account (credentials, permissions: an HTTP 401 or 403),
        not for this message: the send waits until the account is fixed, it never ends the
        notification (``domain.provider_errors.about_the_account``)."""


class EmailTransientError(EmailError):
    """Not accepted, nothing was queued: may be sent again later (4xx, connect failure)."""

    kind = "transient"

    def __init__(
        self, reason: str, code: int | None = None, *, retry_after: float | None = None
    ) -> None:
        super().__init__(reason, code)
        self.retry_after = retry_after
        """Seconds the provider asked us to wait (429 Retry-After), when it said."""


class EmailAmbiguousError(EmailError):
    """The connection failed after the content started to go out: the relay may have it."""

    kind = "ambiguous"
