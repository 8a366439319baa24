"""The public ingress (`create_app(..., public=True)`, `herald api --ingress-port`): what
providers and recipients call, and nothing else. The API, the console, the OpenAPI
document, `/readyz` and `/metrics` are 404 there and stay on the private app."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI

import settings
from api.app import create_app
from api.auth import app_routes
from api.ingress.sendgrid import EVENTS_PATH
from domain.unsubscribe import unsubscribe_token
from tests.api.conftest import (
    INTERNAL_BASE,
    attempt_state,
    build_app,
    post_signed,
    production_api_env,
    submitted_attempt,
)
from transports.telnyx import TelnyxSms
from transports.twilio import TwilioSms

pytestmark = pytest.mark.ledger

HERALD = str(Path(sys.executable).with_name("herald"))

PRIVATE_PATHS = (
    ("GET", "/v1/intents"),
    ("POST", "/v1/intents"),
    ("GET", "/v1/principals"),
    ("POST", "/v1/consents/search"),
    ("GET", "/v1/settlement-rules"),
    ("GET", "/console"),
    ("GET", "/console/sign-in"),
    ("GET", "/docs"),
    ("GET", "/redoc"),
    ("GET", "/openapi.json"),
    ("GET", "/static-offline-docs/swagger-ui.css"),
    ("GET", "/metrics"),
    ("GET", "/readyz"),
)


def routes_of(app: FastAPI) -> set[tuple[str, str]]:
    return {(method, path) for method, path, _ in app_routes(app) if method != "HEAD"}


@pytest.fixture
def public_app(committed, cipher, temporal) -> FastAPI:  # type: ignore[no-untyped-def]
    _, ingress = build_app(committed, cipher, temporal)
    return create_app(ingress, public=True)


@pytest_asyncio.fixture
async def public(public_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=public_app), base_url=INTERNAL_BASE
    ) as client:
        yield client


def test_the_public_app_has_the_provider_routes_and_health_alone(public_app, app):
    expected = {
        ("POST", TwilioSms.webhook_path),
        ("POST", "/v1/inbound/sms"),
        ("POST", TelnyxSms.webhook_path),
        ("POST", EVENTS_PATH),
        ("GET", "/v1/unsubscribe/{value}"),
        ("POST", "/v1/unsubscribe/{value}"),
        ("GET", "/healthz"),
    }
    assert routes_of(public_app) == expected
    # The same routes, from the same routers, as the private app serves.
    assert expected <= routes_of(app)


@pytest.mark.parametrize(("method", "path"), PRIVATE_PATHS)
async def test_the_public_app_does_not_know_the_private_paths(public, method, path):
    answer = await public.request(method, path)
    assert answer.status_code == 404, (method, path, answer.status_code)


async def test_no_other_route_of_the_private_app_is_on_the_public_one(public, public_app, app):
    others = routes_of(app) - routes_of(public_app)
    assert len(others) > 20
    for method, path in sorted(others):
        concrete = re.sub(r"\{[^}]+\}", "x", path)
        answer = await public.request(method, concrete)
        assert answer.status_code == 404, (method, path, answer.status_code)


@pytest.mark.parametrize(("method", "path"), PRIVATE_PATHS)
async def test_the_private_app_still_serves_them(http, method, path):
    answer = await http.request(method, path)
    assert answer.status_code != 404, (method, path)


async def test_a_signed_receipt_through_the_public_app_is_recorded(public, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    params = {
        "MessageSid": sent.remote_id,
        "MessageStatus": "delivered",
        "AccountSid": "AC00000000000000000000000000000000",
    }
    path = f"{TwilioSms.webhook_path}?{urlencode({'token': sent.token})}"
    answer = await post_signed(public, path, params)
    assert answer.status_code == 204
    assert attempt_state(committed, sent.attempt_id) == "delivered"


async def test_an_unsigned_receipt_is_refused_there_as_on_the_private_app(public):
    answer = await public.post(
        TwilioSms.webhook_path,
        content="MessageSid=SM1&MessageStatus=delivered",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code == 403


async def test_the_unsubscribe_link_works_on_the_public_app(public, committed, cipher):
    from tests.api.conftest import UNSUBSCRIBE_SECRET

    sent = submitted_attempt(committed, cipher)
    value = unsubscribe_token(UNSUBSCRIBE_SECRET, sent.token)
    page = await public.get(f"/v1/unsubscribe/{value}")
    assert page.status_code == 200 and "Unsubscribe" in page.text
    assert (await public.get("/healthz")).json() == {"status": "ok"}


def test_the_urls_given_to_providers_name_the_public_origin():
    """Signatures are computed over HERALD_PUBLIC_BASE_URL, and the callback URLs are built
    from it: it names the ingress. Unset, the API's own URL, which serves the provider
    routes as well (`herald dev`'s single origin), so a local stack still gets its receipts
    whether or not an ingress port is set."""
    assert (
        settings.Settings(public_base_url="https://hooks.example.org/").callback_base_url
        == "https://hooks.example.org"
    )
    local = settings.Settings(api_port=8000, ingress_port=8001)
    assert local.callback_base_url == "http://127.0.0.1:8000"


@pytest.mark.workflow
def test_herald_api_serves_the_public_ingress_on_its_own_port(pg_url, time_env, tmp_path):
    from devstack import free_port

    port, ingress_port = free_port(), free_port()
    env = {
        **production_api_env(pg_url, time_env, tmp_path),
        "HERALD_INGRESS_PORT": str(ingress_port),
    }
    proc = subprocess.Popen(
        [HERALD, "api", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    private, public = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{ingress_port}"
    try:
        deadline = time.monotonic() + 30
        for base in (private, public):
            while True:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                try:
                    if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"{base} did not come up"
                time.sleep(0.2)
        assert httpx.get(f"{public}/metrics").status_code == 404
        assert httpx.get(f"{public}/v1/intents").status_code == 404
        refused = httpx.post(
            f"{public}{TwilioSms.webhook_path}",
            content="MessageSid=SM1&MessageStatus=delivered",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert refused.status_code == 403
        # The public listener's counters are read on the private one.
        metrics = httpx.get(f"{private}/metrics").text
        assert 'herald_api_webhooks_rejected_total{reason="signature"} 1.0' in metrics
        assert httpx.get(f"{private}/v1/intents").status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    # One SIGTERM stops both listeners, and the process exits cleanly.
    assert proc.returncode == 0, proc.stdout.read() if proc.stdout else ""
