"""What the routers share, below the app factory: the `Ingress` (built once by
`api.server` or `herald dev`, kept on `app.state`) and the dependency that hands it to
a route. Routers import this module, never `api.app`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any

from fastapi import Depends, Request
from twilio.request_validator import RequestValidator

from api import idempotency
from api.auth import Authenticator
from api.ingress.telnyx_signature import TelnyxVerifier
from api.metrics import build_registry
from ledger.artifacts import DEFAULT_MAX_BYTES, ArtifactStore, PostgresArtifactStore
from ledger.observations import Through
from ledger.transactions import Transactions
from starter.client import HeraldClient

MAX_BODY_BYTES = 64 * 1024
"""The largest request body the app reads (413 beyond it, `api.app.BodyLimit`)."""
DEFAULT_EVENT_TOLERANCE_SECONDS = 26 * 3600
"""How old an email event batch's signed timestamp may be: SendGrid's 24 hours of retries,
and two to spare (api.ingress.sendgrid)."""


INGRESS_OF: dict[str, tuple[str, str]] = {
    "twilio": ("Twilio status callbacks", "sms"),
    "telnyx": ("Telnyx message events", "sms"),
    "sendgrid": ("SendGrid events", "email"),
}
"""Each provider kind with an ingress: how operators know it, and the channel it serves."""


@dataclass(frozen=True)
class EventsConfig:
    """The email provider's Event Webhook: its verification key and timestamp tolerance."""

    public_key: Any
    """An `EllipticCurvePublicKey` (transports.sendgrid.load_event_public_key), or None
    when email events are not configured (the route answers 404 and stores nothing)."""
    tolerance_seconds: int = DEFAULT_EVENT_TOLERANCE_SECONDS


class Ingress:
    """What the routes need; built once by `create_app`."""

    def __init__(
        self,
        client: HeraldClient,
        *,
        auth_token: str,
        public_base_url: str,
        operator_token: str | None,
        unsubscribe_secret: str,
        temporal_ui_url: str | None = None,
        email_events: EventsConfig | None = None,
        console_session_lifetime: timedelta = timedelta(hours=12),
        default_country: str = "GB",
        telnyx_public_key: str | None = None,
        provider_kinds: Mapping[str, str] | None = None,
        artifacts: ArtifactStore | None = None,
        attachment_max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.client = client
        self.artifacts = artifacts or PostgresArtifactStore(client.sessions)
        """Where `POST /v1/attachments` stores bytes (HERALD_ARTIFACT_STORE; the ledger's
        own table unless told another: it needs nothing but the ledger)."""
        self.attachment_max_bytes = attachment_max_bytes
        """The largest attachment taken (HERALD_ATTACHMENT_MAX_BYTES): 413 beyond it."""
        kinds = dict(provider_kinds or {kind: kind for kind in INGRESS_OF})
        self.through = {
            kind: Through(name, channel, frozenset(a for a, k in kinds.items() if k == kind))
            for kind, (name, channel) in INGRESS_OF.items()
        }
        """What each provider's ingress speaks for (`ledger.observations.Through`), by the
        provider's kind: its channel and every alias of that kind (HERALD_PROVIDERS)."""
        self.email_events = email_events or EventsConfig(public_key=None)
        """The email provider's Event Webhook key and tolerance (api.ingress.sendgrid)."""
        self.tx = Transactions(client.sessions)
        """One transaction of the ledger, run off the event loop (ledger.transactions)."""
        self.telnyx_verifier = TelnyxVerifier(telnyx_public_key) if telnyx_public_key else None
        """Checks Telnyx's Ed25519 webhooks; without a key its route refuses every event."""
        self.temporal_ui_url = temporal_ui_url
        """The Temporal Web UI's base URL, for the console's link to a workflow."""
        self.console_session_lifetime = console_session_lifetime
        """A console session ends this long after sign-in (HERALD_CONSOLE_SESSION_HOURS)."""
        self.default_country = default_country.upper()
        """The console search reads a national phone number in this country unless told
        another (HERALD_DEFAULT_COUNTRY)."""
        self.validator = RequestValidator(auth_token)
        self.public_base_url = public_base_url.rstrip("/")
        # HERALD_OPERATOR_TOKEN: the break-glass admin (optional in dev).
        self.auth = Authenticator(client.sessions, break_glass_token=operator_token)
        self.unsubscribe_secret = unsubscribe_secret
        self.registry, self.counters = build_registry(client.sessions)
        self.idempotency = idempotency.IdempotencyStore(client.sessions)
        """Idempotency-Key records for `POST /v1/intents`."""
        self._probes: dict[str, asyncio.Future[Any]] = {}

    def probe(self, name: str, start: Callable[[], Awaitable[Any]]) -> Awaitable[Any]:
        """The readiness probe `name`, shared: while one is still running (a database that
        hangs keeps a thread until its own timeouts), later requests wait on the same one
        instead of starting another, so probes never fill the thread pool."""
        running = self._probes.get(name)
        if running is None or running.done():
            running = self._probes[name] = asyncio.ensure_future(start())
            # Its outcome may reach no request (all timed out): retrieve it, no warning.
            running.add_done_callback(lambda f: f.cancelled() or f.exception())
        return asyncio.shield(running)

    def public_url(self, request: Request) -> str:
        """The URL the provider called and signed: the public origin, then the path and
        query exactly as they arrived. The path is taken undecoded (`raw_path`): a provider
        that called `/v1/receipts/%73ms` signed those bytes, not the `/v1/receipts/sms` the
        router matched, and the official validator compares it so."""
        raw_path = request.scope.get("raw_path")
        if raw_path:
            # Some servers (and httpx's ASGI transport) include the query in raw_path.
            path = raw_path.partition(b"?")[0].decode("latin-1")
        else:
            path = request.url.path
        query = request.scope.get("query_string", b"").decode("latin-1")
        return f"{self.public_base_url}{path}{'?' + query if query else ''}"


async def current_ingress(request: Request) -> Ingress:
    """The app's `Ingress` (set by `api.app.create_app`). Async on purpose: FastAPI runs a
    plain `def` dependency in its thread pool, a thread hop on every request (a twentieth
    of the ingress's Python time on receipts in `herald bench --profile`)."""
    ingress: Ingress = request.app.state.ingress
    return ingress


IngressDep = Annotated[Ingress, Depends(current_ingress)]
"""A route's `Ingress`: its client, authenticator, counters and settings."""
