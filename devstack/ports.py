"""Loopback port helpers."""

from __future__ import annotations

import errno
import random
import socket
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

__all__ = ["PortInUse", "bound_or_named", "free_port", "port_in_use"]


class PortInUse(OSError):
    """A server of the stack could not bind its port: which one, and the setting that moves
    it (an OSError with EADDRINUSE, like the error it replaces)."""

    def __init__(self, host: str, port: int, setting: str) -> None:
        super().__init__(
            errno.EADDRINUSE,
            f"{host}:{port} is already in use (another `herald dev`? {setting} moves it)",
        )


async def bound_or_named(start: Awaitable[Any], *, host: str, port: int, setting: str) -> None:
    """Await a server's start; "address already in use" becomes a PortInUse naming the
    address and `setting` (the socket's own error names neither)."""
    try:
        await start
    except OSError as err:
        if err.errno != errno.EADDRINUSE:
            raise
        raise PortInUse(host, port, setting) from err


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on ``host`` right now.

    Picked at random below the kernel's ephemeral range (the ports it hands to `bind(0)`
    and to outgoing connections), so a port handed out here is not also handed, before
    its server binds it, to a connection or to a server that asks the kernel for any port
    (the Temporal dev server picks its internal services' ports that way: one of them
    once took the frontend port a parallel test run had just picked). There is still a
    race between this call and the moment the caller binds the port; callers that start a
    server on it should treat "address already in use" as retryable.
    """
    low, _ = _ephemeral_range()
    tries = 50 if low - PICK_FLOOR >= 1000 else 0  # else the kernel's pick, as before
    for _ in range(tries):
        port = random.randrange(PICK_FLOOR, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


PICK_FLOOR = 20_000
"""free_port picks from here up to the start of the ephemeral range."""


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux), else IANA's 49152-65535."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 49_152, 65_535


def port_in_use(host: str, port: int, *, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
