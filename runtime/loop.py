"""The event loop Herald's own processes run on: uvloop where it exists.

The worker, `herald api` and `herald dev` (which serves the ingress) spend a visible share
of their CPU in the event loop itself: a handful of socket reads and writes per receipt,
the futures the Temporal SDK's core resolves from its own threads, a thread hop per
ledger transaction. uvloop (libuv, the loop uvicorn also prefers) does that work in C;
in `herald bench` it made the worker 4-7 % and the driver + ingress 3-4 % cheaper per
intent, in units of the same bare baseline worker over two series of four alternating
runs (docs/bench.md, "fourth pass").

Workflow code is untouched: the Temporal SDK runs each workflow on a deterministic loop
of its own, whatever runs the process. The bench's baseline worker and its carrier
simulator keep the standard loop (the yardstick stays what it was). uvloop does not
exist on Windows, where `run` is `asyncio.run`.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on a uvloop loop (the standard loop on Windows)."""
    if sys.platform == "win32":
        return asyncio.run(main)
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
