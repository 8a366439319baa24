"""Proving a provider account's credentials without sending anything (`herald doctor`).

Each adapter has `check_account()`: its provider's cheapest authenticated read (Twilio's
Account resource, Telnyx's balance, SendGrid's scopes; for SMTP a session that stops
after AUTH). It returns a few words on success and raises `AccountCheckFailed` with one
line saying why otherwise: nothing the provider said about a message, so nothing personal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from transports.errors import AccountCheckFailed


async def authenticated_read(
    client: httpx.AsyncClient,
    url: str,
    *,
    timeout: httpx.Timeout,
    code_of: Callable[[Any], str | None],
    **request: Any,
) -> Any:
    """GET `url` (credentials in `request`: `auth=` or `headers=`) and return its JSON.
    A refusal names the HTTP status and the provider's code (`code_of(body)`)."""
    where = urlsplit(url).netloc or url
    try:
        response = await client.get(url, timeout=timeout, **request)
    except httpx.TimeoutException as exc:
        raise AccountCheckFailed(f"no answer from {where} in time ({type(exc).__name__})") from exc
    except httpx.HTTPError as exc:
        raise AccountCheckFailed(f"cannot reach {where} ({type(exc).__name__})") from exc
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.is_success and body is not None:
        return body
    code = code_of(body) if body is not None else None
    said = f"HTTP {response.status_code}" + (f", code {code}" if code else "")
    if response.status_code in (401, 403):
        raise AccountCheckFailed(f"credentials refused by {where} ({said})")
    raise AccountCheckFailed(f"{where} answered {said}")
