"""Loopback port helpers."""

from __future__ import annotations

import errno
import socket
from collections.abc import Awaitable
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

    The kernel picks it (bind to port 0). There is an unavoidable race between this
    call and the moment the caller binds the port; callers that start a server on it
    should treat "address already in use" as retryable.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int, *, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
