"""A served app on a real socket inside the caller's event loop (uvicorn): what every
simulator runs on, and what the tests and the bench serve their own small apps with."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any, Self

import uvicorn

from simulators.carrier import ScriptedCarrier, end_outages

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

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class CarrierServer(LoopbackServer):
    """A simulator's app (:func:`simulators.carrier.carrier_app`) on a real socket.

    ``stop()`` first cuts withheld (accept-then-timeout) responses short, so shutdown
    does not wait for them, then stops every lifecycle and closes the server.
    """

    def __init__(self, app: Any, *, host: str, port: int, log_level: str) -> None:
        super().__init__(app, host=host, port=port, log_level=log_level)
        self.app.state.sim.outage = self.refuse_connections

    async def stop(self) -> None:
        sim: ScriptedCarrier[Any] = self.app.state.sim
        sim.abort()
        end_outages()
        try:
            await super().stop()
        finally:
            await sim.aclose()
