"""The one place that builds the Temporal client, the database engine, the transports and
the activity instances, and runs the workers.

Two task queues: `<queue>` for workflows, ledger and email activities, and `<queue>-sms`
for SMS send and poll, whose rate the Temporal server enforces for the whole fleet
(`max_task_queue_activities_per_second`), so any number of workers share one budget.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

import httpx
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

import settings as settings_module
from activities.email import EmailActivities
from activities.ledger import LedgerActivities
from activities.sms import SmsActivities
from ledger.crypto import FieldCipher
from transports.artifacts import ArtifactStore
from transports.email import SmtpEmail
from transports.twilio import TwilioSms
from workflows.notification import NotificationWorkflow

log = logging.getLogger("herald.worker")


def sandbox_runner() -> SandboxedWorkflowRunner:
    # domain and the activity dataclasses are pure: pass them through instead of
    # re-importing them on every workflow run.
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(
            "domain", "activities.contracts"
        )
    )


async def connect(cfg: settings_module.Settings) -> Client:
    return await Client.connect(cfg.temporal_target, namespace=cfg.temporal_namespace)


@dataclass
class Workers:
    main: Worker
    sms: Worker
    http: httpx.AsyncClient

    async def run(self) -> None:
        await asyncio.gather(self.main.run(), self.sms.run())

    async def shutdown(self) -> None:
        # Graceful: stop polling, let in-flight tasks finish (or hand them back on timeout).
        await asyncio.gather(self.main.shutdown(), self.sms.shutdown())
        await self.http.aclose()


def build_workers(
    client: Client, cfg: settings_module.Settings, *, task_queue: str | None = None
) -> Workers:
    queue = task_queue or cfg.task_queue
    engine = create_engine(cfg.resolved_database_url(), pool_size=10, pool_pre_ping=True)
    sessions = sessionmaker(engine, expire_on_commit=False)
    cipher = FieldCipher(cfg.resolved_data_keys())
    http = httpx.AsyncClient()
    sms = TwilioSms(
        base_url=cfg.sms_api_url,
        account_sid=cfg.sms_account_sid,
        auth_token=cfg.sms_auth_token.get_secret_value(),
        client=http,
    )
    email = SmtpEmail(
        host=cfg.smtp_host,
        port=cfg.smtp_port,
        starttls=cfg.smtp_starttls,
        username=cfg.smtp_username,
        password=cfg.smtp_password.get_secret_value() if cfg.smtp_password else None,
    )
    ledger_acts = LedgerActivities(sessions, cipher, retention_days=cfg.pii_retention_days)
    sms_acts = SmsActivities(sms, sessions, cipher, callback_base_url=cfg.callback_base_url)
    email_acts = EmailActivities(
        email,
        sessions,
        cipher,
        ArtifactStore(cfg.data_path / "artifacts"),
        public_base_url=cfg.callback_base_url,
        unsubscribe_secret=cfg.resolved_unsubscribe_secret(),
    )
    main = Worker(
        client,
        task_queue=queue,
        workflows=[NotificationWorkflow],
        activities=[
            ledger_acts.load_intent,
            ledger_acts.authorize,
            ledger_acts.record_verdict,
            ledger_acts.record_operator_action,
            email_acts.send_email,
        ],
        workflow_runner=sandbox_runner(),
        graceful_shutdown_timeout=_grace(),
    )
    sms_worker = Worker(
        client,
        task_queue=f"{queue}-sms",
        activities=[sms_acts.submit_sms, sms_acts.poll_sms],
        max_task_queue_activities_per_second=cfg.sms_max_per_second,
        max_concurrent_activities=cfg.sms_max_concurrent,
        graceful_shutdown_timeout=_grace(),
    )
    return Workers(main, sms_worker, http)


def _grace():  # type: ignore[no-untyped-def]
    from datetime import timedelta

    return timedelta(seconds=10)


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    cfg = settings_module.load()
    client = await connect(cfg)
    workers = build_workers(client, cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = asyncio.create_task(workers.run())
    log.info("worker started on task queues %s and %s-sms", cfg.task_queue, cfg.task_queue)
    await stop.wait()
    log.info("worker shutting down")
    await workers.shutdown()
    await runner


if __name__ == "__main__":
    asyncio.run(main())
