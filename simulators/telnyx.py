"""The carrier simulator's second provider: Telnyx Messaging API v2, on its own port.

The same carrier as :mod:`simulators.twilio` (the same fault names and fault numbers,
the same control endpoints, the same counting of every create) behind Telnyx's API
subset: ``POST /v2/messages`` (JSON, ``Authorization: Bearer``), ``GET
/v2/messages/{id}``, ``GET /v2/balance`` (the read ``herald doctor`` proves the key with),
and message events (``message.sent``, ``message.finalized``,
``message.received``) POSTed as JSON and signed with Ed25519 exactly as Telnyx signs them
(``telnyx-signature-ed25519`` over ``f"{telnyx-timestamp}|{raw body}"``). Each simulator
has its own key pair (:attr:`TelnyxCarrier.public_key`, base64), generated when it is
made unless one is given, so a stack's ingress trusts only its own simulator.

The built-in fault numbers spell Twilio's codes; here they answer with Telnyx's
equivalent (:data:`TELNYX_CODE_FOR`): ``+447400021610`` is refused with 40300 (opted
out). A scripted ``api_error:<code>`` / ``failed:<code>`` / ``undelivered:<code>`` uses
the code as given. See ``docs/simulator.md``.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import time
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from domain.senders import parse_sms_sender
from simulators.carrier import (
    CallbackRecord,
    Fault,
    Receipt,
    ScriptedCarrier,
    SimDelays,
    callback_token,
    carrier_app,
    control_routes,
)
from simulators.server import CarrierServer
from simulators.twilio import count_segments

log = logging.getLogger(__name__)

TELNYX_CODE_FOR: dict[int, int] = {
    21211: 40310,
    21610: 40300,
    21614: 40001,
    30003: 40006,
    30004: 40008,
    30005: 40008,
    30006: 40001,
    30007: 40002,
}
"""The built-in fault numbers' Twilio codes, answered with Telnyx's equivalent."""

ERROR_TITLES: dict[int, str] = {
    10004: "Missing required parameter",
    10005: "Resource not found",
    10007: "Unexpected error",
    10009: "Authentication failed",
    10011: "Too many requests",
    10015: "Bad Request",
    40001: "Not routable",
    40002: "Blocked as spam (temporary)",
    40006: "Recipient server unavailable",
    40008: "Undeliverable",
    40300: "Blocked due to STOP message",
    40305: "Invalid 'from' address",
    40310: "Invalid 'to' address",
}


def _telnyx_time(when: datetime | None) -> str | None:
    """Telnyx's wire format (``2019-01-23T18:10:02.574Z``), not Herald's: the simulator
    answers as the provider does."""
    return (
        when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        if when
        else None
    )


def _now() -> datetime:
    return datetime.now(UTC)


def _error(status: int, code: int, detail: str | None = None, **headers: str) -> JSONResponse:
    title = ERROR_TITLES.get(code, "Error")
    return JSONResponse(
        {"errors": [{"code": str(code), "title": title, "detail": detail or title}]},
        status_code=status,
        headers=headers or None,
    )


def public_key_b64(key: Ed25519PrivateKey) -> str:
    """The raw 32-byte public key, base64: the form Telnyx shows an account."""
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def private_key_b64(key: Ed25519PrivateKey) -> str:
    """The raw 32-byte private key, base64 (how `herald dev` hands it to a simulator)."""
    raw = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return base64.b64encode(raw).decode()


def load_private_key(value: str) -> Ed25519PrivateKey:
    """The key :func:`private_key_b64` wrote."""
    return Ed25519PrivateKey.from_private_bytes(base64.b64decode(value, validate=True))


@dataclass
class TelnyxMessage:
    """One message the Telnyx simulator holds."""

    id: str
    to: str
    from_: str
    text: str
    status: str
    webhook_url: str | None
    token: str | None
    messaging_profile_id: str | None
    received_at: datetime
    sent_at: datetime | None = None
    completed_at: datetime | None = None
    error_code: int | None = None
    direction: str = "outbound"

    def resource(self) -> dict[str, Any]:
        errors = []
        if self.error_code is not None:
            errors.append(
                {"code": str(self.error_code), "title": ERROR_TITLES.get(self.error_code, "")}
            )
        return {
            "record_type": "message",
            "direction": self.direction,
            "id": self.id,
            "type": "SMS",
            "messaging_profile_id": self.messaging_profile_id,
            "from": {"phone_number": self.from_, "carrier": "Herald Sim", "line_type": "Wireless"},
            "to": [
                {
                    "phone_number": self.to,
                    "status": self.status,
                    "carrier": "Herald Sim",
                    "line_type": "Wireless",
                }
            ],
            "text": self.text,
            "media": [],
            "webhook_url": self.webhook_url,
            "encoding": "GSM-7",
            "parts": count_segments(self.text),
            "tags": [],
            "cost": None,
            "received_at": _telnyx_time(self.received_at),
            "sent_at": _telnyx_time(self.sent_at),
            "completed_at": _telnyx_time(self.completed_at),
            "valid_until": None,
            "errors": errors,
        }


class TelnyxCarrier(ScriptedCarrier[TelnyxMessage]):
    """The Telnyx simulator's state and behaviour; :func:`create_telnyx_app` serves it."""

    rate_limit_code = 10011
    unavailable_code = 10007
    failed_status = "sending_failed"
    undelivered_status = "delivery_failed"

    def __init__(
        self,
        *,
        api_key: str,
        signing_key: Ed25519PrivateKey | None = None,
        delays: SimDelays | None = None,
        inbound_url: str | None = None,
        fault_numbers: dict[str, Fault] | None = None,
    ) -> None:
        self.api_key = api_key
        self.signing_key = signing_key or Ed25519PrivateKey.generate()
        self.public_key = public_key_b64(self.signing_key)
        """Base64 of the raw Ed25519 public key: what Herald's ingress verifies with."""
        super().__init__(delays=delays, inbound_url=inbound_url, fault_numbers=fault_numbers)

    def error(self, status: int, code: int, message: str | None = None, **headers: str) -> Response:
        return _error(status, code, message, **headers)

    def fault_for(self, to: str) -> Fault | None:
        # The built-in fault numbers spell Twilio's codes: answered with Telnyx's own.
        fault = super().fault_for(to)
        if to not in self.scripts and fault is not None and fault.code in TELNYX_CODE_FOR:
            return replace(fault, code=TELNYX_CODE_FOR[fault.code])
        return fault

    # -- the Messages API -------------------------------------------------------

    def accept_credential(self, secret: str) -> None:
        self.api_key = secret

    def authorized(self, request: Request) -> bool:
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(key, self.api_key)

    async def create(self, payload: dict[str, Any]) -> Response:
        to = payload.get("to")
        webhook_url = payload.get("webhook_url")
        token = callback_token(webhook_url)
        self._count_request(token)
        if isinstance(to, list):
            to = to[0] if len(to) == 1 else None
        text, from_ = payload.get("text"), payload.get("from")
        if not to or not isinstance(to, str) or not text or not isinstance(text, str):
            return self._reject(400, 10004, "'to' and 'text' are required")
        if not to.startswith("+") or not to[1:].isdigit():
            return self._reject(400, 40310, "The 'to' address should be a single valid number.")
        if not from_ and not payload.get("messaging_profile_id"):
            return self._reject(400, 10004, "'from' or 'messaging_profile_id' is required")
        if from_:
            try:
                parse_sms_sender(str(from_))
            except ValueError:
                return self._reject(400, 40305, "The 'from' address is not a valid sender.")

        fault = self.fault_for(to)
        refused = self._refused_by_script(to, fault)
        if refused is not None:
            return refused
        fault = self._within_count(to, fault)

        message = TelnyxMessage(
            id=str(uuid.uuid4()),
            to=to,
            from_=str(from_ or ""),
            text=text,
            status="queued",
            webhook_url=webhook_url if isinstance(webhook_url, str) else None,
            token=token,
            messaging_profile_id=payload.get("messaging_profile_id"),
            received_at=_now(),
        )
        self._hold(
            message.id, message, to=to, token=token, lifecycle=self._lifecycle(message, fault)
        )
        body = {"data": message.resource()}
        await self._answer_delay(fault)
        return JSONResponse(body, status_code=200)

    # -- the carrier ------------------------------------------------------------

    def _set(self, m: TelnyxMessage, status: str, code: int | None = None) -> bool:
        if self.messages.get(m.id) is not m:
            return False
        m.status = status
        m.error_code = code
        now = _now()
        if status == "sent":
            m.sent_at = now
        if status in ("delivered", "delivery_failed", "sending_failed", "delivery_unconfirmed"):
            m.completed_at = now
            m.sent_at = m.sent_at or (now if status != "sending_failed" else None)
        return True

    def sign(self, timestamp: str, body: str) -> str:
        """Telnyx's signature: Ed25519 over ``f"{timestamp}|{body}"``, base64."""
        signature = self.signing_key.sign(f"{timestamp}|{body}".encode())
        return base64.b64encode(signature).decode()

    def envelope(self, event_type: str, payload: dict[str, Any]) -> str:
        """One webhook body as Telnyx sends it; the event id is new for every event (and
        the same for every redelivery of it)."""
        return json.dumps(
            {
                "data": {
                    "event_type": event_type,
                    "id": str(uuid.uuid4()),
                    "occurred_at": _telnyx_time(_now()),
                    "payload": payload,
                    "record_type": "event",
                },
                "meta": {"attempt": 1, "delivered_to": ""},
            },
            separators=(",", ":"),
        )

    def _receipt(self, m: TelnyxMessage, status: str, code: int | None) -> Receipt | None:
        url = m.webhook_url
        if not url:
            return None
        event_type = "message.sent" if status == "sent" else "message.finalized"
        payload = m.resource()

        async def post(copies: int) -> None:
            body = self.envelope(event_type, payload)  # one event id for every copy
            for _ in range(copies):
                await self.post_signed(url, body, kind="status")

        return post

    async def post_signed(
        self, url: str, body: str, *, kind: str, timestamp: str | None = None
    ) -> CallbackRecord:
        stamp = timestamp or str(int(time.time()))
        headers = {
            "telnyx-signature-ed25519": self.sign(stamp, body),
            "telnyx-timestamp": stamp,
            "content-type": "application/json",
            "user-agent": "telnyx-webhooks (herald-simulator)",
        }
        status_code: int | None = None
        try:
            response = await self.http.post(url, content=body.encode(), headers=headers)
            status_code = response.status_code
        except httpx.HTTPError as exc:
            log.warning("telnyx simulator webhook not delivered: %s", type(exc).__name__)
        record = CallbackRecord(url, {"body": body}, headers, status_code, kind)
        self.callbacks.append(record)
        return record

    async def inbound(self, *, from_: str, to: str, body: str) -> CallbackRecord:
        if not self.inbound_url:
            raise LookupError("no inbound_url configured")
        message = TelnyxMessage(
            id=str(uuid.uuid4()),
            to=to,
            from_=from_,
            text=body,
            status="webhook_delivered",
            webhook_url=None,
            token=None,
            messaging_profile_id=None,
            received_at=_now(),
            direction="inbound",
        )
        return await self.post_signed(
            self.inbound_url, self.envelope("message.received", message.resource()), kind="inbound"
        )


def create_telnyx_app(
    *,
    api_key: str,
    signing_key: Ed25519PrivateKey | None = None,
    delays: SimDelays | None = None,
    inbound_url: str | None = None,
    fault_numbers: dict[str, Fault] | None = None,
) -> Starlette:
    """The Telnyx simulator as an ASGI app; its :class:`TelnyxCarrier` is ``app.state.sim``."""
    sim = TelnyxCarrier(
        api_key=api_key,
        signing_key=signing_key,
        delays=delays,
        inbound_url=inbound_url,
        fault_numbers=fault_numbers,
    )

    async def messages(request: Request) -> Response:
        if not sim.authorized(request):
            return _error(401, 10009, "The API key is invalid or missing.")
        try:
            payload = json.loads(await request.body())
        except ValueError:
            return _error(400, 10015, "The body is not JSON.")
        if not isinstance(payload, dict):
            return _error(400, 10015, "The body is not a JSON object.")
        return await sim.create(payload)

    async def message(request: Request) -> Response:
        if not sim.authorized(request):
            return _error(401, 10009, "The API key is invalid or missing.")
        found = sim.messages.get(request.path_params["id"])
        if found is None:
            return _error(404, 10005)
        if request.method == "DELETE":
            # Only a scheduled message can be cancelled; the simulator schedules none.
            return _error(400, 10015, "Only a scheduled message can be cancelled.")
        await sim.read_delay(found.to)
        return JSONResponse({"data": found.resource()})

    async def key(request: Request) -> Response:
        return JSONResponse({"public_key": sim.public_key})

    async def balance(request: Request) -> Response:
        """`GET /v2/balance`, Telnyx's cheapest authenticated read (`herald doctor`)."""
        if not sim.authorized(request):
            return _error(401, 10009, "The API key is invalid or missing.")
        return JSONResponse(
            {
                "data": {
                    "record_type": "balance",
                    "balance": "100.00",
                    "pending": "0.00",
                    "credit_limit": "0.00",
                    "available_credit": "100.00",
                    "currency": "USD",
                }
            }
        )

    def event_id(record: CallbackRecord) -> dict[str, Any]:
        return {"id": json.loads(record.params["body"])["data"]["id"]}

    routes = [
        Route("/v2/messages", messages, methods=["POST"]),
        Route("/v2/messages/{id}", message, methods=["GET", "DELETE"]),
        Route("/v2/balance", balance, methods=["GET"]),
        Route("/_sim/public_key", key, methods=["GET"]),
        *control_routes(sim, event_id),
    ]
    return carrier_app(sim, routes)


class TelnyxSimulatorServer(CarrierServer):
    """The Telnyx simulator on a real socket: ``await start()``, ``.url``, ``await stop()``."""

    def __init__(
        self,
        *,
        api_key: str,
        signing_key: Ed25519PrivateKey | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        delays: SimDelays | None = None,
        inbound_url: str | None = None,
        fault_numbers: dict[str, Fault] | None = None,
        log_level: str = "warning",
    ) -> None:
        app = create_telnyx_app(
            api_key=api_key,
            signing_key=signing_key,
            delays=delays,
            inbound_url=inbound_url,
            fault_numbers=fault_numbers,
        )
        super().__init__(app, host=host, port=port, log_level=log_level)

    @property
    def sim(self) -> TelnyxCarrier:
        return self.app.state.sim


__all__ = [
    "TELNYX_CODE_FOR",
    "TelnyxCarrier",
    "TelnyxMessage",
    "TelnyxSimulatorServer",
    "create_telnyx_app",
    "load_private_key",
    "private_key_b64",
    "public_key_b64",
]
