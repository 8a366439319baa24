"""The ingress as an ASGI app over the real test Postgres, with a recording Temporal stub.

Rows are committed (the ingress runs its own transactions), so every test uses unique
business keys, message ids and phone numbers.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import pytest_asyncio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from fastapi import FastAPI
from nacl.signing import SigningKey
from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from twilio.request_validator import RequestValidator

from api.app import Ingress, create_app
from api.deps import EventsConfig
from api.ingress.sendgrid import load_event_public_key
from domain.states import AttemptState
from ledger import observations
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.models import Attempt, Observation
from ledger.observations import ObservationFacts
from starter.client import HeraldClient
from tests.conftest import unique
from tests.ledger.conftest import fields, make_attempt
from transports.sendgrid import public_key_of

AUTH_TOKEN = "test-auth-token"
OPERATOR_TOKEN = "test-operator-token"
UNSUBSCRIBE_SECRET = "test-unsubscribe-secret"
PUBLIC_BASE = "https://herald.example.test"
"""What the provider calls (and signs); the app itself is reached at INTERNAL_BASE."""
INTERNAL_BASE = "http://10.0.0.5:8080"
BEARER = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
EVENT_PRIVATE_KEY = ec.derive_private_key(0x5E9D_64A1_0B7C_33F2, ec.SECP256R1()).private_bytes(
    serialization.Encoding.PEM,
    serialization.PrivateFormat.PKCS8,
    serialization.NoEncryption(),
)
"""The email provider's Event Webhook key these tests sign with: fixed, since this module
is imported both as pytest's conftest and by name, and both must hold the same key."""
EVENT_PUBLIC_KEY = public_key_of(EVENT_PRIVATE_KEY)
TELNYX_SIGNING_KEY = SigningKey(hashlib.sha256(b"herald tests: telnyx account").digest())
"""Telnyx's side, in PyNaCl (what the official `telnyx` package verifies with). Fixed,
not random: this module is imported both as pytest's conftest and by test modules."""
TELNYX_PUBLIC_KEY = base64.b64encode(bytes(TELNYX_SIGNING_KEY.verify_key)).decode()


@dataclass
class StubHandle:
    temporal: StubTemporal
    workflow_id: str

    async def signal(self, name: str, arg: Any) -> None:
        self.temporal.signals.append((self.workflow_id, name, arg))
        if self.temporal.fail_signals:
            raise RPCError("temporal is down", RPCStatusCode.UNAVAILABLE, b"")

    async def describe(self, **_: Any) -> Any:
        # No worker runs here: every workflow reads as not running, unless a test races
        # an update against the workflow's end (running until the update is asked).
        if self.temporal.closes_at_update and self.workflow_id not in self.temporal.closed:
            return SimpleNamespace(status=WorkflowExecutionStatus.RUNNING)
        raise RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")

    async def execute_update(self, name: str, arg: Any, **_: Any) -> Any:
        # The workflow closes as the update reaches it (what the server then answers).
        self.temporal.closed.add(self.workflow_id)
        raise RPCError("workflow execution already completed", RPCStatusCode.NOT_FOUND, b"")


@dataclass
class StubServiceClient:
    """`check_health` as the real service client has it; `down` makes it raise."""

    down: bool = False
    hang: asyncio.Event | None = None
    """While set to an unset event, health checks wait for it (a frontend that hangs)."""
    calls: int = 0

    async def check_health(self) -> bool:
        self.calls += 1
        if self.hang is not None:
            await self.hang.wait()
        if self.down:
            raise RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b"")
        return True


@dataclass
class StubTemporal:
    """Records signals and starts; `start_gate` holds starts (a request kept in flight)."""

    service_client: StubServiceClient = field(default_factory=StubServiceClient)
    signals: list[tuple[str, str, Any]] = field(default_factory=list)
    starts: list[str] = field(default_factory=list)
    fail_signals: bool = False
    start_gate: asyncio.Event | None = None
    start_entered: asyncio.Event = field(default_factory=asyncio.Event)
    closes_at_update: bool = False
    """Workflows read as running until an update is asked; then they have closed."""
    closed: set[str] = field(default_factory=set)

    def get_workflow_handle(self, workflow_id: str, **_: Any) -> StubHandle:
        return StubHandle(self, workflow_id)

    async def start_workflow(self, _run: Any, _arg: Any, *, id: str, **_: Any) -> None:
        self.start_entered.set()
        if self.start_gate is not None:
            await self.start_gate.wait()
        self.starts.append(id)


def build_app(
    sessions: sessionmaker[Session], cipher: FieldCipher, temporal: Any, **options: Any
) -> tuple[FastAPI, Ingress]:
    """The app over `sessions`, with the test secrets; `options` go to `Ingress`."""
    client = HeraldClient(temporal, sessions, cipher)
    ingress = Ingress(
        client,
        auth_token=AUTH_TOKEN,
        public_base_url=PUBLIC_BASE,
        operator_token=OPERATOR_TOKEN,
        unsubscribe_secret=UNSUBSCRIBE_SECRET,
        email_events=EventsConfig(load_event_public_key(EVENT_PUBLIC_KEY)),
        telnyx_public_key=TELNYX_PUBLIC_KEY,
        **options,
    )
    return create_app(ingress), ingress


@pytest.fixture
def temporal() -> StubTemporal:
    return StubTemporal()


@pytest.fixture
def app(committed: sessionmaker[Session], cipher: FieldCipher, temporal: StubTemporal) -> FastAPI:
    return build_app(committed, cipher, temporal)[0]


@pytest_asyncio.fixture
async def http(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    # Each test its own client address: the console's sign-in throttle counts refusals
    # per address in the shared ledger, across tests.
    address = ".".join(str(secrets.randbelow(250) + 1) for _ in range(4))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, client=(address, 4000)), base_url=INTERNAL_BASE
    ) as client:
        yield client


def sign(url: str, params: dict[str, str], token: str = AUTH_TOKEN) -> str:
    """The signature Twilio would send, computed by the twilio package itself."""
    return RequestValidator(token).compute_signature(url, params)


async def post_signed(
    http: httpx.AsyncClient,
    path: str,
    params: dict[str, str],
    *,
    signed_url: str | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """POST a form the way the provider does: signed over the public URL."""
    url = signed_url or f"{PUBLIC_BASE}{path}"
    all_headers = {"X-Twilio-Signature": sign(url, params), **(headers or {})}
    return await http.post(
        path,
        content=urlencode(params),
        headers={"Content-Type": "application/x-www-form-urlencoded", **all_headers},
    )


def random_mobile() -> str:
    """A valid UK mobile number outside the simulator's fault range."""
    return f"+4474002{secrets.randbelow(100_000):05d}"


@dataclass(frozen=True)
class SentAttempt:
    intent_id: str
    workflow_id: str
    token: str
    remote_id: str
    attempt_id: int


def submitted_attempt(
    sessions: sessionmaker[Session], cipher: FieldCipher, *, phone: str | None = None
) -> SentAttempt:
    """An intent with one SMS attempt the provider accepted (state `submitted`)."""
    key = unique("order-created:o")
    remote_id = "SM" + secrets.token_hex(16)
    with sessions.begin() as session:
        overrides = {"phone": phone} if phone else {}
        recorded = repo.record_intent(session, fields(session, cipher, key, **overrides))
        attempt = make_attempt(
            session,
            cipher,
            recorded.intent_id,
            key,
            destination=phone or "+447400000100",
            rule="allow",
        )
        token = attempt.token
        observations.record_observation(
            session,
            ObservationFacts(
                source="send",
                raw_status="queued",
                normalized=AttemptState.SUBMITTED,
                observed_at=datetime.now(UTC),
                dedupe_key=f"send:{token}",
                remote_id=remote_id,
            ),
            token=token,
        )
        return SentAttempt(recorded.intent_id, recorded.workflow_id, token, remote_id, attempt.id)


def sent_through(sessions: sessionmaker[Session], attempt_id: int, provider: str) -> None:
    """Record that the attempt went through the provider alias `provider`."""
    with sessions.begin() as session:
        attempt = session.get(Attempt, attempt_id)
        assert attempt is not None
        attempt.provider = provider


def webhook_observations(sessions: sessionmaker[Session], remote_id: str) -> list[Observation]:
    return [o for o in observations_of(sessions, remote_id=remote_id) if o.source == "webhook"]


def observations_of(sessions: sessionmaker[Session], *, remote_id: str) -> list[Observation]:
    with sessions() as session:
        return list(
            session.execute(
                select(Observation)
                .where(Observation.remote_id == remote_id)
                .order_by(Observation.id)
            ).scalars()
        )


def attempt_state(sessions: sessionmaker[Session], attempt_id: int) -> str:
    with sessions() as session:
        row = session.get(Attempt, attempt_id)
        assert row is not None
        return row.state


def observation_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(Observation)).scalar_one()


def production_api_env(pg_url: str, time_env, data_dir) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The environment of a `herald api` run as production runs it, on the test's ledger
    and time-skipping Temporal: every secret given, and the addresses production takes no
    dev default for (the API sends nothing, so nothing is ever asked of these hosts)."""
    import os

    from tests.conftest import TEST_KEYRING

    return {
        **os.environ,
        "HERALD_ENV": "production",
        "HERALD_DATA_DIR": str(data_dir),
        "HERALD_DATABASE_URL": pg_url,
        "HERALD_TEMPORAL_ADDRESS": time_env.client.service_client.config.target_host,
        "HERALD_OPERATOR_TOKEN": "cli-test-token",
        "HERALD_SMS_AUTH_TOKEN": "cli-test-sms-token",
        "HERALD_UNSUBSCRIBE_SECRET": "cli-test-unsubscribe",
        "HERALD_DATA_KEY": TEST_KEYRING,
        "HERALD_PUBLIC_BASE_URL": PUBLIC_BASE,
        "HERALD_SMS_BASE_URL": "https://api.twilio.example.com",
        "HERALD_SMTP_HOST": "smtp.example.com",
    }
