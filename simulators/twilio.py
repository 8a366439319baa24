"""The carrier simulator: a real HTTP server speaking Twilio's Messages API subset.

It backs ``herald dev``/``make demo``, the tests and the benchmarks. It creates messages,
moves them through ``queued -> sent -> delivered`` on timers, POSTs status callbacks
signed exactly like Twilio (``X-Twilio-Signature`` through ``twilio``'s
``RequestValidator``, plus a stable ``I-Twilio-Idempotency-Token``), and misbehaves on
purpose for the destinations in :data:`FAULT_NUMBERS` or any destination scripted at run
time through ``POST /_sim/script``. It counts every create request it receives, including
the one whose response it withholds. ``GET /2010-04-01/Accounts/{sid}.json`` answers the
Account resource to the account's credentials (what ``herald doctor`` reads). See
``docs/simulator.md``.

Control endpoints (not part of Twilio's API):

- ``POST /_sim/script``  ``{"to": "+44...", "fault": "rate_limit", "count": 2, "seconds": 1}``
  or ``{"inbound_url": "http://..."}``; ``"fault": "none"`` clears a destination;
  ``{"to": ..., "fault": "api_error:21408", "http_status": 403}`` refuses creates with that
  4xx and code (default 400).
- ``GET /_sim/stats``    submission counts per token, per destination, in total.
- ``GET /_sim/callbacks`` every callback POSTed so far (URL, params, headers, answer).
- ``POST /_sim/inbound`` ``{"from": "+44...", "to": "+1...", "body": "STOP"}``.
- ``POST /_sim/reset``   forget messages, counts, run-time scripts and callbacks.
- ``POST /_sim/credential`` ``{"secret": "..."}``: the auth token the account accepts from
  now on (a rotated token): a client with another is refused, 401 code 20003.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import re
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from twilio.request_validator import RequestValidator

from domain.senders import SmsSenderKind, parse_sms_sender
from simulators.carrier import (
    FAULT_NUMBERS,
    CallbackRecord,
    Fault,
    Receipt,
    ScriptedCarrier,
    SimDelays,
    SimStats,
    callback_token,
    carrier_app,
    control_routes,
)
from simulators.server import CarrierServer

log = logging.getLogger(__name__)

API_VERSION = "2010-04-01"

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


class CarrierSimulator(ScriptedCarrier[SimMessage]):
    """The simulator's state and behaviour; :func:`create_simulator_app` wraps it in HTTP."""

    rate_limit_code = 20429
    unavailable_code = 20503
    failed_status = "failed"
    undelivered_status = "undelivered"

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
        self._validator = RequestValidator(auth_token)
        super().__init__(delays=delays, inbound_url=inbound_url, fault_numbers=fault_numbers)

    def error(self, status: int, code: int, message: str | None = None, **headers: str) -> Response:
        return _error(status, code, message, **headers)

    def accept_credential(self, secret: str) -> None:
        # Twilio signs its callbacks with the account's auth token: the new one from now.
        self.auth_token = secret
        self._validator = RequestValidator(secret)

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
        token = callback_token(callback)
        self._count_request(token)
        if not to or not form.get("Body"):
            missing = "To" if not to else "Body"
            return self._reject(
                400, 21602 if missing == "Body" else 21604, f"'{missing}' is required"
            )
        from_, service = form.get("From"), form.get("MessagingServiceSid")
        if not from_ and not service:
            return self._reject(400, 21603, "A 'From' or 'MessagingServiceSid' is required")
        if from_ and not _valid_from(from_):
            # As the real API: a policy alias such as `herald-us-10dlc` is no sender.
            return self._reject(
                400,
                21212,
                "The 'From' number is not a valid phone number, shortcode, or alphanumeric "
                "sender ID.",
            )
        if service and not _MESSAGING_SERVICE_SID.match(service):
            return self._reject(400, 21701, "The Messaging Service Sid is invalid")

        fault = self.fault_for(to)
        refused = self._refused_by_script(to, fault)
        if refused is not None:
            return refused
        fault = self._within_count(to, fault)

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
        self._hold(
            message.sid, message, to=to, token=token, lifecycle=self._lifecycle(message, fault)
        )
        body = message.resource(self.account_sid)
        await self._answer_delay(fault)
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

    async def _due(self, m: SimMessage) -> bool:
        if m.send_at is None:
            return True
        await asyncio.sleep(max(0.0, (m.send_at - _now()).total_seconds()))
        return self._set(m, "queued")

    def sign(self, url: str, params: dict[str, str]) -> str:
        """Twilio's signature over the full URL (query included) and the POST params."""
        return self._validator.compute_signature(url, params)

    def _receipt(self, m: SimMessage, status: str, code: int | None) -> Receipt | None:
        url = m.status_callback
        if not url:
            return None
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

        async def post(copies: int) -> None:
            for _ in range(copies):
                await self._post_signed(url, params, idem, kind="status")

        return post

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
        await sim.read_delay(request.query_params.get("To"))
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
        await sim.read_delay(found.to)
        return JSONResponse(found.resource(sim.account_sid))

    started = _now()

    async def account(request: Request) -> Response:
        """The Account resource (`GET /2010-04-01/Accounts/{sid}.json`), Twilio's cheapest
        authenticated read: what `herald doctor` asks to prove the credentials."""
        sid = request.path_params["account"]
        if not sim.authorized(request, sid):
            return _error(401, 20003)
        uri = f"/{API_VERSION}/Accounts/{sid}"
        return JSONResponse(
            {
                "auth_token": sim.auth_token,
                "date_created": _rfc2822(started),
                "date_updated": _rfc2822(started),
                "friendly_name": "Herald carrier simulator",
                "owner_account_sid": sid,
                "sid": sid,
                "status": "active",
                "subresource_uris": {"messages": f"{uri}/Messages.json"},
                "type": "Full",
                "uri": f"{uri}.json",
            }
        )

    prefix = f"/{API_VERSION}/Accounts/{{account}}"
    routes = [
        Route(f"{prefix}.json", account, methods=["GET"]),
        Route(f"{prefix}/Messages.json", messages, methods=["GET", "POST"]),
        Route(f"{prefix}/Messages/{{sid}}.json", message, methods=["GET", "POST"]),
        *control_routes(sim, lambda record: {"sid": record.params["MessageSid"]}),
    ]
    return carrier_app(sim, routes)


class SimulatorServer(CarrierServer):
    """The carrier simulator on a real socket: ``await start()``, ``.url``, ``await stop()``."""

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

    @property
    def sim(self) -> CarrierSimulator:
        return self.app.state.sim


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
