"""The API on its own (`herald api`): uvicorn over the app, built from settings.

`herald dev` serves the same app inside its own process (`devstack.stack`); this is the
production shape: one or more API processes beside the workers, behind a proxy. With
HERALD_INGRESS_PORT (or `--ingress-port`) the process also serves the public ingress
(`create_app(..., public=True)`: the provider webhooks and the unsubscribe link alone) on
that port, over the same Ingress, so its counters are in the private listener's /metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator, Sequence
from datetime import timedelta

import uvicorn
from fastapi import FastAPI

import settings as settings_module
from api.app import Ingress, create_app
from api.deps import EventsConfig
from api.ingress.sendgrid import load_event_public_key
from ledger import artifacts
from starter.client import HeraldClient


def build_ingress(cfg: settings_module.Settings, client: HeraldClient) -> Ingress:
    """What both apps serve from, with every secret taken from settings (generated in dev,
    required elsewhere)."""
    return Ingress(
        client,
        auth_token=cfg.sms_auth_token.get_secret_value(),
        public_base_url=cfg.callback_base_url,
        operator_token=cfg.resolved_operator_token(),
        unsubscribe_secret=cfg.resolved_unsubscribe_secret(),
        temporal_ui_url=cfg.temporal_ui_url,
        email_events=email_events_config(cfg),
        console_session_lifetime=timedelta(hours=cfg.console_session_hours),
        default_country=cfg.default_country,
        telnyx_public_key=cfg.telnyx_public_key,
        provider_kinds={alias: p.kind for alias, p in cfg.provider_settings().items()},
        artifacts=artifacts.open_store(
            cfg.artifact_store, data_path=cfg.data_path, sessions=client.sessions
        ),
        attachment_max_bytes=cfg.attachment_max_bytes,
    )


def email_events_config(cfg: settings_module.Settings) -> EventsConfig:
    """The Event Webhook's verification key and tolerance from settings (no key: the route
    answers 503 and stores nothing)."""
    key = cfg.resolved_sendgrid_event_public_key()
    return EventsConfig(
        load_event_public_key(key) if key else None,
        tolerance_seconds=cfg.sendgrid_event_tolerance_seconds,
    )


class _Server(uvicorn.Server):
    """Stops gracefully on SIGINT/SIGTERM and exits 0 (uvicorn re-raises the signal after
    its shutdown, which makes `docker stop` and supervisors report a crash). A process with
    two listeners stops both on the one signal: `together` are the others."""

    def __init__(self, config: uvicorn.Config, together: Sequence[uvicorn.Server] = ()) -> None:
        super().__init__(config)
        self.together = together

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # type: ignore[override]
        loop = asyncio.get_running_loop()
        signals = (signal.SIGINT, signal.SIGTERM)
        for sig in signals:
            loop.add_signal_handler(sig, self.stop_all, sig)
        try:
            yield
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)

    def stop_all(self, sig: int) -> None:
        for server in (self, *self.together):
            server.handle_exit(sig, None)


class _Companion(uvicorn.Server):
    """The second listener: the first one's signal handlers stop it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # type: ignore[override]
        yield


async def serve(
    cfg: settings_module.Settings,
    *,
    host: str | None = None,
    port: int | None = None,
    ingress_port: int | None = None,
) -> None:
    """Connect to Temporal and the ledger, then serve until SIGINT or SIGTERM: the full app
    on `port`, and the public ingress on `ingress_port` (HERALD_INGRESS_PORT) when set."""
    from runtime.logs import configure_logging

    configure_logging()  # one JSON object per line, uvicorn's access log included
    # The API sends nothing, but it must not come up beside workers that cannot: the
    # same sender settings are checked here, before anything connects.
    cfg.sender_book()
    client = await HeraldClient.connect(cfg)
    ingress = build_ingress(cfg, client)
    host = host or cfg.api_host
    ingress_port = ingress_port if ingress_port is not None else cfg.ingress_port
    companions: list[uvicorn.Server] = []
    if ingress_port is not None:
        public = create_app(ingress, public=True)
        companions.append(_Companion(server_config(cfg, public, host=host, port=ingress_port)))
    config = server_config(
        cfg,
        create_app(ingress),
        host=host,
        port=port if port is not None else cfg.api_port,
    )
    servers = [_Server(config, together=companions), *companions]
    running = [asyncio.create_task(server.serve()) for server in servers]
    # One listener ending (a signal, or a port it could not bind) ends the other.
    await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
    for server in servers:
        server.should_exit = True
    await asyncio.gather(*running)


def server_config(
    cfg: settings_module.Settings, app: FastAPI, *, host: str, port: int
) -> uvicorn.Config:
    """uvicorn's settings for the API. The client address (the access log's, and the one
    the console's sign-in throttle counts) is the socket peer, unless the peer is one of
    HERALD_TRUSTED_PROXIES: then it is the address that proxy put in X-Forwarded-For
    (the nearest one not itself trusted). Signatures use HERALD_PUBLIC_BASE_URL, never
    forwarded headers."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="info",
        log_config=None,  # keep the JSON handler configured above
        proxy_headers=bool(cfg.trusted_proxies),
        forwarded_allow_ips=list(cfg.trusted_proxies),
        timeout_graceful_shutdown=10,
        # Longer than the proxy's or provider's pooled connections stay idle (load
        # balancers: 60 s), so none is reused just as this server closes it.
        timeout_keep_alive=75,
    )
