"""The one place that builds the Temporal client, the database engine, the transports and
the activity instances, and runs the workers.

Two task queues: `<queue>` for workflows (notifications and maintenance), ledger, email
and maintenance activities, and `<queue>-sms` for SMS send and poll, whose rate the
Temporal server enforces for the whole fleet (`max_task_queue_activities_per_second`), so
any number of workers share one budget.

Beside the workers, each process runs the outbox relay (`starter.relay`), makes sure the
maintenance schedules exist (`runtime.schedules`), logs one JSON object per line
(`runtime.logs`) and touches `<data_dir>/worker.alive`. SIGTERM shuts it down gracefully.

`python -m worker --healthcheck` (the container's healthcheck) says in one line whether a
worker here can work: its liveness file is fresh, Temporal describes the namespace and the
ledger answers `SELECT 1`, each within `HEALTH_TIMEOUT_SECONDS`; exit 0 or 1.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import NoReturn, TypeVar

import httpx
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool
from temporalio.client import Client
from temporalio.common import WorkerDeploymentVersion
from temporalio.runtime import Runtime
from temporalio.service import RPCError
from temporalio.worker import Worker, WorkerDeploymentConfig

import settings as settings_module
from activities.email import EmailActivities
from activities.ledger import LedgerActivities
from activities.maintenance import MaintenanceActivities
from activities.sms import SmsActivities
from domain import channels
from domain.channels import Channel
from domain.providers import provider_task_queue
from domain.senders import SenderBook
from ledger import artifacts
from ledger.crypto import FieldCipher, KeyRingError
from ledger.engine import ledger_engine
from ledger.keys import load_cipher
from runtime import deployments
from runtime.logs import configure_logging, core_log_forwarding
from runtime.loop import run
from runtime.sandbox import sandbox_runner
from runtime.schedules import ensure_schedules
from starter import temporal as starter_temporal
from starter.client import HeraldClient
from starter.relay import run_relay
from transports.email import EmailTransport
from transports.sendgrid import SendGridEmail
from transports.sms import SmsTransport
from transports.smtp import DkimConfig, SmtpEmail
from transports.telnyx import TelnyxSms
from transports.twilio import TwilioSms
from workflows.maintenance import MaintenanceWorkflow
from workflows.notification import NotificationWorkflow

log = logging.getLogger("herald.worker")

SHUTDOWN_GRACE = timedelta(seconds=10)
"""On SIGTERM, in-flight activities get this long to finish before they are cancelled and
handed back to the server (retried elsewhere). Keep it below the orchestrator's own stop
timeout (docker's default is 10 s: the compose file sets `stop_grace_period: 30s`)."""
RELAY_IN_WORKER = True
"""Every worker process also runs the outbox relay (several relays are safe)."""
SCHEDULES_AT_START = True
"""Every worker creates or updates the maintenance schedules at start-up (idempotent)."""
ALIVE_EVERY_SECONDS = 5.0
ALIVE_MAX_AGE_SECONDS = 30.0
HEALTH_TIMEOUT_SECONDS = 3.0
"""The healthcheck's bound on each question (Temporal, the ledger): both together stay
inside the compose healthcheck's own timeout."""


def ensure_workflow_bytecode() -> bool:
    """Write the bytecode of the workflow modules if it is missing or stale.

    The sandbox imports a workflow's module afresh for every workflow run it starts. With
    PYTHONDONTWRITEBYTECODE=1 (set on this machine, and in many container images,
    including ours) nothing ever writes that module's .pyc, so every run compiled
    workflows/notification/ from source: about a sixth of the worker's CPU in
    `herald bench`. Compiling once here lets every later import read the cached code.
    Honours PYTHONPYCACHEPREFIX; a read-only install is left as it is (False).
    """
    import compileall

    import workflows

    folder = Path(workflows.__file__).resolve().parent
    try:
        return bool(compileall.compile_dir(folder, quiet=2, maxlevels=1))
    except OSError:
        return False


async def connect(cfg: settings_module.Settings, *, runtime: Runtime | None = None) -> Client:
    return await starter_temporal.connect(cfg, runtime=runtime)


@dataclass
class Workers:
    main: Worker
    sms: Worker
    http: httpx.AsyncClient
    sessions: sessionmaker[Session]
    """The ledger sessions the activities use; the relay shares them."""
    cipher: FieldCipher
    engine: Engine
    sms_providers: list[Worker] = field(default_factory=list)
    """One per SMS provider alias, on its own rate-limited queue (failover routes)."""

    @property
    def all(self) -> list[Worker]:
        return [self.main, self.sms, *self.sms_providers]


def dkim_config(cfg: settings_module.Settings) -> DkimConfig | None:
    """DKIM signing when a domain, a selector and a key file are all configured."""
    if not (cfg.dkim_domain and cfg.dkim_selector and cfg.dkim_private_key_file):
        return None
    return DkimConfig(cfg.dkim_domain, cfg.dkim_selector, cfg.dkim_private_key_file.read_bytes())


def provider_transports(
    cfg: settings_module.Settings, http: httpx.AsyncClient
) -> tuple[dict[str, SmsTransport], dict[str, EmailTransport]]:
    """A transport for every configured provider alias (settings.provider_settings), by
    the adapter its kind names: (SMS transports, email transports)."""
    sms: dict[str, SmsTransport] = {}
    email: dict[str, EmailTransport] = {}
    for alias, provider in cfg.provider_settings().items():
        if isinstance(provider, settings_module.TwilioProvider):
            sms[alias] = TwilioSms(
                base_url=provider.base_url,
                account_sid=provider.account_sid,
                auth_token=provider.auth_token.get_secret_value(),
                client=http,
            )
        elif isinstance(provider, settings_module.TelnyxProvider):
            sms[alias] = TelnyxSms(
                base_url=provider.base_url,
                api_key=provider.api_key.get_secret_value(),
                messaging_profile_id=provider.messaging_profile_id,
                from_number=provider.from_number,
                client=http,
            )
        elif isinstance(provider, settings_module.SendGridProvider):
            email[alias] = SendGridEmail(
                api_key=provider.api_key.get_secret_value(), base_url=provider.base_url, client=http
            )
        else:
            email[alias] = SmtpEmail(
                host=provider.host,
                port=provider.port,
                starttls=provider.starttls,
                username=provider.username,
                password=provider.password.get_secret_value() if provider.password else None,
                dkim=dkim_config(cfg),
            )
    return sms, email


Transport = TypeVar("Transport")


def _default_transport(
    transports: dict[str, Transport], channel: Channel, alias: str | None = None
) -> Transport:
    alias = alias or channel.default_providers[0]
    try:
        return transports[alias]
    except KeyError:
        raise RuntimeError(
            f"provider settings: the default {channel.name} provider {alias!r} is not a "
            f"{channel.name} account in HERALD_PROVIDERS"
        ) from None


def deployment_version(cfg: settings_module.Settings) -> WorkerDeploymentVersion | None:
    """This worker's version in the Worker Deployment; None when versioning is off."""
    if not cfg.worker_versioning:
        return None
    return WorkerDeploymentVersion(cfg.worker_deployment, cfg.resolved_build_id())


def build_workers(
    client: Client,
    cfg: settings_module.Settings,
    *,
    senders: SenderBook,
    task_queue: str | None = None,
) -> Workers:
    queue = task_queue or cfg.task_queue
    # Every worker of the process joins the same version: the server routes a pinned run's
    # workflow and activity tasks to workers of its build only (docs/operations.md,
    # "Deploying a new build").
    version = deployment_version(cfg)
    deployment = (
        WorkerDeploymentConfig(version=version, use_worker_versioning=True)
        if version is not None
        else None
    )
    # Pooled connections idle for over a second are pinged at checkout, so a Postgres
    # restart does not fail the first activity on each dead connection (ledger.engine).
    engine = ledger_engine(cfg.resolved_database_url(), pool_size=10)
    sessions = sessionmaker(engine, expire_on_commit=False)
    # Refused here, naming the key id, if the ring cannot read the ledger (ledger.keys).
    cipher = load_cipher(engine, cfg.resolved_data_keys())
    http = httpx.AsyncClient()
    sms_providers, email_providers = provider_transports(cfg, http)
    sms = _default_transport(sms_providers, channels.SMS)
    # The email provider of attempts prepared before providers were recorded.
    email = _default_transport(email_providers, channels.EMAIL, cfg.resolved_email_provider)
    ledger_acts = LedgerActivities(
        sessions,
        cipher,
        retention_days=cfg.pii_retention_days,
        senders=senders,
        default_providers={channels.EMAIL.name: (cfg.resolved_email_provider,)},
    )
    sms_acts = SmsActivities(
        sms,
        sessions,
        cipher,
        callback_base_url=cfg.callback_base_url,
        senders=senders,
        providers=sms_providers,
        breaker=cfg.breaker_settings(),
    )
    email_acts = EmailActivities(
        email,
        sessions,
        cipher,
        artifacts.open_store(cfg.artifact_store, data_path=cfg.data_path, sessions=sessions),
        public_base_url=cfg.callback_base_url,
        unsubscribe_secret=cfg.resolved_unsubscribe_secret(),
        senders=senders,
        providers=email_providers,
    )
    maintenance = MaintenanceActivities(sessions)
    main = Worker(
        client,
        task_queue=queue,
        workflows=[NotificationWorkflow, MaintenanceWorkflow],
        activities=[
            ledger_acts.load_intent,
            ledger_acts.authorize,
            ledger_acts.record_verdict,
            ledger_acts.record_operator_action,
            ledger_acts.record_settlement,
            ledger_acts.record_waiting,
            email_acts.send_email,
            maintenance.reconcile,
            maintenance.purge,
            maintenance.archive,
        ],
        workflow_runner=sandbox_runner(client.data_converter),
        graceful_shutdown_timeout=SHUTDOWN_GRACE,
        deployment_config=deployment,
    )
    sms_worker = Worker(
        client,
        task_queue=channels.SMS.task_queue(queue),
        activities=[sms_acts.submit_sms, sms_acts.poll_sms, sms_acts.lookup_sms],
        max_task_queue_activities_per_second=cfg.sms_max_per_second,
        max_concurrent_activities=cfg.sms_max_concurrent,
        graceful_shutdown_timeout=SHUTDOWN_GRACE,
        deployment_config=deployment,
    )
    # Where the policy routes SMS to several providers, each try runs on its provider's
    # queue: one rate budget per provider (its contract's limits), for the whole fleet.
    per_provider = [
        Worker(
            client,
            task_queue=provider_task_queue(channels.SMS, queue, alias),
            activities=[sms_acts.submit_sms, sms_acts.poll_sms],
            max_task_queue_activities_per_second=cfg.provider_max_per_second.get(
                alias, cfg.sms_max_per_second
            ),
            max_concurrent_activities=cfg.sms_max_concurrent,
            graceful_shutdown_timeout=SHUTDOWN_GRACE,
            deployment_config=deployment,
        )
        for alias in sms_providers
    ]
    return Workers(main, sms_worker, http, sessions, cipher, engine, per_provider)


Background = Callable[[asyncio.Event], Awaitable[None]]
"""A task that runs beside the workers until the stop event is set (the relay)."""


async def run_until_signalled(
    workers: Sequence[Worker],
    *,
    background: Sequence[Background] = (),
    stop: asyncio.Event | None = None,
) -> None:
    """Run the workers until SIGTERM/SIGINT (or `stop`), then shut down gracefully.

    Shutdown order: the background tasks stop first (no new workflow starts from this
    process), then each worker stops polling and gives in-flight tasks `SHUTDOWN_GRACE` to
    finish; activities still running then are cancelled and reported back to the server,
    which retries them on another worker. If a worker fails, the others are shut down
    too and the error is raised, so a supervisor restarts the process.
    """
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runners = [asyncio.create_task(w.run()) for w in workers]
    side = [asyncio.ensure_future(task(stop)) for task in background]
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([stopping, *runners], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        stop.set()
        stopping.cancel()
        log.info("worker shutting down")
        await asyncio.gather(*side, return_exceptions=True)
        await asyncio.gather(
            *(w.shutdown() for w in workers if w.is_running), return_exceptions=True
        )
        results = await asyncio.gather(*runners, return_exceptions=True)
        log.info("worker stopped")
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def keep_alive(path: Path, stop: asyncio.Event) -> None:
    """Touch `path` every few seconds while running: the container healthcheck reads it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while not stop.is_set():
        path.touch()
        try:
            await asyncio.wait_for(stop.wait(), timeout=ALIVE_EVERY_SECONDS)
        except TimeoutError:
            pass
    path.unlink(missing_ok=True)


def serve_herald_metrics(address: str) -> None:
    """Serve this process's ledger.metrics registry (Herald's event-time series) at
    `host:port`/metrics, on a daemon thread: the Temporal SDK's own series keep their port."""
    from prometheus_client import start_http_server

    from ledger.metrics import REGISTRY

    host, _, port = address.rpartition(":")
    start_http_server(int(port), addr=host or "127.0.0.1", registry=REGISTRY)


def healthy(path: Path, *, max_age: float = ALIVE_MAX_AGE_SECONDS) -> bool:
    try:
        return time.time() - path.stat().st_mtime < max_age
    except FileNotFoundError:
        return False


async def health_problem(
    cfg: settings_module.Settings, *, timeout: float = HEALTH_TIMEOUT_SECONDS
) -> str | None:
    """None when a worker here can work, else what stops it, in one line.

    A fresh liveness file alone said "healthy" for a worker that had lost Temporal or
    Postgres, whose every task then failed: the check also asks each of them a cheap
    question (the namespace's description, `SELECT 1`) from this process, on the worker's
    own settings, each bounded by `timeout`.
    """
    if not healthy(alive_file(cfg)):
        return (
            f"the worker process is not running here ({alive_file(cfg)} is missing or older "
            f"than {ALIVE_MAX_AGE_SECONDS:g} s)"
        )
    problem = await _answers(_describe_namespace(cfg, timeout), timeout)
    if problem is not None:
        return f"Temporal at {cfg.temporal_target}: {problem}"
    problem = await _answers(asyncio.to_thread(_select_one, cfg, timeout), timeout)
    if problem is not None:
        return f"the ledger database: {problem}"
    return None


async def _answers(question: Awaitable[object], timeout: float) -> str | None:
    try:
        await asyncio.wait_for(question, timeout=timeout)
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except Exception as err:  # noqa: BLE001 - any failure is the answer
        cause = getattr(err, "orig", None) or err  # SQLAlchemy's wrapper adds only noise
        text = str(cause).strip()
        # The SDK's connect error nests the OS's reason deep in a Rust debug string.
        reason = re.search(r'message: "([^"]+)"', text)
        lines = text.splitlines()
        said = reason.group(1) if reason else (lines[0][:200] if lines else "no detail")
        return f"{type(cause).__name__}: {said}"
    return None


async def _describe_namespace(cfg: settings_module.Settings, timeout: float) -> None:
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest

    client = await connect(cfg)
    await client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace=cfg.temporal_namespace),
        timeout=timedelta(seconds=timeout),
    )


def _select_one(cfg: settings_module.Settings, timeout: float) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(
        cfg.resolved_database_url(),
        poolclass=NullPool,
        connect_args={"connect_timeout": max(1, round(timeout))},
    )
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    finally:
        engine.dispose()


def healthcheck() -> int:
    """`python -m worker --healthcheck`: one line, exit 0 when healthy, 1 otherwise."""
    try:
        cfg = settings_module.load()
    except (RuntimeError, ValueError) as err:
        said = settings_module.problem(err)
        print(f"herald worker: unhealthy: settings: {said}", file=sys.stderr)
        return 1
    problem = run(health_problem(cfg))
    if problem is not None:
        print(f"herald worker: unhealthy: {problem}", file=sys.stderr)
        return 1
    print("herald worker: healthy")
    return 0


async def first_current(
    client: Client, version: WorkerDeploymentVersion, *, always: bool, stop: asyncio.Event
) -> None:
    """Make this build current where the deployment has none yet (or `always`: `herald
    dev`). A failure is a warning: the workers keep polling, an operator promotes. A stop
    ends the tries at once."""
    trying = asyncio.ensure_future(deployments.make_current_if_none(client, version, always=always))
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([trying, stopping], return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not trying.done():
        trying.cancel()
        return
    try:
        trying.result()
    except deployments.DeploymentError as err:
        log.warning("build %s is not made current: %s", version.build_id, err)


async def main(
    cfg: settings_module.Settings | None = None,
    *,
    relay: bool = RELAY_IN_WORKER,
    schedules: bool = SCHEDULES_AT_START,
    make_current: bool = False,
) -> None:
    """Run the workers. Versioned, a worker of a deployment without a current build makes
    its own current once the server has registered it (a first install just works); a
    later build waits for `herald deploy promote`. `make_current` makes it current in any
    case (`herald dev`, whose code is the current code)."""
    configure_logging()
    cfg = cfg or settings_module.load()
    # Before anything connects: a sender no provider would take is a start-up error.
    senders = cfg.sender_book()
    cfg.check_providers()
    if not ensure_workflow_bytecode():
        log.warning("could not write the workflow modules' bytecode; each run compiles them")
    client = await connect(cfg, runtime=core_log_forwarding(cfg.worker_metrics_address))
    if cfg.worker_herald_metrics_address:
        serve_herald_metrics(cfg.worker_herald_metrics_address)
    workers = build_workers(client, cfg, senders=senders)
    background: list[Background] = [lambda stop: keep_alive(alive_file(cfg), stop)]
    version = deployment_version(cfg)
    if version is not None:
        background.append(
            lambda stop: first_current(client, version, always=make_current, stop=stop)
        )
    if relay:
        herald = HeraldClient(
            client,
            workers.sessions,
            workers.cipher,
            task_queue=cfg.task_queue,
            retention_days=cfg.pii_retention_days,
            policy_name=cfg.policy_name,
        )
        background.append(lambda stop: run_relay(herald, stop))
    if schedules:
        try:
            await ensure_schedules(client, cfg.task_queue)
        except RPCError as err:
            # A server without schedules (or no permission) must not stop the workers;
            # `herald reconcile` / `herald purge` still work by hand.
            log.warning("could not create the maintenance schedules: %s", err.status.name)
    log.info(
        "worker started on task queues %s and %s (relay %s, build %s)",
        cfg.task_queue,
        channels.SMS.task_queue(cfg.task_queue),
        "on" if relay else "off",
        f"{version.deployment_name}:{version.build_id}" if version else "unversioned",
    )
    try:
        await run_until_signalled(workers.all, background=background)
    finally:
        await workers.http.aclose()
        workers.engine.dispose()
    exit_now(0)


def exit_now(code: int) -> NoReturn:
    """End the process without interpreter finalization, once everything is shut down.

    The Temporal SDK's Rust threads can abort finalization ("Fatal Python error:
    PyGILState_Release ... finalizing", temporalio/sdk-python issue 300, seen here on
    every few clean stops), which turns a graceful SIGTERM into exit code -6 (SIGABRT)
    that supervisors report as a crash. Logs and stdio are flushed first.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def alive_file(cfg: settings_module.Settings) -> Path:
    return cfg.data_path / "worker.alive"


if __name__ == "__main__":
    if sys.argv[1:] == ["--healthcheck"]:
        # No interpreter teardown after a Temporal client (see exit_now).
        exit_now(healthcheck())
    try:
        # A malformed HERALD_* value or production without its secrets: one line, no traceback.
        settings = settings_module.load()
    except ValueError as err:
        print(f"herald worker: settings: {settings_module.problem(err)}", file=sys.stderr)
        sys.exit(2)
    try:
        # `--make-current`: `herald dev`'s worker makes its build current at start.
        run(main(settings, make_current="--make-current" in sys.argv[1:]))
    except (RuntimeError, KeyRingError, starter_temporal.TemporalSettingError) as err:
        # Bad sender settings, an unreadable TLS file, Temporal unreachable, a data key
        # ring that cannot read the ledger.
        print(f"herald worker: {err}", file=sys.stderr)
        sys.exit(2)
