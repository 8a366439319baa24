"""Loopback port helpers."""

from __future__ import annotations

import socket

__all__ = ["free_port", "port_in_use"]


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
