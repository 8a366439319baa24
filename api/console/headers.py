"""The security headers of every console answer, and the policy of /docs and /redoc.

Set by one ASGI middleware rather than by each page, so that every answer under /console
carries them: pages, redirects, error pages, the CSV, the static files, and answers that
no route wrote (a 404, a 405, a validation error).

/docs and /redoc start with an inline script (Swagger UI) or an inline style (ReDoc), which
the console's policy forbids; their own policy allows exactly those inline blocks by their
SHA-256, taken from the page as served, so a change of the packaged pages cannot slip an
unlisted script past it.
"""

from __future__ import annotations

import base64
import hashlib
import re

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONSOLE_HEADERS = {
    # Nothing but the app's own files; no inline script; never framed.
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}
DOCS_PATHS = ("/docs", "/redoc", "/docs/oauth2-redirect")
_INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.S)


def docs_policy(body: bytes) -> str:
    """The CSP of a documentation page: its own files, its inline scripts by hash, inline
    styles (ReDoc and Swagger UI style elements from script at run time, which no hash
    can name), images as data: URLs, ReDoc's search worker from a blob: URL."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(script).digest()).decode() + "'"
        for script in _INLINE_SCRIPT.findall(body)
    )
    return (
        f"default-src 'self'; script-src 'self' {hashes}".rstrip()
        + "; style-src 'self' 'unsafe-inline'; img-src 'self' data:; worker-src 'self' blob:; "
        "object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
    )


class SecurityHeaders:
    """Sets CONSOLE_HEADERS on every answer under /console, and the documentation pages'
    own policy on /docs and /redoc."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == "/console" or path.startswith("/console/"):
            await self.app(scope, receive, self._console(send))
        elif path in DOCS_PATHS:
            await self._docs(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    @staticmethod
    def _console(send: Send) -> Send:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in CONSOLE_HEADERS.items():
                    headers[name] = value
            await send(message)

        return with_headers

    async def _docs(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The pages are a few kilobytes: hold the answer, hash its inline scripts, send it.
        start: Message | None = None
        chunks: list[bytes] = []

        async def held(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            assert start is not None
            body = b"".join(chunks)
            headers = MutableHeaders(scope=start)
            headers["Content-Security-Policy"] = docs_policy(body)
            headers["X-Content-Type-Options"] = "nosniff"
            headers["Referrer-Policy"] = "no-referrer"
            await send(start)
            await send({"type": "http.response.body", "body": body, "more_body": False})

        await self.app(scope, receive, held)
