"""Email over SMTP (aiosmtplib), MIME built with the standard library.

Like the SMS adapters, it reports facts: accepted (``250``, with the time and the relay's
answer), permanent (``5xx``, or a message over the size limit), transient (``4xx``, or
nothing could be sent), or ambiguous (the connection died or timed out after the message
content started to go out: the relay may have queued it). Addresses, subjects and bodies
are never logged. The Message-ID is the attempt's (`transports.email.message_id_for`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from email.utils import format_datetime, parseaddr

import aiosmtplib
from aiosmtplib import errors as smtp_errors

from transports.email import (
    DEFAULT_MESSAGE_ID_DOMAIN,
    EmailMessageSpec,
    EmailSubmitted,
    message_id_for,
)
from transports.errors import (
    AccountCheckFailed,
    EmailAmbiguousError,
    EmailError,
    EmailPermanentError,
    EmailTransientError,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DkimConfig:
    """DKIM signing settings: the signing domain, the DNS selector and the private key."""

    domain: str
    selector: str
    private_key_pem: bytes
    headers: tuple[str, ...] = (
        "From",
        "To",
        "Subject",
        "Date",
        "Message-ID",
        "List-Unsubscribe",
        "List-Unsubscribe-Post",
    )


def sign_dkim(raw: bytes, config: DkimConfig) -> bytes:
    """Prepend a DKIM-Signature header (dkimpy does the canonicalization and signing)."""
    import dkim

    present = [
        h
        for h in config.headers
        if f"\n{h.lower()}:".encode() in b"\n" + raw.lower().split(b"\r\n\r\n", 1)[0]
    ]
    signature = dkim.sign(
        raw,
        selector=config.selector.encode(),
        domain=config.domain.encode(),
        privkey=config.private_key_pem,
        include_headers=[h.encode() for h in present],
        canonicalize=(b"relaxed", b"relaxed"),
    )
    return signature + raw


def build_message(
    spec: EmailMessageSpec, *, message_id_domain: str = DEFAULT_MESSAGE_ID_DOMAIN
) -> EmailMessage:
    """The MIME message for ``spec`` (no size check; :meth:`SmtpEmail.send` does that)."""
    msg = EmailMessage()
    msg["From"] = spec.sender
    msg["To"] = spec.to
    msg["Subject"] = spec.subject
    msg["Date"] = format_datetime(spec.date or datetime.now(UTC))
    msg["Message-ID"] = message_id_for(spec.token, message_id_domain)
    # RFC 3834: tells auto-responders (vacation replies) not to answer a notification.
    msg["Auto-Submitted"] = "auto-generated"
    if spec.reply_to:
        msg["Reply-To"] = spec.reply_to
    if spec.unsubscribe_url:
        msg["List-Unsubscribe"] = f"<{spec.unsubscribe_url}>"
        msg["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    for name, value in spec.extra_headers.items():
        msg[name] = value
    msg.set_content(spec.text)
    if spec.html is not None:
        msg.add_alternative(spec.html, subtype="html")
    for attachment in spec.attachments:
        maintype, _, subtype = attachment.media_type.partition("/")
        msg.add_attachment(
            attachment.content,
            maintype=maintype or "application",
            subtype=subtype or "octet-stream",
            filename=attachment.filename,
        )
    return msg


def _address(value: str) -> str:
    return parseaddr(value)[1]


def _by_code(phase: str, exc: smtp_errors.SMTPResponseException) -> EmailError:
    code = exc.code
    reason = f"{phase}: relay answered {code}"
    if 400 <= code < 500:
        return EmailTransientError(reason, code)
    return EmailPermanentError(reason, code)


class SmtpEmail:
    """Sends one message per connection through an SMTP relay."""

    provider = "smtp"
    reports_events = False
    """An SMTP relay's 250 is the last word Herald gets: no delivered, bounce or complaint
    comes back (bounces go to a mailbox as DSNs)."""
    resend_after_ambiguity = True
    """A lost answer to DATA is sent again with the same Message-ID, which receiving
    servers and clients deduplicate on; SMTP has no lookup to ask instead."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        starttls: bool = False,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 10,
        dkim: DkimConfig | None = None,
        message_id_domain: str = DEFAULT_MESSAGE_ID_DOMAIN,
        use_tls: bool = False,
    ) -> None:
        """Args:
        host, port: the relay.
        starttls: require STARTTLS (``False`` sends in clear, for a local sink).
        username, password: AUTH credentials, if the relay wants them.
        timeout: seconds for the connection and for each command's answer.
        dkim: DKIM-sign every message (dkimpy, RSA-SHA256, relaxed/relaxed) over the
            headers in ``DkimConfig.headers`` - including the RFC 8058 ones, which
            mailbox providers only honour when they are signed.
        message_id_domain: the right-hand side of derived Message-IDs.
        use_tls: implicit TLS (port 465) instead of STARTTLS.
        """
        self.dkim = dkim
        self.host = host
        self.port = port
        self.starttls = starttls
        self.use_tls = use_tls
        self.username = username
        self.password = password
        self.timeout = timeout
        self.message_id_domain = message_id_domain

    async def check_account(self, *, timeout: float = 5.0) -> str:
        """Connect, EHLO, STARTTLS where set, AUTH where a username is set, then QUIT: the
        whole session up to the point where a message would begin, and no further."""
        smtp = aiosmtplib.SMTP(
            hostname=self.host,
            port=self.port,
            timeout=timeout,
            use_tls=self.use_tls,
            start_tls=self.starttls if not self.use_tls else False,
            username=self.username,
            password=self.password,
        )
        where = f"{self.host}:{self.port}"
        try:
            await smtp.connect()
        except smtp_errors.SMTPAuthenticationError as exc:
            raise AccountCheckFailed(f"{where} refused the login (SMTP {exc.code})") from exc
        except smtp_errors.SMTPResponseException as exc:
            raise AccountCheckFailed(f"{where} answered SMTP {exc.code}") from exc
        except (
            smtp_errors.SMTPConnectError,
            smtp_errors.SMTPServerDisconnected,
            smtp_errors.SMTPTimeoutError,
            OSError,
        ) as exc:
            raise AccountCheckFailed(f"cannot reach {where} ({type(exc).__name__})") from exc
        except smtp_errors.SMTPException as exc:  # e.g. AUTH or STARTTLS not offered
            raise AccountCheckFailed(f"{where}: {str(exc).strip().rstrip('.')}") from exc
        try:
            await smtp.quit()
        except (smtp_errors.SMTPException, OSError):
            smtp.close()
        steps = ["EHLO"]
        steps += ["STARTTLS"] if self.starttls else []
        steps += ["AUTH"] if self.username else []
        return f"{where} {', '.join(steps)} ok"

    async def send(self, spec: EmailMessageSpec) -> EmailSubmitted:
        msg = build_message(spec, message_id_domain=self.message_id_domain)
        raw = msg.as_bytes(policy=SMTP_POLICY)
        if self.dkim is not None:
            raw = sign_dkim(raw, self.dkim)
        message_id = msg["Message-ID"]
        if len(raw) > spec.max_bytes:
            raise EmailPermanentError(
                f"message is {len(raw)} bytes encoded, over the {spec.max_bytes}-byte limit "
                f"({len(spec.attachments)} attachment(s)); not sent"
            )
        sender, recipient = _address(spec.sender), _address(spec.to)
        if not sender or not recipient:
            raise EmailPermanentError("sender or recipient is not an email address")

        smtp = aiosmtplib.SMTP(
            hostname=self.host,
            port=self.port,
            timeout=self.timeout,
            use_tls=self.use_tls,
            start_tls=self.starttls if not self.use_tls else False,
            username=self.username,
            password=self.password,
        )
        try:
            await smtp.connect()
        except smtp_errors.SMTPResponseException as exc:
            raise _by_code("connect", exc) from exc
        except (smtp_errors.SMTPException, OSError) as exc:
            raise EmailTransientError(f"connect: {type(exc).__name__}") from exc

        phase = "MAIL FROM"
        try:
            await smtp.mail(sender)
            phase = "RCPT TO"
            await smtp.rcpt(recipient)
            phase = "DATA"
            response = await smtp.data(raw)
        except smtp_errors.SMTPResponseException as exc:
            raise _by_code(phase, exc) from exc
        except (smtp_errors.SMTPException, OSError) as exc:
            if phase == "DATA":
                # The content may have reached the relay and been queued before we lost it.
                raise EmailAmbiguousError(
                    f"DATA: {type(exc).__name__} before the relay's answer; it may have "
                    "accepted the message"
                ) from exc
            raise EmailTransientError(f"{phase}: {type(exc).__name__}") from exc
        finally:
            if smtp.is_connected:
                try:
                    await smtp.quit()
                except (smtp_errors.SMTPException, OSError):
                    smtp.close()
        accepted_at = datetime.now(UTC)
        log.info("email accepted message_id=%s size=%d", message_id, len(raw))
        return EmailSubmitted(
            message_id=message_id,
            accepted_at=accepted_at,
            response=f"{response.code} {response.message}",
            size=len(raw),
        )
