"""The embedded stack behind `herald dev`, `herald demo` and the end-to-end tests.

On loopback, under one data folder: the Temporal dev server (SQLite, Web UI, Herald's
search attributes), embedded PostgreSQL, migrations and packaged policies/templates, the
worker as a separate process, the HTTP ingress, the carrier simulator and an SMTP sink.
Any piece given by settings (a Postgres URL, a Temporal address) is used instead.
"""

from __future__ import annotations

import asyncio
import fcntl
import getpass
import json
import os
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from sqlalchemy.orm import sessionmaker

import settings as settings_module
from activities.contracts import SEARCH_ATTRIBUTES
from api.app import Ingress, create_app
from api.ingress.sendgrid import EVENTS_PATH
from api.server import email_events_config
from devstack.ports import bound_or_named, free_port
from devstack.postgres import EmbeddedPostgres
from devstack.processes import ChildProcess
from devstack.temporal import TemporalDevServer
from domain.principals import local_principal_name
from ledger import artifacts, migrate, principals
from ledger.engine import ledger_engine
from ledger.keys import load_cipher
from ledger.templates import seed_packaged
from settings import write_secret_file
from simulators.sendgrid import SendGridSimulatorServer
from simulators.server import LoopbackServer
from simulators.smtp import SmtpSink
from simulators.telnyx import TelnyxSimulatorServer
from simulators.twilio import SimulatorServer
from starter.client import HeraldClient
from transports.sendgrid import generate_event_key_pair, public_key_of


class AlreadyRunning(RuntimeError):
    pass


@dataclass
class Addresses:
    temporal: str
    temporal_ui: str | None
    api: str
    simulator: str
    smtp: str
    postgres: str
    email_provider: str = ""
    """The email provider the worker sends through, and where."""
    email_simulator: str = ""
    """The SendGrid simulator's base URL (empty when a real SendGrid is configured)."""
    namespace: str = "default"
    operator_token_file: str = ""
    admin_name: str = ""
    """The local admin principal `herald dev` created (the console's sign-in name)."""
    pids: dict[str, int] = field(default_factory=dict)
    worker_metrics: str = ""
    worker_herald_metrics: str = ""
    telnyx_simulator: str = ""
    """The Telnyx simulator (the second SMS provider), unless HERALD_TELNYX_BASE_URL is set."""

    def table(self) -> str:
        rows = [
            ("Temporal gRPC", self.temporal),
            ("Temporal Web UI", self.temporal_ui or "(headless)"),
            ("Herald API", self.api),
            ("Operator console", f"{self.api}/console  (sign in: {self.admin_name or 'admin'})"),
            ("Carrier simulator", self.simulator),
            ("Telnyx simulator", self.telnyx_simulator or "(HERALD_TELNYX_BASE_URL)"),
            ("SMTP sink", self.smtp),
            ("Email provider", self.email_provider or "smtp"),
            ("Postgres URL", self.postgres),
            (
                "Worker metrics",
                f"http://{self.worker_metrics}/metrics" if self.worker_metrics else "(off)",
            ),
            (
                "Worker metrics (Herald)",
                f"http://{self.worker_herald_metrics}/metrics"
                if self.worker_herald_metrics
                else "(off)",
            ),
            ("Operator token", self.operator_token_file),
        ]
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"  {name:<{width}}  {value}" for name, value in rows)

    def workflow_url(self, workflow_id: str) -> str | None:
        if not self.temporal_ui:
            return None
        from urllib.parse import quote

        workflow = quote(workflow_id, safe="")
        return f"{self.temporal_ui}/namespaces/{self.namespace}/workflows/{workflow}"


def _event_signing_key(cfg: settings_module.Settings) -> bytes:
    """This data folder's SendGrid-simulator signing key (made once, 0600), its public half
    beside it for `herald api` (settings.resolved_sendgrid_event_public_key)."""
    path = cfg.sendgrid_event_key_file
    if not path.exists():
        private, public = generate_event_key_pair()
        write_secret_file(path, private.decode())
        path.with_suffix(".pub").write_text(public + "\n")
    private = path.read_bytes()
    if not path.with_suffix(".pub").exists():
        path.with_suffix(".pub").write_text(public_key_of(private) + "\n")
    return private


def state_file(cfg: settings_module.Settings) -> Path:
    return cfg.data_path / "dev.json"


def read_running(cfg: settings_module.Settings) -> Addresses | None:
    """The addresses of a `herald dev` already running on this data folder, if any."""
    path = state_file(cfg)
    if not path.exists() or not _locked(cfg.data_path / "dev.lock"):
        return None
    return Addresses(**json.loads(path.read_text()))


def _locked(path: Path) -> bool:
    if not path.exists():
        return False
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


class DevStack:
    """Start everything with `await start()`, stop it all with `await stop()`."""

    def __init__(
        self,
        cfg: settings_module.Settings,
        *,
        worker_process: bool = True,
        temporal_ui: bool = True,
        fast_postgres: bool = False,
    ) -> None:
        self.cfg = cfg
        self._worker_process = worker_process
        self._temporal_ui = temporal_ui
        self._fast_postgres = fast_postgres
        self._lock: IO[str] | None = None
        self.postgres: EmbeddedPostgres | None = None
        self.temporal: TemporalDevServer | None = None
        self.simulator: SimulatorServer | None = None
        self.email_simulator: SendGridSimulatorServer | None = None
        self.telnyx_simulator: TelnyxSimulatorServer | None = None
        self.sink: SmtpSink | None = None
        self.api: LoopbackServer | None = None
        self.worker: ChildProcess | None = None
        self.client: HeraldClient | None = None
        self.addresses: Addresses | None = None

    def env(self) -> dict[str, str]:
        """Settings for child processes (the worker), as HERALD_* variables."""
        cfg = self.cfg
        return {
            "HERALD_ENV": cfg.env,
            "HERALD_DATA_DIR": str(cfg.data_path),
            "HERALD_DATABASE_URL": cfg.resolved_database_url(),
            "HERALD_TEMPORAL_ADDRESS": cfg.temporal_target,
            "HERALD_TEMPORAL_NAMESPACE": cfg.temporal_namespace,
            "HERALD_TASK_QUEUE": cfg.task_queue,
            "HERALD_SMS_BASE_URL": cfg.sms_api_url,
            "HERALD_SMTP_HOST": cfg.smtp_host,
            "HERALD_SMTP_PORT": str(cfg.smtp_port),
            "HERALD_EMAIL_PROVIDER": cfg.resolved_email_provider,
            "HERALD_SENDGRID_BASE_URL": cfg.sendgrid_api_url,
            "HERALD_SENDGRID_API_KEY": cfg.sendgrid_api_key.get_secret_value(),
            "HERALD_PUBLIC_BASE_URL": cfg.callback_base_url,
            "HERALD_API_PORT": str(cfg.api_port),
            "HERALD_DATA_KEY": cfg.resolved_data_keys(create=True),
            "HERALD_POLICY_NAME": cfg.policy_name,
            "HERALD_WORKER_METRICS_ADDRESS": cfg.worker_metrics_address or "",
            "HERALD_WORKER_HERALD_METRICS_ADDRESS": cfg.worker_herald_metrics_address or "",
            "HERALD_SMS_MAX_PER_SECOND": str(cfg.sms_max_per_second),
            "HERALD_SMS_MAX_CONCURRENT": str(cfg.sms_max_concurrent),
            "HERALD_SMS_ACCOUNT_SID": cfg.sms_account_sid,
            "HERALD_SMS_AUTH_TOKEN": cfg.sms_auth_token.get_secret_value(),
            "HERALD_UNSUBSCRIBE_SECRET": cfg.resolved_unsubscribe_secret(),
            "HERALD_TELNYX_BASE_URL": cfg.telnyx_api_url,
            "HERALD_TELNYX_API_KEY": cfg.telnyx_api_key.get_secret_value(),
            "HERALD_TELNYX_PUBLIC_KEY": cfg.telnyx_public_key or "",
            "HERALD_CIRCUIT_FAILURE_THRESHOLD": str(cfg.circuit_failure_threshold),
            "HERALD_CIRCUIT_WINDOW_SECONDS": str(cfg.circuit_window_seconds),
            "HERALD_CIRCUIT_COOL_DOWN_SECONDS": str(cfg.circuit_cool_down_seconds),
        }

    async def start(self) -> Addresses:
        cfg = self.cfg
        cfg.data_path.mkdir(parents=True, exist_ok=True)
        self._lock = open(cfg.data_path / "dev.lock", "a")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            self._lock.close()
            self._lock = None
            raise AlreadyRunning(
                f"already running on {cfg.data_path}; its addresses are in {state_file(cfg)}"
            ) from err
        try:
            return await self._start_all()
        except BaseException:
            await self.stop()
            raise

    async def _start_all(self) -> Addresses:
        cfg = self.cfg
        if cfg.database_url is None:
            self.postgres = EmbeddedPostgres(
                cfg.data_path, port=cfg.postgres_port, fast=self._fast_postgres
            )
            url = await asyncio.to_thread(self.postgres.start)
            cfg.database_url = url
        await asyncio.to_thread(migrate.upgrade, cfg.resolved_database_url())
        engine = ledger_engine(cfg.resolved_database_url())
        sessions = sessionmaker(engine, expire_on_commit=False)
        with sessions.begin() as session:
            seed_packaged(session, cfg.policy_name, switch=True)
            issued = principals.bootstrap_admin(
                session, local_principal_name(getpass.getuser()), at=datetime.now(UTC)
            )
        if issued is not None:
            # A fresh ledger: its first admin is the local user, and a second terminal's
            # CLI finds the token where it always has.
            write_secret_file(cfg.token_file, issued.token)
        if cfg.temporal_address is None:
            self.temporal = TemporalDevServer(
                cfg.data_path,
                port=cfg.temporal_port,
                ui_port=cfg.temporal_ui_port if self._temporal_ui else None,
                namespace=cfg.temporal_namespace,
                search_attributes=SEARCH_ATTRIBUTES,
            )
            cfg.temporal_address = await asyncio.to_thread(self.temporal.start)
        keys = cfg.resolved_data_keys(create=True)
        token = cfg.resolved_operator_token()
        self.sink = SmtpSink(host=cfg.smtp_host, port=cfg.smtp_port, maildir=cfg.data_path / "mail")
        await bound_or_named(
            _maybe_await(self.sink.start()),
            host=cfg.smtp_host,
            port=cfg.smtp_port,
            setting="HERALD_SMTP_PORT",
        )
        cfg.smtp_port = self.sink.port
        if cfg.sendgrid_base_url is None:
            self.email_simulator = SendGridSimulatorServer(
                api_key=cfg.sendgrid_api_key.get_secret_value(),
                port=cfg.email_simulator_port,
                event_url=f"{cfg.callback_base_url}{EVENTS_PATH}",
                private_key_pem=_event_signing_key(cfg),
                # What reaches a mailbox lands in the SMTP sink, readable as before.
                relay=(cfg.smtp_host, cfg.smtp_port),
            )
            await bound_or_named(
                self.email_simulator.start(),
                host=self.email_simulator.host,
                port=cfg.email_simulator_port,
                setting="HERALD_EMAIL_SIMULATOR_PORT",
            )
            cfg.email_simulator_port = self.email_simulator.port
        if cfg.sms_base_url is None:
            self.simulator = SimulatorServer(
                account_sid=cfg.sms_account_sid,
                auth_token=cfg.sms_auth_token.get_secret_value(),
                port=cfg.simulator_port,
                inbound_url=f"{cfg.callback_base_url}/v1/inbound/sms",
            )
            await bound_or_named(
                self.simulator.start(),
                host=self.simulator.host,
                port=cfg.simulator_port,
                setting="HERALD_SIMULATOR_PORT",
            )
            cfg.simulator_port = self.simulator.port
        if cfg.telnyx_base_url is None:
            # A key pair per stack: this stack's ingress trusts only its own simulator.
            self.telnyx_simulator = TelnyxSimulatorServer(
                api_key=cfg.telnyx_api_key.get_secret_value(),
                port=cfg.telnyx_simulator_port,
                inbound_url=f"{cfg.callback_base_url}/v1/webhooks/telnyx",
            )
            await bound_or_named(
                self.telnyx_simulator.start(),
                host=self.telnyx_simulator.host,
                port=cfg.telnyx_simulator_port,
                setting="HERALD_TELNYX_SIMULATOR_PORT",
            )
            cfg.telnyx_simulator_port = self.telnyx_simulator.port
            cfg.telnyx_public_key = self.telnyx_simulator.sim.public_key
        self.client = HeraldClient(
            await _connect(cfg),
            sessions,
            await asyncio.to_thread(load_cipher, engine, keys),
            task_queue=cfg.task_queue,
            retention_days=cfg.pii_retention_days,
            policy_name=cfg.policy_name,
        )
        self.api = LoopbackServer(
            create_app(
                Ingress(
                    self.client,
                    auth_token=cfg.sms_auth_token.get_secret_value(),
                    public_base_url=cfg.callback_base_url,
                    operator_token=token,
                    unsubscribe_secret=cfg.resolved_unsubscribe_secret(),
                    temporal_ui_url=self.temporal.ui_url if self.temporal else cfg.temporal_ui_url,
                    email_events=email_events_config(cfg),
                    console_session_lifetime=timedelta(hours=cfg.console_session_hours),
                    default_country=cfg.default_country,
                    telnyx_public_key=cfg.telnyx_public_key,
                    artifacts=artifacts.open_store(
                        cfg.artifact_store, data_path=cfg.data_path, sessions=sessions
                    ),
                    attachment_max_bytes=cfg.attachment_max_bytes,
                )
            ),
            host=cfg.api_host,
            port=cfg.api_port,
        )
        await bound_or_named(
            self.api.start(), host=cfg.api_host, port=cfg.api_port, setting="HERALD_API_PORT"
        )
        if self._worker_process:
            if not cfg.worker_metrics_address:
                cfg.worker_metrics_address = f"127.0.0.1:{free_port()}"
            if not cfg.worker_herald_metrics_address:
                cfg.worker_herald_metrics_address = f"127.0.0.1:{free_port()}"
            self.worker = ChildProcess(
                "worker",
                # In dev the code is the current code: its build is made current at start.
                [sys.executable, "-m", "worker", "--make-current"],
                log_path=cfg.data_path / "worker.log",
                env={**os.environ, **self.env()},
                cwd=Path(__file__).resolve().parent.parent,
            )
            self.worker.start()
        self.addresses = Addresses(
            temporal=cfg.temporal_target,
            temporal_ui=self.temporal.ui_url if self.temporal else None,
            api=cfg.api_url,
            simulator=cfg.sms_api_url,
            telnyx_simulator=cfg.telnyx_api_url if self.telnyx_simulator else "",
            smtp=f"{cfg.smtp_host}:{cfg.smtp_port}",
            email_simulator=self.email_simulator.url if self.email_simulator else "",
            email_provider=f"{cfg.resolved_email_provider} ({cfg.sendgrid_api_url} events signed)"
            if cfg.resolved_email_provider == "sendgrid"
            else f"smtp ({cfg.smtp_host}:{cfg.smtp_port}); SendGrid simulator at "
            f"{cfg.sendgrid_api_url}",
            postgres=_redact(cfg.resolved_database_url()),
            namespace=cfg.temporal_namespace,
            operator_token_file=str(cfg.token_file),
            admin_name=local_principal_name(getpass.getuser()),
            worker_metrics=cfg.worker_metrics_address or "",
            worker_herald_metrics=cfg.worker_herald_metrics_address or "",
            pids={
                k: v
                for k, v in {
                    "postgres": self.postgres.pid if self.postgres else None,
                    "temporal": self.temporal.pid if self.temporal else None,
                    "worker": self.worker.pid if self.worker else None,
                    "supervisor": os.getpid(),
                }.items()
                if v
            },
        )
        state_file(cfg).write_text(json.dumps(self.addresses.__dict__, indent=2))
        return self.addresses

    async def stop(self) -> None:
        """Stop in reverse order; every step runs even if an earlier one failed."""
        steps: list[Any] = []
        if self.worker is not None:
            steps.append(lambda: asyncio.to_thread(self.worker.stop))  # type: ignore[union-attr]
        if self.api is not None:
            steps.append(self.api.stop)
        if self.simulator is not None:
            steps.append(self.simulator.stop)
        if self.email_simulator is not None:
            steps.append(self.email_simulator.stop)
        if self.telnyx_simulator is not None:
            steps.append(self.telnyx_simulator.stop)
        if self.sink is not None:
            steps.append(lambda: _maybe_await(self.sink.stop()))  # type: ignore[union-attr]
        if self.temporal is not None:
            steps.append(lambda: asyncio.to_thread(self.temporal.stop))  # type: ignore[union-attr]
        if self.postgres is not None:
            steps.append(lambda: asyncio.to_thread(self.postgres.stop))  # type: ignore[union-attr]
        for step in steps:
            try:
                await step()
            except Exception as err:  # noqa: BLE001 - keep stopping the rest
                print(f"herald: stopping a component failed: {err}", file=sys.stderr)
        if self._lock is not None:
            state_file(self.cfg).unlink(missing_ok=True)
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


async def _connect(cfg: settings_module.Settings):  # type: ignore[no-untyped-def]
    from temporalio.client import Client

    return await Client.connect(cfg.temporal_target, namespace=cfg.temporal_namespace)


async def _maybe_await(value: Any) -> Any:
    if asyncio.iscoroutine(value):
        return await value
    return value


def _redact(url: str) -> str:
    """The URL a second terminal can use: the role kept (libpq would otherwise take the
    login user's name, which the embedded cluster does not know), the password dropped."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001
        return url
    return parsed._replace(drivername="postgresql", password=None).render_as_string(
        hide_password=False
    )
