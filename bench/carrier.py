"""The bench's carrier: the SMS simulator in a process of its own, counted.

`herald bench` runs it as ``python -m bench.carrier`` so that its CPU is metered
apart from Herald's (in production the carrier is somebody else's machine) and it does
not share an event loop with the bench driver and the ingress.

It counts when each create and status lookup arrived and answers
``GET /_bench/arrivals?kind=lookup`` with those times, in ``time.monotonic()`` seconds:
on Linux that clock is system-wide, so the bench compares them with its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx

import settings as settings_module
from devstack import ChildProcess
from simulators.server import LoopbackServer
from simulators.twilio import (
    FAULT_NUMBERS,
    Fault,
    SimDelays,
    create_simulator_app,
)

ARRIVALS_PATH = "/_bench/arrivals"
REPO_ROOT = Path(__file__).resolve().parent.parent


def kind_of(method: str, path: str) -> str | None:
    """Which carrier call a request is: create, list, lookup, update (None: not one)."""
    if "/Messages" not in path:
        return None
    if path.endswith("/Messages.json"):
        return "create" if method == "POST" else "list"
    return "lookup" if method == "GET" else "update"


class CountingApp:
    """ASGI wrapper around the simulator: when each carrier call arrived."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.arrivals: dict[str, list[float]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == ARRIVALS_PATH:
            await self._answer(scope, send)
            return
        if scope["type"] == "http":
            kind = kind_of(scope["method"], scope["path"])
            if kind is not None:
                self.arrivals.setdefault(kind, []).append(time.monotonic())
        await self.app(scope, receive, send)

    async def _answer(self, scope: Any, send: Any) -> None:
        query = dict(parse_qsl(scope["query_string"].decode()))
        body = json.dumps(self.arrivals.get(query.get("kind", ""), [])).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class Carrier:
    """The bench side: start the carrier process, read its arrival times, stop it."""

    def __init__(
        self, *, port: int, inbound_url: str, never_resolves: Sequence[str], folder: Path
    ) -> None:
        self.url = f"http://127.0.0.1:{port}"
        numbers = folder / "never-resolves.json"
        numbers.write_text(json.dumps(list(never_resolves)))
        self.process = ChildProcess(
            "carrier",
            [
                sys.executable,
                "-m",
                "bench.carrier",
                "--port",
                str(port),
                "--inbound-url",
                inbound_url,
                "--never-resolves",
                numbers,
            ],
            log_path=folder / "carrier.log",
            cwd=REPO_ROOT,
        )
        self.http = httpx.AsyncClient(base_url=self.url, timeout=10)

    async def start(self, timeout: float = 30.0) -> None:
        """Start the process and wait until it answers; on any failure (a Ctrl-C too) it
        is stopped again before the error goes on."""
        self.process.start()
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    await self.arrivals("create")
                    return
                except httpx.TransportError:
                    if not self.process.is_alive() or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"the bench carrier did not start (see {self.process.log_path})"
                        ) from None
                    await asyncio.sleep(0.1)
        except BaseException:
            await self.stop()
            raise

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    async def arrivals(self, kind: str) -> list[float]:
        response = await self.http.get(ARRIVALS_PATH, params={"kind": kind})
        response.raise_for_status()
        times: list[float] = response.json()
        return times

    async def count(self, kind: str, start: float = 0.0, end: float = float("inf")) -> int:
        return sum(1 for at in await self.arrivals(kind) if start <= at < end)

    async def stop(self) -> None:
        await self.http.aclose()
        await asyncio.to_thread(self.process.stop)


async def serve(port: int, inbound_url: str, never_resolves: list[str]) -> None:
    base = settings_module.Settings()
    faults = dict(FAULT_NUMBERS)
    faults.update({number: Fault.parse("never_resolves") for number in never_resolves})
    app = create_simulator_app(
        account_sid=base.sms_account_sid,
        auth_token=base.sms_auth_token.get_secret_value(),
        # The carrier answers quickly, so the bench measures Herald and Temporal.
        delays=SimDelays(sent=0.05, delivered=0.05),
        inbound_url=inbound_url,
        fault_numbers=faults,
    )
    server = LoopbackServer(CountingApp(app), host="127.0.0.1", port=port)
    await server.start()
    try:
        await asyncio.Event().wait()  # until SIGTERM from the bench
    finally:
        await server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.carrier")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--inbound-url", required=True)
    parser.add_argument("--never-resolves", type=Path, help="JSON list of numbers")
    args = parser.parse_args(argv)
    numbers = json.loads(args.never_resolves.read_text()) if args.never_resolves else []
    asyncio.run(serve(args.port, args.inbound_url, numbers))


if __name__ == "__main__":
    main()
