"""A stack of its own for the fault tier: these tests kill and restart its parts."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from devstack.processes import ChildProcess
from devstack.stack import DevStack
from domain.requests import NotificationRequest
from ledger.models import Consent
from tests.conftest import key_id, stack_settings, until
from workflows.notification import NotificationWorkflow


async def notify_with_consent(  # type: ignore[no-untyped-def]
    client, key: str, phone: str, *, n: int = 1, expires_at: datetime | None = None
):
    """Notify `phone` by SMS under `key`, its recipient given the `service` consent the
    default policy asks for first (recorded in a thread: the ledger is synchronous)."""
    recipient = key.replace(":", "-")

    def consent() -> None:
        with client.sessions.begin() as session:
            session.add(
                Consent(
                    recipient_ref=recipient,
                    channel="sms",
                    purpose="service",
                    source="fault-test",
                    granted_at=datetime.now(UTC),
                )
            )

    await asyncio.to_thread(consent)
    return await client.notify(
        NotificationRequest(
            business_key=key,
            recipient_ref=recipient,
            template_key="demo",
            phone=phone,
            channels=("sms",),
            variables={"n": n, "intent_id": key},
            expires_at=expires_at,
        )
    )


VARIABLES = {"n": 1, "intent_id": "x"}


@pytest_asyncio.fixture(scope="module")
async def fault_stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DevStack]:
    # Its own Postgres too: a fault test restarts it.
    dev = DevStack(stack_settings(tmp_path_factory.mktemp("faults")), temporal_ui=False)
    await dev.start()
    yield dev
    await dev.stop()
    if dev.postgres is not None:
        await asyncio.to_thread(dev.postgres.destroy)


class Faults:
    """What the fault tests do to the stack, through its public parts."""

    def __init__(self, stack: DevStack) -> None:
        self.stack = stack
        assert stack.client is not None and stack.simulator is not None
        self.client = stack.client
        self.sim_url = stack.simulator.url

    async def script(self, to: str, fault: str, count: int | None = None) -> None:
        body: dict[str, Any] = {"to": to, "fault": fault}
        if count is not None:
            body["count"] = count
        async with httpx.AsyncClient() as http:
            (await http.post(f"{self.sim_url}/_sim/script", json=body)).raise_for_status()

    async def stats(self) -> dict[str, Any]:
        async with httpx.AsyncClient() as http:
            return (await http.get(f"{self.sim_url}/_sim/stats")).json()

    async def submissions(self, token: str) -> int:
        return int((await self.stats())["by_token"].get(token, 0))

    async def requests(self, token: str) -> int:
        return int((await self.stats())["requests_by_token"].get(token, 0))

    async def notify(self, phone: str, key: str | None = None):  # type: ignore[no-untyped-def]
        return await notify_with_consent(self.client, key or f"demo:f-{key_id()}", phone)

    def handle(self, workflow_id: str):  # type: ignore[no-untyped-def]
        return self.client.temporal.get_workflow_handle_for(NotificationWorkflow.run, workflow_id)

    def timeline(self, key: str) -> dict[str, Any]:
        return self.client.timeline(key)

    def token(self, key: str) -> str:
        # The key in the client's namespace (in-process: HERALD_KEY_NAMESPACE's).
        from domain import keys

        return keys.attempt_token(keys.identity(self.client.namespace, key), "sms", 1)

    async def until(self, predicate, *, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
        """Wait for an async condition with a deadline (no sleeps that hope)."""
        await until(predicate, within=timeout)

    async def until_submitted(self, token: str) -> None:
        """The provider has created the message for this token."""

        async def submitted() -> bool:
            return await self.submissions(token) == 1

        await self.until(submitted)

    def restart_worker(self) -> None:
        """kill -9 the worker process, then start a fresh one with the same settings."""
        old = self.stack.worker
        assert old is not None
        old.kill()
        new = ChildProcess(
            "worker",
            [sys.executable, "-m", "worker"],
            log_path=self.stack.cfg.data_path / "worker.log",
            env={**os.environ, **self.stack.env()},
            cwd=Path(__file__).resolve().parents[2],
        )
        new.start()
        self.stack.worker = new


@pytest.fixture
def faults(fault_stack: DevStack) -> Faults:
    return Faults(fault_stack)
