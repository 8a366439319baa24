"""The carrier simulator's second provider: Telnyx Messaging API v2, on its own port.

The same carrier as :mod:`transports.simulator` (the same fault names and fault numbers,
the same control endpoints, the same counting of every create) behind Telnyx's API
subset: ``POST /v2/messages`` (JSON, ``Authorization: Bearer``), ``GET
/v2/messages/{id}``, and message events (``message.sent``, ``message.finalized``,
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

import asyncio
import base64
import contextlib
import json
import logging
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

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
from transports.simulator import (
    FAULT_NUMBERS,
    CallbackRecord,
    Fault,
    LoopbackServer,
    SimDelays,
    SimStats,
    count_segments,
    end_outages,
    start_outage,
)

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


def _token_of(url: str | None) -> str | None:
    if not url:
        return None
    values = parse_qs(urlsplit(url).query).get("token")
    return values[0] if values else None


class TelnyxCarrier:
    """The Telnyx simulator's state and behaviour; :func:`create_telnyx_app` serves it."""

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
        self.outage: Any = None
        """Set by :class:`TelnyxSimulatorServer`: ``outage(seconds)`` refuses connections."""
        """Base64 of the raw Ed25519 public key: what Herald's ingress verifies with."""
        self.delays = delays or SimDelays()
        self.inbound_url = inbound_url
        self._base_faults = dict(FAULT_NUMBERS if fault_numbers is None else fault_numbers)
        self._aborted = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._http: httpx.AsyncClient | None = None
        self._reset_state()

    def _reset_state(self) -> None:
        self.messages: dict[str, TelnyxMessage] = {}
        self.scripts: dict[str, Fault] = {}
        self._remaining: dict[str, int] = {}
        self.stats = SimStats()
        self.callbacks: list[CallbackRecord] = []

    def reset(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self._reset_state()

    def abort(self) -> None:
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

    # -- faults (the same vocabulary as the Twilio simulator) --------------------

    def fault_for(self, to: str) -> Fault | None:
        if to in self.scripts:
            fault = self.scripts[to]
            return None if fault.kind == "none" else fault
        base = self._base_faults.get(to)
        if base is not None and base.code in TELNYX_CODE_FOR:
            return Fault(
                base.kind, TELNYX_CODE_FOR[base.code], base.count, base.seconds, base.http_status
            )
        return base

    def script(self, to: str, fault: Fault | None) -> None:
        self.scripts[to] = fault or Fault("none")
        self._remaining.pop(to, None)

    def _take_limited(self, to: str, fault: Fault) -> bool:
        left = self._remaining.setdefault(to, fault.count or 0)
        if left <= 0:
            return False
        self._remaining[to] = left - 1
        return True

    # -- the Messages API -------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(key, self.api_key)

    async def create(self, payload: dict[str, Any]) -> Response:
        to = payload.get("to")
        webhook_url = payload.get("webhook_url")
        token = _token_of(webhook_url)
        self.stats.requests_total += 1
        if token:
            self.stats.requests_by_token[token] += 1
        if isinstance(to, list):
            to = to[0] if len(to) == 1 else None
        text, from_ = payload.get("text"), payload.get("from")
        if not to or not isinstance(to, str) or not text or not isinstance(text, str):
            self.stats.rejected_total += 1
            return _error(400, 10004, "'to' and 'text' are required")
        if not to.startswith("+") or not to[1:].isdigit():
            self.stats.rejected_total += 1
            return _error(400, 40310, "The 'to' address should be a single valid number.")
        if not from_ and not payload.get("messaging_profile_id"):
            self.stats.rejected_total += 1
            return _error(400, 10004, "'from' or 'messaging_profile_id' is required")
        if from_:
            try:
                parse_sms_sender(str(from_))
            except ValueError:
                self.stats.rejected_total += 1
                return _error(400, 40305, "The 'from' address is not a valid sender.")

        fault = self.fault_for(to)
        kind = fault.kind if fault else None
        if fault and kind in ("rate_limit", "unavailable") and self._take_limited(to, fault):
            self.stats.rejected_total += 1
            retry = str(self.delays.retry_after)
            if kind == "rate_limit":
                return _error(429, 10011, **{"Retry-After": retry})
            return _error(503, 10007, "Service Unavailable", **{"Retry-After": retry})
        if fault and kind == "api_error":
            self.stats.rejected_total += 1
            assert fault.code is not None
            return _error(fault.http_status or 400, fault.code)

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
        self.messages[message.id] = message
        # Counted here, before any response is withheld: the message exists now.
        self.stats.total += 1
        self.stats.by_to[to] += 1
        if token:
            self.stats.by_token[token] += 1
        self._spawn(self._lifecycle(message, fault))
        body = {"data": message.resource()}
        if kind == "accept_then_timeout":
            await self._pause(fault.seconds if fault and fault.seconds else self.delays.hang)
        elif kind == "slow_response":
            await self._pause(
                fault.seconds if fault and fault.seconds else self.delays.slow_response
            )
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

    async def _lifecycle(self, m: TelnyxMessage, fault: Fault | None) -> None:
        kind = fault.kind if fault else None
        d = self.delays
        await asyncio.sleep(d.sent)
        if kind == "failed":
            if self._set(m, "sending_failed", fault.code if fault else None):
                await self._event(m, "message.finalized", fault)
            return
        if not self._set(m, "sent"):
            return
        if kind == "never_resolves":
            return  # stays `sent`, and no event ever comes
        if kind == "out_of_order":
            sent_snapshot = m.resource()
            await asyncio.sleep(d.delivered)
            if self._set(m, "delivered"):
                await self._event(m, "message.finalized", fault)
                await self._event(m, "message.sent", fault, payload=sent_snapshot)
            return
        await self._event(m, "message.sent", fault)
        if kind == "delayed_receipt":
            await asyncio.sleep(fault.seconds if fault and fault.seconds else d.delayed_receipt)
        else:
            await asyncio.sleep(d.delivered)
        if kind == "undelivered":
            if self._set(m, "delivery_failed", fault.code if fault else None):
                await self._event(m, "message.finalized", fault)
        elif self._set(m, "delivered"):
            await self._event(m, "message.finalized", fault)

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

    async def _event(
        self,
        m: TelnyxMessage,
        event_type: str,
        fault: Fault | None,
        *,
        payload: dict[str, Any] | None = None,
    ) -> None:
        if not m.webhook_url:
            return
        body = self.envelope(event_type, payload or m.resource())
        copies = fault.count if fault and fault.kind == "duplicate_receipts" and fault.count else 1
        for _ in range(copies):
            await self.post_signed(m.webhook_url, body, kind="status")

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
        return JSONResponse({"data": found.resource()})

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
        event_id = json.loads(record.params["body"])["data"]["id"]
        return JSONResponse({"id": event_id, "status_code": record.status_code})

    async def reset(request: Request) -> Response:
        sim.reset()
        return JSONResponse({"reset": True})

    async def key(request: Request) -> Response:
        return JSONResponse({"public_key": sim.public_key})

    async def outage(request: Request) -> Response:
        return await start_outage(request, sim.outage)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await sim.aclose()

    app = Starlette(
        routes=[
            Route("/v2/messages", messages, methods=["POST"]),
            Route("/v2/messages/{id}", message, methods=["GET", "DELETE"]),
            Route("/_sim/script", script, methods=["POST"]),
            Route("/_sim/stats", stats, methods=["GET"]),
            Route("/_sim/callbacks", callbacks, methods=["GET"]),
            Route("/_sim/inbound", inbound, methods=["POST"]),
            Route("/_sim/reset", reset, methods=["POST"]),
            Route("/_sim/public_key", key, methods=["GET"]),
            Route("/_sim/outage", outage, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    app.state.sim = sim
    return app


class TelnyxSimulatorServer(LoopbackServer):
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
        self.sim.outage = self.refuse_connections

    @property
    def sim(self) -> TelnyxCarrier:
        return self.app.state.sim

    async def stop(self) -> None:
        self.sim.abort()
        end_outages()
        try:
            await super().stop()
        finally:
            await self.sim.aclose()

    async def __aenter__(self) -> TelnyxSimulatorServer:
        await self.start()
        return self


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
