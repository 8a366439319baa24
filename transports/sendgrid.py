"""Email through a SendGrid-compatible HTTP API (v3 Mail Send), and its signed Event Webhook.

Mail Send (``POST /v3/mail/send``, bearer API key, JSON) answers ``202`` with an empty body
and the message's id in ``X-Message-Id``; the delivery, bounce and complaint events come
later through the Event Webhook, each carrying the ``custom_args`` given at send (Herald
puts the attempt token there, so events correlate without contact data).

Outcomes, as facts:

| What happened | Kind |
|---|---|
| ``ConnectError``, ``ConnectTimeout``, ``PoolTimeout`` (nothing left) | transient |
| ``ReadTimeout``, ``WriteTimeout``, ``RemoteProtocolError``, ``ReadError`` | **ambiguous** |
| 2xx | accepted (``remote_id`` = ``X-Message-Id``) |
| 429 | transient (``retry_after`` from ``Retry-After`` or ``X-RateLimit-Reset``) |
| 5xx | **ambiguous** (it may be queued) |
| other 4xx with SendGrid's error body ``{"errors": [...]}`` | permanent (nothing queued) |
| a 4xx without that body (a proxy's page) | ambiguous |

SendGrid has no idempotency key on send and no practical lookup (the Email Activity API is
a paid add-on limited to a few requests a minute), so an ambiguous send is never sent
again: the attempt ends ``unknown`` for a person to settle (docs/transports.md).

Addresses, subjects and bodies are never logged; provider error text has addresses
replaced before it reaches an exception.
"""

from __future__ import annotations

import base64
import json
import logging
from datetime import UTC, datetime
from email.utils import parseaddr
from typing import Any

import httpx
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from domain.email_events import ADDRESS, TOKEN_ARG, without_addresses
from domain.provider_errors import classify
from transports.accounts import authenticated_read
from transports.email import (
    DEFAULT_MESSAGE_ID_DOMAIN,
    EmailMessageSpec,
    EmailSubmitted,
    message_id_for,
)
from transports.errors import (
    AccountCheckFailed,
    EmailAmbiguousError,
    EmailPermanentError,
    EmailTransientError,
)
from transports.twilio import parse_retry_after

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.sendgrid.com"


def _party(value: str) -> dict[str, str]:
    """``Name <addr>`` or ``addr`` as SendGrid's ``{"email", "name"}``."""
    name, address = parseaddr(value)
    return {ADDRESS: address, **({"name": name} if name else {})}


def mail_send_body(
    spec: EmailMessageSpec, *, message_id_domain: str = DEFAULT_MESSAGE_ID_DOMAIN
) -> dict[str, Any]:
    """The v3 Mail Send JSON for ``spec``: one personalization, the token in
    ``custom_args``, the Message-ID and RFC 8058 headers through ``headers``."""
    headers = {
        "Message-ID": message_id_for(spec.token, message_id_domain),
        # RFC 3834: tells auto-responders (vacation replies) not to answer a notification.
        "Auto-Submitted": "auto-generated",
        **spec.extra_headers,
    }
    if spec.unsubscribe_url:
        headers["List-Unsubscribe"] = f"<{spec.unsubscribe_url}>"
        headers["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    content = [{"type": "text/plain", "value": spec.text}]
    if spec.html is not None:
        content.append({"type": "text/html", "value": spec.html})
    body: dict[str, Any] = {
        "personalizations": [
            {"to": [_party(spec.to)], "custom_args": {TOKEN_ARG: spec.token}},
        ],
        "from": _party(spec.sender),
        "subject": spec.subject,
        "content": content,
        "headers": headers,
    }
    if spec.reply_to:
        body["reply_to"] = _party(spec.reply_to)
    if spec.categories:
        body["categories"] = list(spec.categories)
    if spec.attachments:
        body["attachments"] = [
            {
                "content": base64.b64encode(a.content).decode("ascii"),
                "filename": a.filename,
                "type": a.media_type,
                "disposition": "attachment",
            }
            for a in spec.attachments
        ]
    return body


def _error_body(response: httpx.Response) -> list[dict[str, Any]] | None:
    """SendGrid's ``{"errors": [{"message", "field", "help"}]}``, or None if not that."""
    try:
        data = response.json()
    except ValueError:
        return None
    errors = data.get("errors") if isinstance(data, dict) else None
    if not isinstance(errors, list) or not errors:
        return None
    return [e for e in errors if isinstance(e, dict)] or None


def _rate_limit_wait(response: httpx.Response) -> float | None:
    waited = parse_retry_after(response.headers.get("Retry-After"))
    if waited is not None:
        return waited
    reset = response.headers.get("X-RateLimit-Reset", "")
    if reset.isdigit():
        return max(0.0, int(reset) - datetime.now(UTC).timestamp())
    return None


class SendGridEmail:
    """Sends one message per Mail Send request."""

    provider = "sendgrid"
    reports_events = True
    """Delivered, bounce, dropped and complaint events come back through the Event Webhook."""
    resend_after_ambiguity = False
    """A lost answer is never sent again: SendGrid has no idempotency key and no practical
    lookup, and a second send would be a second message in the person's inbox."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str = DEFAULT_BASE_URL,
        connect_timeout: float = 3.0,
        read_timeout: float = 10.0,
        client: httpx.AsyncClient | None = None,
        message_id_domain: str = DEFAULT_MESSAGE_ID_DOMAIN,
        max_bytes: int = 30_000_000,
    ) -> None:
        """Args:
        api_key: the bearer API key (``mail.send`` scope is enough).
        base_url: ``https://api.sendgrid.com`` (or the EU one, or the simulator).
        connect_timeout, read_timeout: seconds; a read timeout is ambiguous.
        client: an httpx client to share (closed by its owner, not here).
        message_id_domain: the right-hand side of derived Message-IDs.
        max_bytes: SendGrid's limit on the whole request (30 MB, attachments included).
        """
        self._api_key = api_key
        self._base = base_url.rstrip("/")
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(read_timeout, connect=connect_timeout)
        )
        self.message_id_domain = message_id_domain
        self.max_bytes = max_bytes

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> SendGridEmail:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def check_account(self, *, timeout: float = 5.0) -> str:
        """Read the key's scopes (`GET /v3/scopes`): proves the key, and that it may send
        (`mail.send`), without sending."""
        body = await authenticated_read(
            self._client,
            f"{self._base}/v3/scopes",
            headers={"Authorization": f"Bearer {self._api_key}"},
            timeout=httpx.Timeout(timeout),
            code_of=lambda _: None,  # SendGrid's errors carry a message, no code
        )
        scopes = body.get("scopes") if isinstance(body, dict) else None
        if not isinstance(scopes, list) or "mail.send" not in scopes:
            raise AccountCheckFailed("the API key lacks the mail.send scope")
        return "API key accepted, mail.send allowed"

    async def send(self, spec: EmailMessageSpec) -> EmailSubmitted:
        if not parseaddr(spec.sender)[1] or not parseaddr(spec.to)[1]:
            raise EmailPermanentError("sender or recipient is not an email address")
        # Mail Send requires a subject and each content value of one character or more.
        if not spec.subject or not spec.text or spec.html == "":
            raise EmailPermanentError("the subject or a body is empty (SendGrid refuses it)")
        message_id = message_id_for(spec.token, self.message_id_domain)
        payload = json.dumps(
            mail_send_body(spec, message_id_domain=self.message_id_domain)
        ).encode()
        limit = min(spec.max_bytes, self.max_bytes)
        if len(payload) > limit:
            raise EmailPermanentError(
                f"request is {len(payload)} bytes, over the {limit}-byte limit "
                f"({len(spec.attachments)} attachment(s)); not sent"
            )
        try:
            response = await self._client.post(
                f"{self._base}/v3/mail/send",
                content=payload,
                headers={
                    "Authorization": f"Bearer {self._api_key}",
                    "Content-Type": "application/json",
                },
            )
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise EmailTransientError(f"connect: {type(exc).__name__}") from exc
        except (
            httpx.ReadTimeout,
            httpx.WriteTimeout,
            httpx.RemoteProtocolError,
            httpx.ReadError,
            httpx.WriteError,
        ) as exc:
            raise EmailAmbiguousError(
                f"mail send: {type(exc).__name__} before SendGrid's answer; it may have "
                "accepted the message"
            ) from exc
        status = response.status_code
        if 200 <= status < 300:
            remote_id = response.headers.get("X-Message-Id") or None
            log.info("email accepted message_id=%s remote_id=%s", message_id, remote_id)
            return EmailSubmitted(
                message_id=message_id,
                accepted_at=datetime.now(UTC),
                response=f"{status}",
                size=len(payload),
                remote_id=remote_id,
            )
        if status == 429:
            raise EmailTransientError(
                "mail send: rate limited (429)", status, retry_after=_rate_limit_wait(response)
            )
        errors = _error_body(response) if 400 <= status < 500 else None
        verdict = classify(None, status)
        if verdict.about_the_account:
            # Authentication and permission come before any processing: nothing was
            # accepted, with SendGrid's error body or without one (a proxy's page).
            said = "; ".join(
                without_addresses(str(e.get("message", "")))[:200] for e in errors or []
            )
            raise EmailPermanentError(
                f"mail send refused: {verdict.reason}" + (f" (SendGrid: {said})" if said else ""),
                status,
                about_the_account=True,
            )
        if errors is not None:
            said = "; ".join(
                without_addresses(str(e.get("message", "")))[:200]
                + (f" (field {str(e.get('field'))[:60]})" if e.get("field") else "")
                for e in errors[:3]
            )
            raise EmailPermanentError(f"mail send refused ({status}): {said}", status)
        raise EmailAmbiguousError(
            f"mail send: HTTP {status} without SendGrid's error body; it may have accepted "
            "the message",
            status,
        )


# --- the signed Event Webhook -------------------------------------------------------------


def generate_event_key_pair() -> tuple[bytes, str]:
    """A fresh P-256 key pair: (private key PEM, public key as SendGrid shows it: base64 DER
    SubjectPublicKeyInfo). The simulator makes one per stack."""
    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem, public_key_b64(private.public_key())


def public_key_of(private_key_pem: bytes) -> str:
    """The base64 DER public key of a PEM private key."""
    private = serialization.load_pem_private_key(private_key_pem, password=None)
    if not isinstance(private, ec.EllipticCurvePrivateKey):
        raise ValueError("the event signing key must be an elliptic-curve key")
    return public_key_b64(private.public_key())


def public_key_b64(public: ec.EllipticCurvePublicKey) -> str:
    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(der).decode("ascii")


def sign_event_batch(private_key_pem: bytes, *, timestamp: str, body: bytes) -> str:
    """The ``X-Twilio-Email-Event-Webhook-Signature`` SendGrid would send: ECDSA P-256 with
    SHA-256 over the timestamp header's bytes followed by the raw body, base64 DER."""
    private = serialization.load_pem_private_key(private_key_pem, password=None)
    if not isinstance(private, ec.EllipticCurvePrivateKey):
        raise ValueError("the event signing key must be an elliptic-curve key")
    signature = private.sign(timestamp.encode("ascii") + body, ec.ECDSA(hashes.SHA256()))
    return base64.b64encode(signature).decode("ascii")
