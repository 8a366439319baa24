"""A Twilio-compatible SMS adapter over httpx (also speaks to the carrier simulator).

It reports facts only: which of permanent / transient / ambiguous a failure is, what the
provider said, and the Retry-After it asked for. Phone numbers and bodies are never
logged, and the provider's error text is redacted before it goes into an exception
(Twilio's messages echo the number: "The 'To' number +1... is not a valid phone number").
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar

import httpx

from domain.keys import content_sha256
from domain.provider_errors import TWILIO_ERRORS
from domain.states import normalize_provider_status
from transports.accounts import authenticated_read
from transports.errors import AccountCheckFailed, SmsError
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

log = logging.getLogger(__name__)

API_VERSION = "2010-04-01"
_PHONE_LIKE = re.compile(r"\+?\d[\d ().-]{5,}\d")
MESSAGING_SERVICE_SID = re.compile(r"^MG[0-9a-f]{32}$")


def redact(text: str) -> str:
    """Replace anything that looks like a phone number with ``<number>``."""
    return _PHONE_LIKE.sub("<number>", text)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds: either delta-seconds or an HTTP date (RFC 9110)."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def parse_twilio_date(value: str | None) -> datetime | None:
    """Twilio dates are RFC 2822 (``Thu, 30 Jul 2015 20:12:31 +0000``); returned in UTC."""
    if not value:
        return None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC)


def _twilio_time(when: datetime) -> str:
    # The format the official twilio library sends for DateSent filters.
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


class TwilioSms:
    """:class:`transports.sms.SmsTransport` over Twilio's Programmable Messaging REST API."""

    finds_lost_creates: ClassVar[bool] = True
    """Twilio lists messages by `To` and `DateSent`: a lost create can be placed."""
    lookup_sees_every_state: ClassVar[bool] = False
    """The `DateSent` list skips a message still queued or scheduled (no `date_sent`):
    not listed is not absent."""
    webhook_path: ClassVar[str] = "/v1/receipts/sms"
    """Herald's ingress route for Twilio's signed status callbacks."""

    def __init__(
        self,
        *,
        base_url: str,
        account_sid: str,
        auth_token: str,
        connect_timeout: float = 3.0,
        read_timeout: float = 10.0,
        client: httpx.AsyncClient | None = None,
        messaging_service_sid: str | None = None,
        page_size: int = 50,
    ) -> None:
        """Args:
        base_url: ``https://api.twilio.com`` or the simulator's URL.
        account_sid: the ``AC...`` account; also the basic-auth user.
        auth_token: the basic-auth password.
        connect_timeout: seconds to open a connection (nothing has left before it).
        read_timeout: seconds to wait for each read; a create that times out here is
            ambiguous, because the request had left.
        client: a shared ``httpx.AsyncClient``; not closed by :meth:`aclose`.
        messaging_service_sid: send through this Messaging Service instead of ``From``.
        page_size: ``PageSize`` for list calls made by :meth:`find`.
        """
        self._base_url = base_url.rstrip("/")
        self._account_sid = account_sid
        self._auth = httpx.BasicAuth(account_sid, auth_token)
        self._timeout = httpx.Timeout(read_timeout, connect=connect_timeout, pool=connect_timeout)
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient()
        self._messaging_service_sid = messaging_service_sid
        self._page_size = page_size

    @property
    def _messages_path(self) -> str:
        return f"/{API_VERSION}/Accounts/{self._account_sid}/Messages"

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> TwilioSms:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def check_account(self, *, timeout: float = 5.0) -> str:
        """Read the Account resource (`GET /2010-04-01/Accounts/{sid}.json`): the cheapest
        call that proves the SID and token, and says whether the account may send."""
        body = await authenticated_read(
            self._client,
            f"{self._base_url}/{API_VERSION}/Accounts/{self._account_sid}.json",
            auth=self._auth,
            timeout=httpx.Timeout(timeout),
            code_of=lambda body: (
                str(body["code"]) if isinstance(body, dict) and body.get("code") else None
            ),
        )
        status = body.get("status") if isinstance(body, dict) else None
        if status != "active":
            raise AccountCheckFailed(f"account {self._account_sid} is {status or 'unreadable'}")
        return f"account {self._account_sid} active"

    # -- the port ---------------------------------------------------------------

    async def submit(self, msg: SmsMessage) -> SmsSubmitted:
        form: dict[str, str] = {"To": msg.to, "Body": msg.body}
        if self._messaging_service_sid:
            form["MessagingServiceSid"] = self._messaging_service_sid
        elif MESSAGING_SERVICE_SID.match(msg.sender):
            # A sender that is a Messaging Service goes as MessagingServiceSid, never From.
            form["MessagingServiceSid"] = msg.sender
        else:
            form["From"] = msg.sender
        if msg.status_callback:
            form["StatusCallback"] = msg.status_callback
        if msg.validity_seconds is not None:
            form["ValidityPeriod"] = str(msg.validity_seconds)
        if msg.send_at is not None:
            form["ScheduleType"] = "fixed"
            form["SendAt"] = _twilio_time(msg.send_at)
        data = await self._call("POST", f"{self._messages_path}.json", data=form, creates=True)
        raw_status = data.get("status") or "queued"
        submitted = SmsSubmitted(
            remote_id=data["sid"],
            raw_status=raw_status,
            provider_at=parse_twilio_date(data.get("date_created")),
            segments=_int_or_none(data.get("num_segments")),
            state=normalize_provider_status(raw_status),
        )
        log.info("sms submitted sid=%s status=%s", submitted.remote_id, submitted.raw_status)
        return submitted

    async def status(self, remote_id: str) -> ProviderStatus:
        try:
            data = await self._call("GET", f"{self._messages_path}/{remote_id}.json")
        except SmsError as err:
            raise not_found(err, code="20404") from err
        return self._provider_status(data)

    async def find(
        self,
        *,
        to: str,
        sent_after: datetime,
        sent_before: datetime,
        body_sha256: str,
    ) -> list[ProviderStatus]:
        # Twilio's DateSent filters have one-second resolution: widen to whole seconds so
        # a message sent in the window's first or last second is not missed. A message
        # still `queued` has no date_sent and is not listed yet: an empty answer is "not
        # found so far", not "never sent".
        after = sent_after.astimezone(UTC).replace(microsecond=0)
        before = sent_before.astimezone(UTC)
        if before.microsecond:
            before = before.replace(microsecond=0) + timedelta(seconds=1)
        params: dict[str, str] | None = {
            "To": to,
            "DateSent>": _twilio_time(after),
            "DateSent<": _twilio_time(before),
            "PageSize": str(self._page_size),
        }
        path = f"{self._messages_path}.json"
        found: list[ProviderStatus] = []
        pages = 0
        while path:
            data = await self._call("GET", path, params=params)
            pages += 1
            for item in data.get("messages") or []:
                status = self._provider_status(item)
                if status.body_sha256 == body_sha256:
                    found.append(status)
            path = data.get("next_page_uri") or ""
            params = None  # next_page_uri carries the filters and the page token
        log.info("sms find pages=%d matches=%d", pages, len(found))
        return found

    async def cancel(self, remote_id: str) -> ProviderStatus:
        data = await self._call(
            "POST", f"{self._messages_path}/{remote_id}.json", data={"Status": "canceled"}
        )
        status = self._provider_status(data)
        log.info("sms cancel sid=%s status=%s", remote_id, status.raw_status)
        return status

    # -- HTTP and error mapping -------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        *,
        data: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        creates: bool = False,
    ) -> dict[str, Any]:
        """One HTTP request. ``creates`` marks the one call that is not safe to repeat."""
        url = path if path.startswith("http") else f"{self._base_url}{path}"
        what = "create" if creates else f"{method} {path.rsplit('/', 1)[-1]}"
        try:
            response = await self._client.request(
                method, url, data=data, params=params, auth=self._auth, timeout=self._timeout
            )
        except httpx.TransportError as exc:
            raise unanswered(exc, what=what, creates=creates) from exc
        if response.status_code < 300:
            try:
                return response.json()
            except ValueError as exc:
                raise unreadable(what, http_status=response.status_code, creates=creates) from exc
        raise self._error(response, what=what, creates=creates)

    def _error(self, response: httpx.Response, *, what: str, creates: bool) -> SmsError:
        status = response.status_code
        body = answer_body(response)
        code = body.get("code")
        code_text = str(code) if code not in (None, "") else None
        log.warning("sms %s failed http=%d code=%s", what, status, code_text)
        return refusal(
            what,
            http_status=status,
            code=code_text,
            provider_text=redact(str(body.get("message") or ""))[:200],
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
            creates=creates,
            # Twilio's JSON error body (`code`, `message`, `more_info`, `status`); a 4xx
            # without it (a proxy's page, a load balancer's) says nothing of Twilio.
            provider_body=code_text is not None and isinstance(body.get("message"), str),
            table=TWILIO_ERRORS,
        )

    @staticmethod
    def _provider_status(data: dict[str, Any]) -> ProviderStatus:
        body = data.get("body")
        code = data.get("error_code")
        raw_status = data.get("status") or ""
        return ProviderStatus(
            remote_id=data["sid"],
            raw_status=raw_status,
            state=normalize_provider_status(raw_status),
            error_code=str(code) if code not in (None, "", 0) else None,
            provider_at=parse_twilio_date(data.get("date_updated")),
            sent_at=parse_twilio_date(data.get("date_sent")),
            created_at=parse_twilio_date(data.get("date_created")),
            body_sha256=content_sha256(body) if body is not None else None,
            segments=_int_or_none(data.get("num_segments")),
        )


__all__ = ["TwilioSms", "parse_retry_after", "parse_twilio_date", "redact"]
