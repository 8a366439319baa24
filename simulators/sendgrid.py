"""A SendGrid-compatible email provider simulator: Mail Send plus signed Event Webhook batches.

It speaks the subset Herald uses (``POST /v3/mail/send``, bearer key; ``GET /v3/scopes``,
the key's permissions, for ``herald doctor``), and after each
accepted message plays the events a real provider would report to the event URL, batched,
signed with a P-256 key pair generated per simulator (``public_key`` is what Herald's
``HERALD_SENDGRID_EVENT_PUBLIC_KEY`` must hold). What a message does is scripted by its
address's local part (before any ``+tag``), so any domain works (docs/simulator.md):

``deliver`` (and any other), ``defer``, ``bounce``, ``block``, ``drop``, ``complain``,
``unsubscribe``, ``bounce-after-delivered``, ``silent`` (processed, then nothing),
``timeout`` (accepted and counted, the 202 withheld past a client's timeout),
``error500`` (accepted and counted, answered 500), ``refuse`` (400 with an error body,
nothing accepted), ``ratelimit`` (the first two requests 429, then normal).

With a ``relay`` (``herald dev`` gives it the SMTP sink), every message the script lets
reach a mailbox is also delivered there as MIME, with the Message-ID, headers and
attachments the request carried, so a person (or a scenario) can read what was sent.

A batch the receiver does not answer 2xx is retried with the same body and timestamp, as
SendGrid's retries for up to 24 hours are assumed to be; ``/_sim/email/replay`` posts a
stored batch again exactly. Counts: every accepted message, by attempt token.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formataddr
from typing import Any

import aiosmtplib
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from domain.email_events import ADDRESS, SIGNATURE_HEADER, TIMESTAMP_HEADER, TOKEN_ARG
from simulators.server import LoopbackServer
from transports.sendgrid import generate_event_key_pair, public_key_of, sign_event_batch

SCRIPTS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "deliver": [("processed", {}), ("delivered", {"response": "250 OK"})],
    "defer": [
        ("processed", {}),
        ("deferred", {"response": "451 4.7.1 try again later", "attempt": "1"}),
        ("delivered", {"response": "250 OK"}),
    ],
    "bounce": [
        ("processed", {}),
        (
            "bounce",
            {"type": "bounce", "status": "5.1.1", "reason": "550 5.1.1 mailbox does not exist"},
        ),
    ],
    "block": [
        ("processed", {}),
        ("bounce", {"type": "blocked", "status": "5.7.1", "reason": "554 5.7.1 blocked"}),
    ],
    "drop": [("dropped", {"reason": "Bounced Address", "status": "5.0.0"})],
    "complain": [("processed", {}), ("delivered", {"response": "250 OK"}), ("spamreport", {})],
    "unsubscribe": [
        ("processed", {}),
        ("delivered", {"response": "250 OK"}),
        ("unsubscribe", {}),
    ],
    "bounce-after-delivered": [
        ("processed", {}),
        ("delivered", {"response": "250 OK"}),
        (
            "bounce",
            {"type": "bounce", "status": "5.1.1", "reason": "550 5.1.1 mailbox does not exist"},
        ),
    ],
    "silent": [("processed", {})],
}
"""Per scripted local part, the events played after acceptance, one step apart."""

API_FAULTS = ("timeout", "error500", "refuse", "ratelimit")
SCOPES = ("mail.send", "user.scheduled_sends.read", "user.webhooks.event.settings.read")
"""What `GET /v3/scopes` lists for the simulator's key: a restricted key that may send."""
NOT_IN_A_MAILBOX = frozenset({"bounce", "block", "drop", "refuse", "ratelimit"})
"""Scripts whose message never reaches a mailbox (nothing is relayed)."""


def mime_of(body: dict[str, Any]) -> EmailMessage:
    """A Mail Send request as the MIME message a mailbox would receive."""
    msg = EmailMessage()

    def party(value: dict[str, Any]) -> str:
        return formataddr((value.get("name") or "", value[ADDRESS]))

    msg["From"] = party(body["from"])
    msg["To"] = ", ".join(party(t) for t in body["personalizations"][0]["to"])
    msg["Subject"] = body["subject"]
    for name, value in (body.get("headers") or {}).items():
        msg[name] = value
    texts = {c["type"]: c["value"] for c in body["content"]}
    msg.set_content(texts.get("text/plain", ""))
    if "text/html" in texts:
        msg.add_alternative(texts["text/html"], subtype="html")
    for attachment in body.get("attachments") or []:
        maintype, _, subtype = str(attachment.get("type", "")).partition("/")
        msg.add_attachment(
            base64.b64decode(attachment["content"]),
            maintype=maintype or "application",
            subtype=subtype or "octet-stream",
            filename=attachment.get("filename"),
        )
    return msg


@dataclass
class SimEmailDelays:
    step: float = 0.3
    """Seconds between one event of a message and the next."""
    batch: float = 0.1
    """Events due within this are posted in one batch."""
    retry: float = 1.0
    """Seconds before a batch the receiver refused is posted again."""
    max_retries: int = 5
    hang: float = 30.0
    """How long the ``timeout`` fault withholds the 202."""


@dataclass
class PostedBatch:
    body: bytes
    timestamp: str
    signature: str
    statuses: list[int] = field(default_factory=list)
    """The receiver's answer to each POST of this batch (0: no answer)."""

    def view(self) -> dict[str, Any]:
        return {
            "events": json.loads(self.body),
            "timestamp": self.timestamp,
            "statuses": self.statuses,
        }


class SendGridSimulator:
    """The state behind the app: accepted messages, counts, scripts, posted batches."""

    def __init__(
        self,
        *,
        api_key: str,
        event_url: str | None = None,
        delays: SimEmailDelays | None = None,
        private_key_pem: bytes | None = None,
        relay: tuple[str, int] | None = None,
    ) -> None:
        self.api_key = api_key
        self.relay = relay
        """(host, port) of an SMTP server that receives what reaches a mailbox."""
        self.event_url = event_url
        self.delays = delays or SimEmailDelays()
        if private_key_pem is None:
            self.private_key_pem, self.public_key = generate_event_key_pair()
        else:
            self.private_key_pem = private_key_pem
            self.public_key = public_key_of(private_key_pem)
        self.scripts: dict[str, str] = {}
        self.by_token: Counter[str] = Counter()
        self.requests_total = 0
        self.rejected_total = 0
        self.ratelimited: Counter[str] = Counter()
        self.batches: list[PostedBatch] = []
        self.relay_failures = 0
        self._pending: list[tuple[float, dict[str, Any]]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self._abort = asyncio.Event()

    # --- Mail Send ---------------------------------------------------------------------

    def behaviour(self, address: str) -> str:
        address = address.strip().lower()
        if address in self.scripts:
            return self.scripts[address]
        local = address.partition("@")[0].partition("+")[0]
        return local if local in SCRIPTS or local in API_FAULTS else "deliver"

    async def scopes(self, request: Request) -> Response:
        """`GET /v3/scopes`: the key's permissions, SendGrid's cheapest authenticated read
        (`herald doctor` asks it, and looks for `mail.send`)."""
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _errors(401, "The provided authorization grant is invalid, expired, or revoked")
        return JSONResponse({"scopes": list(SCOPES)})

    async def mail_send(self, request: Request) -> Response:
        self.requests_total += 1
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            self.rejected_total += 1
            return _errors(401, "The provided authorization grant is invalid, expired, or revoked")
        try:
            body = json.loads(await request.body())
            personalization = body["personalizations"][0]
            to = personalization["to"][0][ADDRESS]
            args = dict(personalization.get("custom_args") or {})
            if not body["from"][ADDRESS] or not body["subject"] or not body["content"]:
                raise ValueError("from, subject and content are required")
        except (ValueError, KeyError, IndexError, TypeError):
            self.rejected_total += 1
            return _errors(400, "Bad Request", field="personalizations")
        fault = self.behaviour(to)
        if fault == "refuse":
            self.rejected_total += 1
            return _errors(400, "Does not contain a valid address.", field="personalizations.0.to")
        if fault == "ratelimit" and self.ratelimited[to] < 2:
            self.ratelimited[to] += 1
            self.rejected_total += 1
            return _errors(429, "too many requests", headers={"Retry-After": "1"})
        token = str(args.get(TOKEN_ARG, ""))
        self.by_token[token] += 1
        message_id = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
        categories = body.get("categories") or []
        self._play(message_id, to, args, categories, SCRIPTS.get(fault, SCRIPTS["deliver"]))
        if self.relay is not None and fault not in NOT_IN_A_MAILBOX:
            self._spawn(self._relay(body, to))
        if fault == "timeout":
            try:
                await asyncio.wait_for(self._abort.wait(), self.delays.hang)
            except TimeoutError:
                pass
        if fault == "error500":
            return _errors(500, "internal error")
        return Response(status_code=202, headers={"X-Message-Id": message_id})

    def _play(
        self,
        message_id: str,
        to: str,
        args: dict[str, Any],
        categories: list[str],
        steps: list[tuple[str, dict[str, Any]]],
    ) -> None:
        now = time.monotonic()
        for index, (word, extra) in enumerate(steps):
            event = {
                ADDRESS: to,
                "timestamp": int(time.time()),
                "event": word,
                "sg_event_id": base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="),
                "sg_message_id": f"{message_id}.recvd-sim-1-{index}.0",
                "smtp-id": f"<{message_id}@sim.sendgrid.test>",
                **({"category": categories} if categories else {}),
                **args,
                **extra,
            }
            self._pending.append((now + self.delays.step * (index + 1), event))
        self._wake.set()

    async def _relay(self, body: dict[str, Any], to: str) -> None:
        assert self.relay is not None
        host, port = self.relay
        sender = body["from"][ADDRESS]
        try:
            await aiosmtplib.send(
                mime_of(body), hostname=host, port=port, sender=sender, recipients=[to]
            )
        except (aiosmtplib.SMTPException, OSError, ValueError, KeyError):
            self.relay_failures += 1

    # --- the Event Webhook ---------------------------------------------------------------

    async def start(self) -> None:
        self._client = httpx.AsyncClient(timeout=5.0)
        self._flusher = asyncio.create_task(self._flush_loop())

    async def aclose(self) -> None:
        self._abort.set()
        tasks = [t for t in (self._flusher, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()

    async def _flush_loop(self) -> None:
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
                continue
            due_at = min(at for at, _ in self._pending)
            await asyncio.sleep(max(0.0, due_at - time.monotonic()) + self.delays.batch)
            now = time.monotonic()
            due = [event for at, event in self._pending if at <= now]
            self._pending = [(at, event) for at, event in self._pending if at > now]
            if due:
                self.post_batch(due)

    def post_batch(self, events: list[dict[str, Any]]) -> PostedBatch:
        """Sign and POST ``events`` as one batch (retried while refused)."""
        body = json.dumps(events, separators=(",", ":")).encode()
        timestamp = str(int(time.time()))
        batch = PostedBatch(
            body,
            timestamp,
            sign_event_batch(self.private_key_pem, timestamp=timestamp, body=body),
        )
        self.batches.append(batch)
        self._spawn(self._deliver(batch))
        return batch

    def replay(self, index: int) -> PostedBatch:
        """POST a stored batch again, byte for byte (same timestamp and signature)."""
        batch = self.batches[index]
        self._spawn(self._deliver(batch, retries=0))
        return batch

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, batch: PostedBatch, *, retries: int | None = None) -> None:
        assert self._client is not None
        tries = self.delays.max_retries if retries is None else retries
        for attempt in range(tries + 1):
            status = 0
            if self.event_url:
                try:
                    answer = await self._client.post(
                        self.event_url,
                        content=batch.body,
                        headers={
                            "Content-Type": "application/json",
                            SIGNATURE_HEADER: batch.signature,
                            TIMESTAMP_HEADER: batch.timestamp,
                        },
                    )
                    status = answer.status_code
                except httpx.HTTPError:
                    status = 0
            batch.statuses.append(status)
            if 200 <= status < 300 or attempt == tries:
                return
            await asyncio.sleep(self.delays.retry)

    async def idle(self, timeout: float = 10.0) -> None:
        """Wait until no event is pending and every POST has finished (tests, the demo)."""
        deadline = time.monotonic() + timeout
        while self._pending or self._tasks:
            if time.monotonic() > deadline:
                raise TimeoutError("simulated email events still pending")
            await asyncio.sleep(0.05)

    def reset(self) -> None:
        self.by_token.clear()
        self.requests_total = self.rejected_total = 0
        self.ratelimited.clear()
        self.batches.clear()
        self._pending.clear()
        self.scripts.clear()

    def stats(self) -> dict[str, Any]:
        return {
            "total": sum(self.by_token.values()),
            "by_token": dict(self.by_token),
            "requests_total": self.requests_total,
            "rejected_total": self.rejected_total,
            "batches": len(self.batches),
            "pending": len(self._pending) + len(self._tasks),
        }


def _errors(
    status: int, message: str, *, field: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    error = {"message": message, "field": field, "help": None}
    return JSONResponse({"errors": [error]}, status_code=status, headers=headers)


def create_sendgrid_app(
    *,
    api_key: str,
    event_url: str | None = None,
    delays: SimEmailDelays | None = None,
    private_key_pem: bytes | None = None,
    relay: tuple[str, int] | None = None,
) -> Starlette:
    """The simulator as an ASGI app; its :class:`SendGridSimulator` is ``app.state.sim``."""
    sim = SendGridSimulator(
        api_key=api_key,
        event_url=event_url,
        delays=delays,
        private_key_pem=private_key_pem,
        relay=relay,
    )

    async def script(request: Request) -> Response:
        payload = await request.json()
        if "event_url" in payload:
            sim.event_url = payload["event_url"]
        if ADDRESS in payload:
            fault = str(payload.get("fault") or "deliver")
            if fault not in SCRIPTS and fault not in API_FAULTS:
                return JSONResponse({"error": f"unknown fault {fault!r}"}, status_code=400)
            sim.scripts[str(payload[ADDRESS]).strip().lower()] = fault
        return JSONResponse({"event_url": sim.event_url, "scripted": len(sim.scripts)})

    async def stats(_: Request) -> Response:
        return JSONResponse(sim.stats())

    async def batches(_: Request) -> Response:
        return JSONResponse([b.view() for b in sim.batches])

    async def replay(request: Request) -> Response:
        payload = await request.json() if await request.body() else {}
        try:
            batch = sim.replay(int(payload.get("index", -1)))
        except IndexError:
            return JSONResponse({"error": "no such batch"}, status_code=404)
        return JSONResponse({"events": len(json.loads(batch.body))})

    async def public_key(_: Request) -> Response:
        return JSONResponse({"public_key": sim.public_key})

    async def reset(_: Request) -> Response:
        sim.reset()
        return JSONResponse({"reset": True})

    app = Starlette(
        routes=[
            Route("/v3/mail/send", sim.mail_send, methods=["POST"]),
            Route("/v3/scopes", sim.scopes, methods=["GET"]),
            Route("/_sim/email/script", script, methods=["POST"]),
            Route("/_sim/email/stats", stats, methods=["GET"]),
            Route("/_sim/email/batches", batches, methods=["GET"]),
            Route("/_sim/email/replay", replay, methods=["POST"]),
            Route("/_sim/email/public-key", public_key, methods=["GET"]),
            Route("/_sim/email/reset", reset, methods=["POST"]),
        ],
    )
    app.state.sim = sim
    return app


class SendGridSimulatorServer(LoopbackServer):
    """The SendGrid simulator on a real socket: ``await start()``, ``.url``, ``.sim``."""

    def __init__(
        self,
        *,
        api_key: str,
        event_url: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        delays: SimEmailDelays | None = None,
        private_key_pem: bytes | None = None,
        relay: tuple[str, int] | None = None,
        log_level: str = "warning",
    ) -> None:
        app = create_sendgrid_app(
            api_key=api_key,
            event_url=event_url,
            delays=delays,
            private_key_pem=private_key_pem,
            relay=relay,
        )
        super().__init__(app, host=host, port=port, log_level=log_level)

    @property
    def sim(self) -> SendGridSimulator:
        return self.app.state.sim

    async def start(self, *, timeout: float = 10.0) -> None:
        await self.sim.start()
        await super().start(timeout=timeout)

    async def stop(self) -> None:
        self.sim._abort.set()
        try:
            await super().stop()
        finally:
            await self.sim.aclose()

    async def __aenter__(self) -> SendGridSimulatorServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
