"""The transactional outbox: an intent recorded in the app's own transaction commits or
rolls back with it, and a process that dies between commit and start is healed by the
relay with exactly one workflow run, however many relays race for the row."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import event, select, update
from sqlalchemy.exc import OperationalError
from temporalio.service import RPCError, RPCStatusCode

from domain.requests import NotificationRequest
from ledger.models import Consent, Intent, Outbox
from starter.relay import FAST_PATH_GRACE, RELAY_EVERY_SECONDS, relay_once
from tests.conftest import TEST_KEYRING

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PHONE = "+447400000100"
VARIABLES = {
    "class_name": "Spin 18:00",
    "starts_at": "18:30",
    "hold_until": "18:15",
    "booking_url": "https://x.test/c",
}


def request(suffix: str) -> NotificationRequest:
    return NotificationRequest(
        business_key=f"class-opening:c-9081:m-{suffix}",
        recipient_ref=f"m-{suffix}",
        template_key="class-opening",
        phone=PHONE,
        variables=VARIABLES,
    )


async def runs_of(temporal, workflow_id: str) -> list:  # type: ignore[no-untyped-def]
    """Every execution with this id, once visibility has caught up (it lags a little)."""
    query = f"WorkflowId = '{workflow_id}'"
    found: list = []
    for _ in range(50):
        found = [w async for w in temporal.list_workflows(query)]
        if found:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # any second run would be visible by now too
    return [w async for w in temporal.list_workflows(query)]


def outbox_row(stack, intent_id: str) -> Outbox:  # type: ignore[no-untyped-def]
    with stack.client.sessions() as session:
        row = session.scalar(select(Outbox).where(Outbox.intent_id == intent_id))
        assert row is not None
        return row


async def test_a_rolled_back_app_transaction_leaves_neither_intent_nor_workflow(stack):
    client = stack.client
    suffix = uuid.uuid4().hex[:8]
    req = request(suffix)
    # The app's own session and transaction: its business change and the intent together.
    with client.sessions() as session:
        session.begin()
        session.add(
            Consent(
                recipient_ref=req.recipient_ref,
                channel="sms",
                purpose="service",
                source="app",
                granted_at=datetime.now(UTC),
            )
        )
        ref = client.record(session, req)
        assert not ref.existed
        session.rollback()

    with client.sessions() as session:
        assert session.scalar(select(Intent).where(Intent.business_key == req.business_key)) is None
        assert session.get(Intent, ref.intent_id) is None
        assert session.scalar(select(Outbox).where(Outbox.intent_id == ref.intent_id)) is None
        assert (
            session.scalar(select(Consent).where(Consent.recipient_ref == req.recipient_ref))
            is None
        )
    # No relay (ours, or the worker's, given time past its grace) starts anything for it.
    await relay_once(client, grace=timedelta(0))
    await asyncio.sleep(FAST_PATH_GRACE.total_seconds() + 2 * RELAY_EVERY_SECONDS)
    with pytest.raises(RPCError) as err:
        await client.temporal.get_workflow_handle(ref.workflow_id).describe()
    assert err.value.status == RPCStatusCode.NOT_FOUND


CRASHING_APP = textwrap.dedent(
    """
    import os, sys
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker
    from domain.requests import NotificationRequest
    from ledger.crypto import FieldCipher
    from starter.client import HeraldClient

    url, keyring, queue, suffix = sys.argv[1:5]
    # `record` needs no Temporal: the process dies before it would ever start anything.
    client = HeraldClient(None, sessionmaker(create_engine(url)), FieldCipher(keyring),
                          task_queue=queue)
    with client.sessions.begin() as session:
        ref = client.record(session, NotificationRequest(
            business_key=f"class-opening:c-9081:m-{suffix}", recipient_ref=f"m-{suffix}",
            template_key="class-opening", phone="+447400000100",
            variables={"class_name": "x", "starts_at": "1", "hold_until": "2",
                       "booking_url": "https://x.test/c"}))
    print(ref.intent_id, ref.workflow_id, flush=True)
    os._exit(9)  # committed, never started: the crash the relay heals
    """
)


async def test_a_process_killed_between_commit_and_start_gets_exactly_one_run(stack):
    client = stack.client
    suffix = uuid.uuid4().hex[:8]
    done = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-c",
            CRASHING_APP,
            stack.cfg.resolved_database_url(),
            TEST_KEYRING,
            stack.cfg.task_queue,
            suffix,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert done.returncode == 9, done.stderr
    intent_id, workflow_id = done.stdout.split()

    # Relays race for the row: two rounds here at once, then another, while the worker's
    # own relay runs too. Row locks plus USE_EXISTING/REJECT_DUPLICATE: one run.
    counts = await asyncio.gather(
        relay_once(client, grace=timedelta(0)), relay_once(client, grace=timedelta(0))
    )
    counts.append(await relay_once(client, grace=timedelta(0)))
    assert sum(counts) <= 1  # 0 when the worker's relay got there first
    row = outbox_row(stack, intent_id)
    assert row.started_at is not None

    runs = await runs_of(client.temporal, workflow_id)
    assert len(runs) == 1
    desc = await client.temporal.get_workflow_handle(workflow_id).describe()
    assert desc.run_id == runs[0].run_id

    # A crash after the start but before `started_at` was written: the row comes back,
    # the relays start it again, and Temporal hands back the run that exists.
    await asyncio.to_thread(_forget_started, stack, intent_id)
    await asyncio.gather(
        relay_once(client, grace=timedelta(0)), relay_once(client, grace=timedelta(0))
    )
    await asyncio.wait_for(
        client.temporal.get_workflow_handle(workflow_id).result(), 60
    )  # closed now: a start from here on meets REJECT_DUPLICATE
    await asyncio.to_thread(_forget_started, stack, intent_id)
    assert await relay_once(client, grace=timedelta(0)) in (0, 1)
    assert outbox_row(stack, intent_id).started_at is not None
    runs = await runs_of(client.temporal, workflow_id)
    assert [r.run_id for r in runs] == [desc.run_id]


def _forget_started(stack, intent_id: str) -> None:  # type: ignore[no-untyped-def]
    with stack.client.sessions.begin() as session:
        session.execute(update(Outbox).where(Outbox.intent_id == intent_id).values(started_at=None))


async def test_notify_marks_its_own_outbox_row_so_the_relay_has_nothing_to_do(stack):
    suffix = uuid.uuid4().hex[:8]
    ref = await stack.client.notify(request(suffix))
    assert outbox_row(stack, ref.intent_id).started_at is not None
    assert len(await runs_of(stack.client.temporal, ref.workflow_id)) == 1


async def test_starts_that_finish_together_share_one_outbox_write(stack):
    # Ten starts finish at once: the first writes its row alone, the nine that arrived
    # while it was writing go in the next write together. Two UPDATEs, not ten.
    client = stack.client
    with client.sessions.begin() as session:
        ids = [client.record(session, request(uuid.uuid4().hex[:8])).intent_id for _ in range(10)]
    writes: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("UPDATE OUTBOX"):
            writes.append(statement)

    engine = client.sessions.kw["bind"]
    event.listen(engine, "before_cursor_execute", count)
    try:
        await asyncio.gather(*(client._mark_started(i) for i in ids))
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert len(writes) == 2
    assert all(outbox_row(stack, i).started_at is not None for i in ids)


async def test_a_failed_outbox_write_is_not_the_apps_failure_and_the_relay_heals_it(
    stack, monkeypatch, caplog
):
    client = stack.client

    def database_gone(intent_ids: list[str]) -> None:
        raise OperationalError("UPDATE outbox", {}, Exception("connection refused"))

    monkeypatch.setattr(client, "_write_started", database_gone)
    with caplog.at_level(logging.WARNING, logger="herald.client"):
        ref = await client.notify(request(uuid.uuid4().hex[:8]))
    assert not ref.existed  # recorded, and notify said so
    assert outbox_row(stack, ref.intent_id).started_at is None
    assert "1 outbox row(s) not marked started (the relay will): OperationalError" in caplog.text
    monkeypatch.undo()

    assert await relay_once(client, grace=timedelta(0)) in (0, 1)  # 0: the worker's relay
    assert outbox_row(stack, ref.intent_id).started_at is not None
    assert len(await runs_of(client.temporal, ref.workflow_id)) == 1


async def test_herald_relay_once_starts_a_recorded_intent_through_the_real_entry_point(stack):
    client = stack.client
    req = request(uuid.uuid4().hex[:8])
    with client.sessions.begin() as session:
        ref = client.record(session, req)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "cli", "relay", "--once", "--grace", "0", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **stack.env()},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["started"] in (0, 1)  # 0: the worker's relay was first
    assert outbox_row(stack, ref.intent_id).started_at is not None
    assert len(await runs_of(client.temporal, ref.workflow_id)) == 1

    bad = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "cli", "relay", "--once", "--grace", "-1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **stack.env()},
        timeout=120,
    )
    assert bad.returncode == 2 and "--grace must not be negative" in bad.stderr
