"""A served app (the carrier simulator, the bench carrier, the dev ingress) keeps an idle
connection open longer than a client's pool keeps one (httpx: 5 s), so a client never
reuses a connection the server is just closing. With uvicorn's default (5 s) the two
expiries raced: an SMS submit on a reused connection was reset after the request left,
which Herald must treat as ambiguous, and the message ended `unknown` unsent."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI

from simulators.server import KEEP_ALIVE_SECONDS, LoopbackServer

HTTPX_KEEPALIVE_EXPIRY = 5.0
REQUEST = b"GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


async def _answer(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head + await asyncio.wait_for(reader.readexactly(length), 5)


async def test_an_idle_connection_outlives_a_client_pools_keep_alive() -> None:
    assert KEEP_ALIVE_SECONDS > HTTPX_KEEPALIVE_EXPIRY
    app = FastAPI()
    app.get("/ping")(lambda: {"ok": True})
    async with LoopbackServer(app) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            writer.write(REQUEST)
            assert b" 200 " in await _answer(reader)
            # Idle for as long as an httpx pool keeps a connection, plus a margin: the
            # moment a client would still reuse it.
            await asyncio.sleep(HTTPX_KEEPALIVE_EXPIRY + 0.5)
            writer.write(REQUEST)
            assert b" 200 " in await _answer(reader)  # the same connection, still open
        finally:
            writer.close()
