"""The carrier simulator: a real HTTP server speaking Twilio's Messages API subset.

It backs ``herald dev``/``make demo``, the tests and the benchmarks. It creates messages,
moves them through ``queued -> sent -> delivered`` on timers, POSTs status callbacks
signed exactly like Twilio (``X-Twilio-Signature`` through ``twilio``'s
``RequestValidator``, plus a stable ``I-Twilio-Idempotency-Token``), and misbehaves on
purpose for the destinations in :data:`FAULT_NUMBERS` or any destination scripted at run
time through ``POST /_sim/script``. It counts every create request it receives, including
the one whose response it withholds. See ``docs/simulator.md``.

Control endpoints (not part of Twilio's API):

- ``POST /_sim/script``  ``{"to": "+44...", "fault": "rate_limit", "count": 2, "seconds": 1}``
  or ``{"inbound_url": "http://..."}``; ``"fault": "none"`` clears a destination;
  ``{"to": ..., "fault": "api_error:21408", "http_status": 403}`` refuses creates with that
  4xx and code (default 400).
- ``GET /_sim/stats``    submission counts per token, per destination, in total.
- ``GET /_sim/callbacks`` every callback POSTed so far (URL, params, headers, answer).
- ``POST /_sim/inbound`` ``{"from": "+44...", "to": "+1...", "body": "STOP"}``.
- ``POST /_sim/reset``   forget messages, counts, run-time scripts and callbacks.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import math
import re
import secrets
import socket
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from twilio.request_validator import RequestValidator

from domain.senders import SmsSenderKind, parse_sms_sender

log = logging.getLogger(__name__)

API_VERSION = "2010-04-01"

FAULTS = (
    "accept_then_timeout",
    "rate_limit",
    "unavailable",
    "slow_response",
    "delayed_receipt",
    "duplicate_receipts",
    "out_of_order",
    "never_resolves",
    "api_error",
    "failed",
    "undelivered",
)
"""Fault kinds. ``api_error``, ``failed`` and ``undelivered`` take a code: ``api_error:21211``."""


@dataclass(frozen=True)
class SimDelays:
    """Timings of the simulated carrier, in seconds."""

    sent: float = 0.2
    """From create (or ``SendAt``) to ``sent``."""
    delivered: float = 0.5
    """From ``sent`` to the final receipt."""
    delayed_receipt: float = 5.0
    """From ``sent`` to the final receipt for the ``delayed_receipt`` fault."""
    slow_response: float = 2.0
    """How long a ``slow_response`` create takes to answer (below a 10 s read timeout)."""
    hang: float = 30.0
    """How long ``accept_then_timeout`` withholds the response; cut short at shutdown."""
    retry_after: int = 1
    """The ``Retry-After`` header (seconds) on 429 and 503 answers."""


@dataclass(frozen=True)
class Fault:
    """A scripted misbehaviour for one destination."""

    kind: str
    code: int | None = None
    """The error code for ``api_error``, ``failed`` and ``undelivered``."""
    count: int | None = None
    """``rate_limit``/``unavailable``: how many create calls fail (default 2 and 1);
    ``duplicate_receipts``: how many times each callback is delivered (default 3);
    ``never_resolves``: how many submissions never resolve (default: all of them)."""
    seconds: float | None = None
    """Overrides the matching :class:`SimDelays` value for this destination."""
    http_status: int | None = None
    """``api_error``: the 4xx the create is refused with (default 400), e.g. 403 or 404."""

    @classmethod
    def parse(
        cls,
        spec: str,
        *,
        count: int | None = None,
        seconds: float | None = None,
        http_status: int | None = None,
    ) -> Fault:
        kind, _, code = spec.partition(":")
        kind = kind.strip()
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}; known: {', '.join(FAULTS)}")
        needs_code = kind in ("api_error", "failed", "undelivered")
        if needs_code and not code:
            raise ValueError(f"fault {kind!r} needs a code, e.g. {kind}:30003")
        if code and not needs_code:
            raise ValueError(f"fault {kind!r} takes no code")
        if http_status is not None and (
            kind != "api_error" or not 400 <= http_status <= 499 or http_status == 429
        ):
            raise ValueError("http_status is a 4xx other than 429, for api_error only")
        if count is None:
            count = {"rate_limit": 2, "unavailable": 1, "duplicate_receipts": 3}.get(kind)
        return cls(kind, int(code) if code else None, count, seconds, http_status)

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.code}" if self.code is not None else self.kind


# Valid UK mobile numbers (phonenumbers: valid, MOBILE, region GB) in the 07400 range.
# Behaviours end in 0000NN; error codes are spelled in the last five digits.
FAULT_NUMBERS: dict[str, Fault] = {
    "+447400000001": Fault.parse("accept_then_timeout"),
    "+447400000002": Fault.parse("rate_limit"),
    "+447400000003": Fault.parse("unavailable"),
    "+447400000004": Fault.parse("slow_response"),
    "+447400000005": Fault.parse("delayed_receipt"),
    "+447400000006": Fault.parse("duplicate_receipts"),
    "+447400000007": Fault.parse("out_of_order"),
    "+447400000008": Fault.parse("never_resolves"),
    "+447400021211": Fault.parse("api_error:21211"),
    "+447400021610": Fault.parse("api_error:21610"),
    "+447400021614": Fault.parse("api_error:21614"),
    "+447400030003": Fault.parse("undelivered:30003"),
    "+447400030004": Fault.parse("undelivered:30004"),
    "+447400030005": Fault.parse("undelivered:30005"),
    "+447400030006": Fault.parse("undelivered:30006"),
    "+447400030007": Fault.parse("failed:30007"),
}

# Short texts after Twilio's error catalogue; messages echo no number (unlike Twilio's).
ERROR_MESSAGES: dict[int, str] = {
    20003: "Authenticate",
    20404: "The requested resource was not found",
    20429: "Too Many Requests",
    21211: "Invalid 'To' Phone Number",
    21212: "Invalid 'From' Number",
    21610: "Attempt to send to unsubscribed recipient",
    21614: "'To' number is not a valid mobile number",
    30003: "Unreachable destination handset",
    30004: "Message blocked",
    30005: "Unknown destination handset",
    30006: "Landline or unreachable carrier",
    30007: "Message filtered",
    30409: "This message cannot be canceled",
}

_GSM7 = set(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?¡ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    "ÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà^{}\\[~]|€"
)


def count_segments(body: str) -> int:
    """Segments as carriers bill them: GSM-7 160/153 per part, otherwise UCS-2 70/67."""
    if all(ch in _GSM7 for ch in body):
        single, multi = 160, 153
    else:
        single, multi = 70, 67
    return 1 if len(body) <= single else math.ceil(len(body) / multi)


def _rfc2822(when: datetime | None) -> str | None:
    return format_datetime(when) if when else None


def _now() -> datetime:
    return datetime.now(UTC)


def _parse_filter_time(value: str) -> datetime | None:
    """DateSent filter values: ``YYYY-MM-DD`` or ``YYYY-MM-DDTHH:MM:SSZ``."""
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@dataclass
class SimMessage:
    """One message the simulator holds."""

    sid: str
    to: str
    from_: str | None
    messaging_service_sid: str | None
    body: str
    status: str
    status_callback: str | None
    token: str | None
    date_created: datetime
    date_updated: datetime
    date_sent: datetime | None = None
    send_at: datetime | None = None
    validity_period: int | None = None
    error_code: int | None = None

    def resource(self, account_sid: str) -> dict[str, Any]:
        uri = f"/{API_VERSION}/Accounts/{account_sid}/Messages/{self.sid}.json"
        return {
            "account_sid": account_sid,
            "api_version": API_VERSION,
            "body": self.body,
            "date_created": _rfc2822(self.date_created),
            "date_sent": _rfc2822(self.date_sent),
            "date_updated": _rfc2822(self.date_updated),
            "direction": "outbound-api",
            "error_code": self.error_code,
            "error_message": ERROR_MESSAGES.get(self.error_code) if self.error_code else None,
            "from": self.from_,
            "messaging_service_sid": self.messaging_service_sid,
            "num_media": "0",
            "num_segments": str(count_segments(self.body)),
            "price": None,
            "price_unit": "USD",
            "sid": self.sid,
            "status": self.status,
            "subresource_uris": {"media": uri.replace(".json", "/Media.json")},
            "to": self.to,
            "uri": uri,
        }


@dataclass
class CallbackRecord:
    """One callback POST the simulator made (kept for tests and ``GET /_sim/callbacks``)."""

    url: str
    params: dict[str, str]
    headers: dict[str, str]
    status_code: int | None
    """The receiver's HTTP answer, or ``None`` if it could not be reached."""
    kind: str = "status"
    """``status`` (delivery receipt) or ``inbound`` (an inbound SMS webhook)."""


@dataclass
class SimStats:
    """Counts of create requests and created messages (`GET /_sim/stats`)."""

    total: int = 0
    by_token: Counter[str] = field(default_factory=Counter)
    by_to: Counter[str] = field(default_factory=Counter)
    requests_total: int = 0
    requests_by_token: Counter[str] = field(default_factory=Counter)
    rejected_total: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "by_token": dict(self.by_token),
            "by_to": dict(self.by_to),
            "requests_total": self.requests_total,
            "requests_by_token": dict(self.requests_by_token),
            "rejected_total": self.rejected_total,
        }


def _token_of(status_callback: str | None) -> str | None:
    if not status_callback:
        return None
    values = parse_qs(urlsplit(status_callback).query).get("token")
    return values[0] if values else None


_MESSAGING_SERVICE_SID = re.compile(r"^MG[0-9a-f]{32}$")


def _valid_from(value: str) -> bool:
    """An E.164 number or an alphanumeric sender id, as Twilio takes in `From`."""
    try:
        return parse_sms_sender(value).kind != SmsSenderKind.MESSAGING_SERVICE
    except ValueError:
        return False


def _error(status: int, code: int, message: str | None = None, **headers: str) -> JSONResponse:
    return JSONResponse(
        {
            "code": code,
            "message": message or ERROR_MESSAGES.get(code, "Error"),
            "more_info": f"https://www.twilio.com/docs/errors/{code}",
            "status": status,
        },
        status_code=status,
        headers=headers or None,
    )


class CarrierSimulator:
    """The simulator's state and behaviour; :func:`create_simulator_app` wraps it in HTTP."""

    def __init__(
        self,
        *,
        account_sid: str,
        auth_token: str,
        delays: SimDelays | None = None,
        inbound_url: str | None = None,
        fault_numbers: dict[str, Fault] | None = None,
    ) -> None:
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.delays = delays or SimDelays()
        self.inbound_url = inbound_url
        self._base_faults = dict(FAULT_NUMBERS if fault_numbers is None else fault_numbers)
        self._validator = RequestValidator(auth_token)
        self.outage: Any = None
        """Set by :class:`SimulatorServer`: ``outage(seconds)`` refuses connections."""
        self._aborted = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._http: httpx.AsyncClient | None = None
        self._reset_state()

    def _reset_state(self) -> None:
        self.messages: dict[str, SimMessage] = {}
        self.scripts: dict[str, Fault] = {}
        self._remaining: dict[str, int] = {}
        self.stats = SimStats()
        self.callbacks: list[CallbackRecord] = []

    # -- lifecycle of the simulator itself --------------------------------------

    def reset(self) -> None:
        """Forget everything but the configuration; running lifecycles are cancelled."""
        for task in list(self._tasks):
            task.cancel()
        self._reset_state()

    def abort(self) -> None:
        """Cut withheld responses short and stop every lifecycle (called at shutdown)."""
        self._aborted.set()
        for task in list(self._tasks):
            task.cancel()

    async def aclose(self) -> None:
        self.abort()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def _pause(self, seconds: float) -> None:
        """Sleep, unless the simulator is shutting down."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._aborted.wait(), timeout=max(0.0, seconds))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(5.0, connect=2.0))
        return self._http

    # -- faults -----------------------------------------------------------------

    def fault_for(self, to: str) -> Fault | None:
        if to in self.scripts:
            fault = self.scripts[to]
            return None if fault.kind == "none" else fault
        return self._base_faults.get(to)

    def script(self, to: str, fault: Fault | None) -> None:
        self.scripts[to] = fault or Fault("none")
        self._remaining.pop(to, None)

    def _take_limited(self, to: str, fault: Fault) -> bool:
        """For count-limited faults: True while this call is one of the first N."""
        left = self._remaining.setdefault(to, fault.count or 0)
        if left <= 0:
            return False
        self._remaining[to] = left - 1
        return True

    # -- the Messages API -------------------------------------------------------

    def authorized(self, request: Request, account_sid: str) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic" or account_sid != self.account_sid:
            return False
        try:
            user, _, password = base64.b64decode(encoded).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        return secrets.compare_digest(f"{user}:{password}", f"{self.account_sid}:{self.auth_token}")

    async def create(self, form: dict[str, str]) -> Response:
        to = form.get("To", "")
        callback = form.get("StatusCallback")
        token = _token_of(callback)
        self.stats.requests_total += 1
        if token:
            self.stats.requests_by_token[token] += 1
        if not to or not form.get("Body"):
            self.stats.rejected_total += 1
            missing = "To" if not to else "Body"
            return _error(400, 21602 if missing == "Body" else 21604, f"'{missing}' is required")
        from_, service = form.get("From"), form.get("MessagingServiceSid")
        if not from_ and not service:
            self.stats.rejected_total += 1
            return _error(400, 21603, "A 'From' or 'MessagingServiceSid' is required")
        if from_ and not _valid_from(from_):
            # As the real API: a policy alias such as `herald-us-10dlc` is no sender.
            self.stats.rejected_total += 1
            return _error(
                400,
                21212,
                "The 'From' number is not a valid phone number, shortcode, or alphanumeric "
                "sender ID.",
            )
        if service and not _MESSAGING_SERVICE_SID.match(service):
            self.stats.rejected_total += 1
            return _error(400, 21701, "The Messaging Service Sid is invalid")

        fault = self.fault_for(to)
        kind = fault.kind if fault else None
        if fault and kind in ("rate_limit", "unavailable") and self._take_limited(to, fault):
            self.stats.rejected_total += 1
            retry = str(self.delays.retry_after)
            if kind == "rate_limit":
                return _error(429, 20429, **{"Retry-After": retry})
            return _error(503, 20503, "Service Unavailable", **{"Retry-After": retry})
        if fault and kind == "api_error":
            self.stats.rejected_total += 1
            assert fault.code is not None
            return _error(fault.http_status or 400, fault.code)
        if fault and kind == "never_resolves" and fault.count is not None:
            # Limited to the first N submissions to this destination: later ones (a
            # resend) go through normally.
            if not self._take_limited(to, fault):
                fault, kind = None, None

        now = _now()
        send_at = None
        if form.get("ScheduleType") == "fixed" and form.get("SendAt"):
            send_at = _parse_filter_time(form["SendAt"])
        message = SimMessage(
            sid="SM" + uuid.uuid4().hex,
            to=to,
            from_=form.get("From"),
            messaging_service_sid=form.get("MessagingServiceSid"),
            body=form["Body"],
            status="scheduled" if send_at else ("accepted" if not form.get("From") else "queued"),
            status_callback=callback,
            token=token,
            date_created=now,
            date_updated=now,
            send_at=send_at,
            validity_period=int(form["ValidityPeriod"]) if form.get("ValidityPeriod") else None,
        )
        self.messages[message.sid] = message
        # Counted here, before any response is withheld: the message exists now.
        self.stats.total += 1
        self.stats.by_to[to] += 1
        if token:
            self.stats.by_token[token] += 1
        self._spawn(self._lifecycle(message, fault))
        body = message.resource(self.account_sid)
        if kind == "accept_then_timeout":
            await self._pause(fault.seconds if fault and fault.seconds else self.delays.hang)
        elif kind == "slow_response":
            await self._pause(
                fault.seconds if fault and fault.seconds else self.delays.slow_response
            )
        return JSONResponse(body, status_code=201)

    def list(self, query: list[tuple[str, str]]) -> dict[str, Any]:
        params = dict(query)
        to, from_ = params.get("To"), params.get("From")
        after = _parse_filter_time(params["DateSent>"]) if "DateSent>" in params else None
        before = _parse_filter_time(params["DateSent<"]) if "DateSent<" in params else None
        on = params.get("DateSent")
        page_size = max(1, min(1000, int(params.get("PageSize", "50"))))
        page = max(0, int(params.get("Page", "0")))

        def keep(m: SimMessage) -> bool:
            if to and m.to != to or from_ and m.from_ != from_:
                return False
            if (after or before or on) and m.date_sent is None:
                return False  # like Twilio: DateSent filters skip messages not sent yet
            sent = m.date_sent.replace(microsecond=0) if m.date_sent else None
            if after and sent and sent < after:
                return False
            if before and sent and sent > before:
                return False
            return not (on and sent and sent.date().isoformat() != on[:10])

        matches = sorted(
            (m for m in self.messages.values() if keep(m)),
            key=lambda m: m.date_created,
            reverse=True,
        )
        chunk = matches[page * page_size : (page + 1) * page_size]
        base = f"/{API_VERSION}/Accounts/{self.account_sid}/Messages.json"
        filters = [(k, v) for k, v in query if k not in ("Page", "PageSize", "PageToken")]

        def page_uri(n: int) -> str:
            return f"{base}?{urlencode([*filters, ('PageSize', page_size), ('Page', n)])}"

        more = (page + 1) * page_size < len(matches)
        return {
            "messages": [m.resource(self.account_sid) for m in chunk],
            "page": page,
            "page_size": page_size,
            "uri": page_uri(page),
            "first_page_uri": page_uri(0),
            "next_page_uri": page_uri(page + 1) if more else None,
            "previous_page_uri": page_uri(page - 1) if page else None,
            "start": page * page_size,
            "end": page * page_size + max(0, len(chunk) - 1),
        }

    def cancel(self, message: SimMessage) -> Response:
        if message.status == "canceled":
            return JSONResponse(message.resource(self.account_sid))
        if message.status != "scheduled":
            return _error(400, 30409)
        message.status = "canceled"
        message.date_updated = _now()
        return JSONResponse(message.resource(self.account_sid))

    # -- the carrier ------------------------------------------------------------

    def _set(self, m: SimMessage, status: str, code: int | None = None) -> bool:
        """Move a message on, unless it was cancelled meanwhile."""
        if m.status == "canceled" or self.messages.get(m.sid) is not m:
            return False
        m.status = status
        m.error_code = code
        m.date_updated = _now()
        if status == "sent" or (status in ("delivered", "undelivered") and not m.date_sent):
            m.date_sent = m.date_updated
        return True

    async def _lifecycle(self, m: SimMessage, fault: Fault | None) -> None:
        kind = fault.kind if fault else None
        d = self.delays
        if m.send_at is not None:
            await asyncio.sleep(max(0.0, (m.send_at - _now()).total_seconds()))
            if not self._set(m, "queued"):
                return
        await asyncio.sleep(d.sent)
        if kind == "failed":
            if self._set(m, "failed", fault.code if fault else None):
                await self._callback(m, "failed", m.error_code, fault)
            return
        if not self._set(m, "sent"):
            return
        if kind == "never_resolves":
            return  # stays `sent`, and no receipt ever comes
        if kind == "out_of_order":
            await asyncio.sleep(d.delivered)
            if self._set(m, "delivered"):
                await self._callback(m, "delivered", None, fault)
                await self._callback(m, "sent", None, fault)
            return
        await self._callback(m, "sent", None, fault)
        if kind == "delayed_receipt":
            await asyncio.sleep(fault.seconds if fault and fault.seconds else d.delayed_receipt)
        else:
            await asyncio.sleep(d.delivered)
        if kind == "undelivered":
            code = fault.code if fault else None
            if self._set(m, "undelivered", code):
                await self._callback(m, "undelivered", code, fault)
        elif self._set(m, "delivered"):
            await self._callback(m, "delivered", None, fault)

    def sign(self, url: str, params: dict[str, str]) -> str:
        """Twilio's signature over the full URL (query included) and the POST params."""
        return self._validator.compute_signature(url, params)

    async def _callback(
        self, m: SimMessage, status: str, code: int | None, fault: Fault | None
    ) -> None:
        if not m.status_callback:
            return
        params = {
            "MessageSid": m.sid,
            "SmsSid": m.sid,
            "MessageStatus": status,
            "SmsStatus": status,
            "To": m.to,
            "From": m.from_ or "",
            "AccountSid": self.account_sid,
            "ApiVersion": API_VERSION,
        }
        if m.messaging_service_sid:
            params["MessagingServiceSid"] = m.messaging_service_sid
        if code is not None:
            params["ErrorCode"] = str(code)
        # One token per (message, reported status): stable across every duplicate delivery.
        idem = uuid.uuid5(uuid.NAMESPACE_URL, f"{m.sid}/{status}").hex
        copies = fault.count if fault and fault.kind == "duplicate_receipts" and fault.count else 1
        for _ in range(copies):
            await self._post_signed(m.status_callback, params, idem, kind="status")

    async def _post_signed(
        self, url: str, params: dict[str, str], idempotency_token: str, *, kind: str
    ) -> CallbackRecord:
        headers = {
            "X-Twilio-Signature": self.sign(url, params),
            "I-Twilio-Idempotency-Token": idempotency_token,
            "User-Agent": "TwilioProxy/1.1 (herald-simulator)",
        }
        status_code: int | None = None
        try:
            response = await self.http.post(url, data=params, headers=headers)
            status_code = response.status_code
        except httpx.HTTPError as exc:
            log.warning("simulator callback not delivered: %s", type(exc).__name__)
        record = CallbackRecord(url, dict(params), headers, status_code, kind)
        self.callbacks.append(record)
        return record

    async def inbound(self, *, from_: str, to: str, body: str) -> CallbackRecord:
        if not self.inbound_url:
            raise LookupError("no inbound_url configured")
        sid = "SM" + uuid.uuid4().hex
        params = {
            "MessageSid": sid,
            "SmsSid": sid,
            "SmsMessageSid": sid,
            "AccountSid": self.account_sid,
            "From": from_,
            "To": to,
            "Body": body,
            "NumMedia": "0",
            "NumSegments": str(count_segments(body)),
            "SmsStatus": "received",
            "ApiVersion": API_VERSION,
        }
        return await self._post_signed(self.inbound_url, params, sid, kind="inbound")


async def _form(request: Request) -> dict[str, str]:
    # Parsed by hand: Starlette's request.form() needs python-multipart, which Herald lacks.
    return dict(parse_qsl((await request.body()).decode(), keep_blank_values=True))


def create_simulator_app(
    *,
    account_sid: str,
    auth_token: str,
    delays: SimDelays | None = None,
    inbound_url: str | None = None,
    fault_numbers: dict[str, Fault] | None = None,
) -> Starlette:
    """The simulator as an ASGI app; its :class:`CarrierSimulator` is ``app.state.sim``."""
    sim = CarrierSimulator(
        account_sid=account_sid,
        auth_token=auth_token,
        delays=delays,
        inbound_url=inbound_url,
        fault_numbers=fault_numbers,
    )

    async def messages(request: Request) -> Response:
        if not sim.authorized(request, request.path_params["account"]):
            return _error(401, 20003)
        if request.method == "POST":
            return await sim.create(await _form(request))
        return JSONResponse(sim.list(list(request.query_params.multi_items())))

    async def message(request: Request) -> Response:
        if not sim.authorized(request, request.path_params["account"]):
            return _error(401, 20003)
        found = sim.messages.get(request.path_params["sid"])
        if found is None:
            return _error(404, 20404)
        if request.method == "POST":
            form = await _form(request)
            if form.get("Status") == "canceled":
                return sim.cancel(found)
            return _error(400, 21218, "Only Status=canceled is supported by the simulator")
        return JSONResponse(found.resource(sim.account_sid))

    async def script(request: Request) -> Response:
        payload = await request.json()
        if "inbound_url" in payload:
            sim.inbound_url = payload["inbound_url"]
        if "to" in payload:
            spec = payload.get("fault") or "none"
            try:
                fault = (
                    None
                    if spec == "none"
                    else Fault.parse(
                        spec,
                        count=payload.get("count"),
                        seconds=payload.get("seconds"),
                        http_status=payload.get("http_status"),
                    )
                )
            except ValueError as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            sim.script(payload["to"], fault)
        return JSONResponse(
            {
                "scripts": {to: f.label for to, f in sim.scripts.items()},
                "inbound_url": sim.inbound_url,
            }
        )

    async def stats(request: Request) -> Response:
        return JSONResponse(sim.stats.as_json())

    async def callbacks(request: Request) -> Response:
        return JSONResponse([asdict(c) for c in sim.callbacks])

    async def inbound(request: Request) -> Response:
        payload = await request.json()
        try:
            record = await sim.inbound(
                from_=payload["from"], to=payload.get("to", ""), body=payload.get("body", "")
            )
        except LookupError as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)
        except KeyError:
            return JSONResponse({"error": "'from' is required"}, status_code=400)
        return JSONResponse({"sid": record.params["MessageSid"], "status_code": record.status_code})

    async def reset(request: Request) -> Response:
        sim.reset()
        return JSONResponse({"reset": True})

    async def outage(request: Request) -> Response:
        return await start_outage(request, sim.outage)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await sim.aclose()

    prefix = f"/{API_VERSION}/Accounts/{{account}}"
    app = Starlette(
        routes=[
            Route(f"{prefix}/Messages.json", messages, methods=["GET", "POST"]),
            Route(f"{prefix}/Messages/{{sid}}.json", message, methods=["GET", "POST"]),
            Route("/_sim/script", script, methods=["POST"]),
            Route("/_sim/stats", stats, methods=["GET"]),
            Route("/_sim/callbacks", callbacks, methods=["GET"]),
            Route("/_sim/inbound", inbound, methods=["POST"]),
            Route("/_sim/reset", reset, methods=["POST"]),
            Route("/_sim/outage", outage, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    app.state.sim = sim
    return app


_OUTAGES: set[asyncio.Task[None]] = set()


def end_outages() -> None:
    """Cancel running outages (at shutdown: a server being stopped is not bound again)."""
    for task in list(_OUTAGES):
        task.cancel()


async def start_outage(request: Request, outage: Any) -> Response:
    """`POST /_sim/outage {"seconds": 20}`: answered first, then the server stops listening
    for that long (connections refused), then listens again on the same port. 409 when the
    app is not served by a simulator server (mounted elsewhere)."""
    payload = await request.json()
    seconds = payload.get("seconds") if isinstance(payload, dict) else None
    if not isinstance(seconds, int | float) or not 0 < seconds <= 600:
        return JSONResponse({"error": "'seconds' is a number in (0, 600]"}, status_code=400)
    if outage is None:
        return JSONResponse({"error": "not served by a simulator server"}, status_code=409)

    async def later() -> None:
        await asyncio.sleep(0.05)  # let this answer leave first
        await outage(float(seconds))

    task = asyncio.get_running_loop().create_task(later())
    _OUTAGES.add(task)
    task.add_done_callback(_OUTAGES.discard)
    return JSONResponse({"refusing_connections_for": seconds})


KEEP_ALIVE_SECONDS = 75
"""How long a served app keeps an idle connection open: longer than any client's pool
keeps one (httpx: 5 s), so a client never reuses a connection the server is closing.
With uvicorn's default (also 5 s) the two expiries race: a reused connection is reset
after the request left, which the SMS submit must treat as ambiguous (reconcile, then
`unknown`) though nothing was sent."""


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves the host process's signal handlers alone."""

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[override]
        yield


class LoopbackServer:
    """Any ASGI app on a real socket, inside the caller's event loop (uvicorn).

    ``await start()`` returns once the port is bound and uvicorn reports it started;
    ``port=0`` picks a free port, and :attr:`port`/:attr:`url` report the real one.
    """

    def __init__(
        self, app: Any, *, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"
    ) -> None:
        self.app = app
        self.host = host
        self._port = port
        self._log_level = log_level
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None
        self._socket: socket.socket | None = None

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}"

    async def start(self, *, timeout: float = 10.0) -> None:
        if self._task is not None:
            raise RuntimeError("server already started")
        # Bound here, so the port is known (and held) before uvicorn runs.
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._port))
        sock.setblocking(False)
        self._port = sock.getsockname()[1]
        self._socket = sock
        config = uvicorn.Config(
            self.app,
            log_level=self._log_level,
            lifespan="on",
            timeout_graceful_shutdown=2,
            access_log=False,
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
        )
        self._server = _EmbeddedServer(config)
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._server.serve(sockets=[sock]))
        deadline = loop.time() + timeout
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what uvicorn raised
                raise RuntimeError("server exited during startup")
            if loop.time() > deadline:
                await self.stop()
                raise TimeoutError(f"server did not start within {timeout} s")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await asyncio.wait_for(self._task, timeout=10)
        finally:
            if self._socket is not None:
                self._socket.close()
            self._server = None
            self._task = None

    async def refuse_connections(self, seconds: float) -> None:
        """An outage as a client sees it: the listening socket is closed (connections are
        refused before any byte leaves), then bound again on the same port."""
        await LoopbackServer.stop(self)
        await asyncio.sleep(seconds)  # cancelled by stop(): then it stays closed
        await LoopbackServer.start(self)

    async def __aenter__(self) -> LoopbackServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class SimulatorServer(LoopbackServer):
    """The carrier simulator on a real socket: ``await start()``, ``.url``, ``await stop()``.

    ``stop()`` first cuts withheld (accept-then-timeout) responses short, so shutdown
    does not wait for them, then stops every lifecycle and closes the server.
    """

    def __init__(
        self,
        *,
        account_sid: str,
        auth_token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        delays: SimDelays | None = None,
        inbound_url: str | None = None,
        fault_numbers: dict[str, Fault] | None = None,
        log_level: str = "warning",
    ) -> None:
        app = create_simulator_app(
            account_sid=account_sid,
            auth_token=auth_token,
            delays=delays,
            inbound_url=inbound_url,
            fault_numbers=fault_numbers,
        )
        super().__init__(app, host=host, port=port, log_level=log_level)
        self.sim.outage = self.refuse_connections

    @property
    def sim(self) -> CarrierSimulator:
        return self.app.state.sim

    async def stop(self) -> None:
        self.sim.abort()
        end_outages()
        try:
            await super().stop()
        finally:
            await self.sim.aclose()

    async def __aenter__(self) -> SimulatorServer:
        await self.start()
        return self


async def run_simulator(
    host: str = "127.0.0.1",
    port: int = 8089,
    *,
    account_sid: str,
    auth_token: str,
    delays: SimDelays | None = None,
    inbound_url: str | None = None,
) -> None:
    """Run the simulator until cancelled (for a standalone process)."""
    server = SimulatorServer(
        account_sid=account_sid,
        auth_token=auth_token,
        host=host,
        port=port,
        delays=delays,
        inbound_url=inbound_url,
    )
    await server.start()
    log.info("carrier simulator on %s", server.url)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


__all__ = [
    "FAULT_NUMBERS",
    "LoopbackServer",
    "CallbackRecord",
    "CarrierSimulator",
    "Fault",
    "SimDelays",
    "SimStats",
    "SimulatorServer",
    "count_segments",
    "create_simulator_app",
    "run_simulator",
]
