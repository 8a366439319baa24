"""A Telnyx Messaging API v2 adapter over httpx (also speaks to the Telnyx simulator).

Behind the same port as the Twilio adapter (:mod:`transports.sms`), and with the same
discipline: it reports facts only, Telnyx's status words and error codes stop here
(``domain.states.normalize_telnyx_status``, ``domain.provider_errors.TELNYX_ERRORS``),
no number or body is logged, and provider text is redacted before it goes into an
exception.

What Telnyx does not have, and what follows from it: there is no lookup of messages by
destination and time, so a create whose answer was lost cannot be placed
(:attr:`TelnyxSms.finds_lost_creates` is false and :meth:`TelnyxSms.find` raises
:class:`transports.sms.SmsLookupUnavailable`). Such an attempt ends ``unknown`` for a
person to settle; it is never sent again and never failed over.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, ClassVar

import httpx

from domain.clocks import parse_iso_utc
from domain.keys import content_sha256
from domain.provider_errors import TELNYX_ERRORS, Cause
from domain.states import normalize_telnyx_status
from transports.accounts import authenticated_read
from transports.errors import (
    AccountCheckFailed,
    SmsAmbiguousError,
    SmsError,
    SmsLookupUnavailable,
    SmsTransientError,
)
from transports.sms import (
    ProviderStatus,
    SmsMessage,
    SmsSubmitted,
    answer_body,
    not_found,
    refusal,
    unanswered,
    unreadable,
)
from transports.twilio import parse_retry_after, redact

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/v1/webhooks/telnyx"
"""Herald's ingress route for Telnyx's signed message events (receipts and inbound)."""


def first_error_code(errors: Any) -> str | None:
    """The first ``errors[].code`` of a Telnyx body or message, as a string."""
    if isinstance(errors, list):
        for error in errors:
            if isinstance(error, dict) and error.get("code") not in (None, ""):
                return str(error["code"])
    return None


def recipient_status(data: dict[str, Any]) -> str:
    """The message's status: Telnyx reports it per recipient (``to[].status``); Herald
    sends to one recipient per message."""
    to = data.get("to")
    if isinstance(to, list) and to and isinstance(to[0], dict):
        return str(to[0].get("status") or "")
    return str(data.get("status") or "")


class TelnyxSms:
    """:class:`transports.sms.SmsTransport` over Telnyx's Messaging API v2."""

    finds_lost_creates: ClassVar[bool] = False
    lookup_sees_every_state: ClassVar[bool] = False
    """Telnyx has no lookup by destination: a lost create ends ``unknown``."""
    webhook_path: ClassVar[str] = WEBHOOK_PATH

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        messaging_profile_id: str | None = None,
        from_number: str | None = None,
        connect_timeout: float = 3.0,
        read_timeout: float = 10.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        """Args:
        base_url: ``https://api.telnyx.com`` or the Telnyx simulator's URL.
        api_key: the API v2 key, sent as ``Authorization: Bearer``.
        messaging_profile_id: sent with every message (needed for an alphanumeric
            sender or a number pool).
        from_number: this account's own sender (a number on the Telnyx account), sent as
            `from` instead of the sender Herald resolved for the policy's alias, which is
            another provider's (a Twilio number or Messaging Service) on a failover try.
        connect_timeout: seconds to open a connection (nothing has left before it).
        read_timeout: seconds to wait for each read; a create that times out here is
            ambiguous, because the request had left.
        client: a shared ``httpx.AsyncClient``; not closed by :meth:`aclose`.
        """
        self._base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}
        self._profile = messaging_profile_id
        self._from = from_number
        self._timeout = httpx.Timeout(read_timeout, connect=connect_timeout, pool=connect_timeout)
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient()

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> TelnyxSms:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def check_account(self, *, timeout: float = 5.0) -> str:
        """Read the balance (`GET /v2/balance`): the cheapest call that proves the key."""
        body = await authenticated_read(
            self._client,
            f"{self._base_url}/v2/balance",
            headers=self._headers,
            timeout=httpx.Timeout(timeout),
            code_of=lambda body: (
                first_error_code(body.get("errors")) if isinstance(body, dict) else None
            ),
        )
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict) or data.get("record_type") != "balance":
            raise AccountCheckFailed("the balance read did not answer a balance")
        return "API key accepted"

    # -- the port ---------------------------------------------------------------

    async def submit(self, msg: SmsMessage) -> SmsSubmitted:
        payload: dict[str, Any] = {"from": self._from or msg.sender, "to": msg.to, "text": msg.body}
        if self._profile:
            payload["messaging_profile_id"] = self._profile
        if msg.status_callback:
            payload["webhook_url"] = msg.status_callback
            payload["use_profile_webhooks"] = False
        # No validity period: Telnyx's send takes none (its SDK knows no such parameter).
        if msg.send_at is not None:
            payload["send_at"] = msg.send_at.astimezone(UTC).isoformat().replace("+00:00", "Z")
        data = (await self._call("POST", "/v2/messages", json=payload, creates=True)).get("data")
        if not isinstance(data, dict) or not data.get("id"):
            raise SmsAmbiguousError("create: answered without a message id", "bad_response")
        raw = recipient_status(data) or "queued"
        submitted = SmsSubmitted(
            remote_id=str(data["id"]),
            raw_status=raw,
            provider_at=parse_iso_utc(data.get("received_at")),
            segments=_int_or_none(data.get("parts")),
            state=normalize_telnyx_status(raw),
        )
        log.info("sms submitted id=%s status=%s (telnyx)", submitted.remote_id, raw)
        return submitted

    async def status(self, remote_id: str) -> ProviderStatus:
        try:
            answer = await self._call("GET", f"/v2/messages/{remote_id}")
        except SmsError as err:
            raise not_found(err, code="10005") from err
        data = answer.get("data")
        if not isinstance(data, dict) or not data.get("id"):
            raise SmsTransientError("retrieve: answered without a message", "bad_response")
        return provider_status(data)

    async def find(
        self,
        *,
        to: str,
        sent_after: datetime,
        sent_before: datetime,
        body_sha256: str,
    ) -> list[ProviderStatus]:
        raise SmsLookupUnavailable(
            "Telnyx has no lookup of messages by destination: a lost create cannot be placed",
            "no_lookup",
            about=Cause.PROVIDER,
        )

    async def cancel(self, remote_id: str) -> ProviderStatus:
        # Telnyx cancels a scheduled message with DELETE on the message.
        data = (await self._call("DELETE", f"/v2/messages/{remote_id}")).get("data")
        if not isinstance(data, dict) or not data.get("id"):
            raise SmsTransientError("cancel: answered without a message", "bad_response")
        status = provider_status(data)
        log.info("sms cancel id=%s status=%s (telnyx)", remote_id, status.raw_status)
        return status

    # -- HTTP and error mapping -------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json: dict[str, Any] | None = None,
        creates: bool = False,
    ) -> dict[str, Any]:
        """One HTTP request. ``creates`` marks the one call that is not safe to repeat."""
        what = "create" if creates else f"{method} message"
        try:
            response = await self._client.request(
                method,
                f"{self._base_url}{path}",
                json=json,
                headers=self._headers,
                timeout=self._timeout,
            )
        except httpx.TransportError as exc:
            raise unanswered(exc, what=what, creates=creates) from exc
        if response.status_code < 300:
            try:
                body = response.json()
            except ValueError as exc:
                raise unreadable(what, http_status=response.status_code, creates=creates) from exc
            if not isinstance(body, dict):
                if creates:
                    raise SmsAmbiguousError("create: answer is not an object", "bad_response")
                raise SmsTransientError(f"{what}: answer is not an object", "bad_response")
            return body
        raise self._error(response, what=what, creates=creates)

    def _error(self, response: httpx.Response, *, what: str, creates: bool) -> SmsError:
        status = response.status_code
        body = answer_body(response)
        errors = body.get("errors")
        code = first_error_code(errors)
        detail = ""
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            detail = redact(str(errors[0].get("detail") or errors[0].get("title") or ""))[:200]
        log.warning("sms %s failed http=%d code=%s (telnyx)", what, status, code)
        return refusal(
            what,
            http_status=status,
            code=code,
            provider_text=detail,
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
            creates=creates,
            # Telnyx's error body is `errors[]` with a `code`; anything else (a proxy's
            # page) says nothing about what Telnyx did.
            provider_body=code is not None,
            table=TELNYX_ERRORS,
        )


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def provider_status(data: dict[str, Any]) -> ProviderStatus:
    """A Telnyx message resource (``data`` of a retrieve, or a webhook's ``payload``) as
    one observation in the port's terms."""
    raw = recipient_status(data)
    text = data.get("text")
    updated = (
        parse_iso_utc(data.get("completed_at"))
        or parse_iso_utc(data.get("sent_at"))
        or parse_iso_utc(data.get("received_at"))
    )
    return ProviderStatus(
        remote_id=str(data["id"]),
        raw_status=raw,
        error_code=first_error_code(data.get("errors")),
        provider_at=updated,
        sent_at=parse_iso_utc(data.get("sent_at")),
        created_at=parse_iso_utc(data.get("received_at")),
        body_sha256=content_sha256(text) if isinstance(text, str) else None,
        segments=_int_or_none(data.get("parts")),
        state=normalize_telnyx_status(raw),
    )


__all__ = ["WEBHOOK_PATH", "TelnyxSms", "provider_status"]
