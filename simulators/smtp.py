"""An SMTP sink: accepts every message and keeps it (for ``herald dev`` and the tests).

It runs on the caller's event loop (``await start()`` / ``await stop()``), so ``port=0``
works and :attr:`port` reports the bound port. Every message is parsed with
``email.policy.default`` into an ``EmailMessage`` and kept with its envelope; with a
``maildir`` each one is also written as ``<n>.eml``.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP, Envelope, Session


@dataclass(frozen=True)
class ReceivedEmail:
    """One message as the sink received it."""

    message: EmailMessage
    mail_from: str
    rcpt_tos: tuple[str, ...]
    raw: bytes
    path: Path | None = None
    """The ``.eml`` file, when the sink has a maildir."""


class _Handler:
    def __init__(self, sink: SmtpSink) -> None:
        self.sink = sink

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        refusal = self.sink.refusals.get(address.lower())
        if refusal:
            return refusal
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        stall = max((self.sink.stalls.get(r.lower(), 0.0) for r in envelope.rcpt_tos), default=0)
        if stall:
            # Hold the answer to DATA (the client times out after sending the content).
            self.sink.stalled += 1
            try:
                await asyncio.wait_for(self.sink._stopping.wait(), timeout=stall)
            except TimeoutError:
                pass
            return "451 4.3.0 stalled by the sink"
        raw = envelope.original_content or envelope.content or b""
        if isinstance(raw, str):
            raw = raw.encode()
        # SMTP carries CRLF; parse with the local line ending so text parts read naturally
        # (base64 attachments are unaffected). `raw` keeps the bytes as received.
        parsed = email.message_from_bytes(raw.replace(b"\r\n", b"\n"), policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        self.sink._record(parsed, envelope, raw)
        return "250 OK: queued by the Herald sink"


class SmtpSink:
    """Async SMTP server on loopback: ``await start()``, ``await stop()``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, maildir: Path | None = None) -> None:
        self.host = host
        self._port = port
        self.maildir = Path(maildir) if maildir is not None else None
        self.messages: list[ReceivedEmail] = []
        self.connections = 0
        """TCP connections accepted so far (a test can assert nothing even connected)."""
        self.refusals: dict[str, str] = {}
        """Recipient address -> SMTP reply for RCPT TO, e.g. ``"550 5.1.1 no such user"``."""
        self.stalls: dict[str, float] = {}
        """Recipient address -> seconds to hold the answer to DATA (tests ambiguity)."""
        self.stalled = 0
        self._server: asyncio.Server | None = None
        self._changed: asyncio.Condition | None = None
        self._stopping = asyncio.Event()

    @property
    def port(self) -> int:
        return self._port

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("sink already started")
        if self.maildir is not None:
            self.maildir.mkdir(parents=True, exist_ok=True)
        loop = asyncio.get_running_loop()
        self._changed = asyncio.Condition()
        self._stopping = asyncio.Event()
        handler = _Handler(self)

        def protocol() -> SMTP:
            self.connections += 1
            return SMTP(
                handler,
                hostname="herald-sink",
                loop=loop,
                enable_SMTPUTF8=True,
                decode_data=False,
            )

        self._server = await loop.create_server(protocol, host=self.host, port=self._port)
        self._port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()
        self._server.close()
        # Connections are not closed by Server.close(); clients here quit promptly.
        try:
            await asyncio.wait_for(self._server.wait_closed(), timeout=2)
        except TimeoutError:
            pass
        self._server = None

    def clear(self) -> None:
        """Forget received messages, counts and scripted refusals/stalls."""
        self.messages.clear()
        self.connections = 0
        self.stalled = 0
        self.refusals.clear()
        self.stalls.clear()

    def _record(self, message: EmailMessage, envelope: Envelope, raw: bytes) -> None:
        path = None
        if self.maildir is not None:
            path = self.maildir / f"{len(self.messages) + 1}.eml"
            path.write_bytes(raw)
        self.messages.append(
            ReceivedEmail(
                message=message,
                mail_from=envelope.mail_from or "",
                rcpt_tos=tuple(envelope.rcpt_tos),
                raw=raw,
                path=path,
            )
        )
        if self._changed is not None:
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(self, count: int, *, timeout: float = 5.0) -> list[ReceivedEmail]:
        """Wait until at least ``count`` messages arrived; raises ``TimeoutError``."""
        assert self._changed is not None, "start() the sink first"

        async def reached() -> None:
            assert self._changed is not None
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.messages) >= count)

        await asyncio.wait_for(reached(), timeout=timeout)
        return list(self.messages)

    async def __aenter__(self) -> SmtpSink:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()
