"""The client address the API sees (its access log, the console's sign-in throttle): the
socket peer, unless the peer is a trusted proxy (HERALD_TRUSTED_PROXIES)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

import settings
from api.server import server_config


async def seen_client(trusted: list[str], peer: str, forwarded: str | None) -> str:
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen["client"] = scope["client"][0]

    cfg = settings.Settings(trusted_proxies=trusted)
    config = server_config(cfg, FastAPI(), host="127.0.0.1", port=0)
    config.app = app
    config.load()
    headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded else []
    scope = {
        "type": "http",
        "client": (peer, 4000),
        "headers": headers,
        "scheme": "http",
        "path": "/",
        "method": "GET",
    }
    await config.loaded_app(scope, None, None)
    return str(seen["client"])


async def test_without_trusted_proxies_the_client_is_the_socket_peer() -> None:
    assert await seen_client([], "127.0.0.1", "203.0.113.7") == "127.0.0.1"
    assert await seen_client([], "198.51.100.1", "203.0.113.7") == "198.51.100.1"


async def test_a_trusted_proxy_names_the_client_and_an_untrusted_peer_cannot() -> None:
    trusted = ["10.0.0.0/8"]
    assert await seen_client(trusted, "10.1.2.3", "203.0.113.7") == "203.0.113.7"
    # The nearest address that is not itself a trusted proxy: a client cannot prepend one.
    assert await seen_client(trusted, "10.1.2.3", "192.0.2.66, 203.0.113.7, 10.9.9.9") == (
        "203.0.113.7"
    )
    assert await seen_client(trusted, "198.51.100.1", "203.0.113.7") == "198.51.100.1"
