from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus

from devstack import TemporalDevServer, free_port, no_orphans, processes_in_group

pytestmark = pytest.mark.e2e


async def test_dev_server_headless_with_search_attribute() -> None:
    server = TemporalDevServer(
        None,
        port=free_port(),
        ui_port=None,
        namespace="herald",
        search_attributes={"HeraldState": "Keyword", "HeraldAttempts": "Int"},
    )
    assert "--headless" in server.argv()
    try:
        address = await asyncio.to_thread(server.start)
        assert address == server.address == f"127.0.0.1:{server.port}"
        assert server.ui_url is None
        client = await Client.connect(address, namespace="herald")
        resp = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace="herald")
        )
        attrs = dict(resp.custom_attributes)
        assert attrs["HeraldState"] == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
        assert attrs["HeraldAttempts"] == IndexedValueType.INDEXED_VALUE_TYPE_INT
        pgid = server.pgid
        pids = server.group_pids()
        assert server.pid in pids
    finally:
        await asyncio.to_thread(server.stop)
    assert not server.is_running()
    assert processes_in_group(pgid) == []
    assert no_orphans(pids)


async def test_sqlite_state_survives_restart(tmp_path: Path) -> None:
    server = TemporalDevServer(tmp_path, port=free_port(), ui_port=free_port())
    assert server.ui_url == f"http://127.0.0.1:{server.ui_port}"
    try:
        await asyncio.to_thread(server.start)
        client = await Client.connect(server.address)
        wf_id = f"devstack-{uuid.uuid4()}"
        # No worker needed: the execution just stays RUNNING.
        await client.start_workflow("Nope", id=wf_id, task_queue="devstack-test")
        old_pid = server.pid
        await asyncio.to_thread(server.restart)
        assert server.pid != old_pid and no_orphans([old_pid])
        client = await Client.connect(server.address)
        desc = await client.get_workflow_handle(wf_id).describe()
        assert desc.status == WorkflowExecutionStatus.RUNNING
        assert (tmp_path / "temporal.sqlite").exists()
        # A write-ahead log, not the rollback journal that made every write create, fsync
        # and delete a journal file (the mode is stored in the database file itself).
        with contextlib.closing(sqlite3.connect(tmp_path / "temporal.sqlite")) as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        await asyncio.to_thread(server.stop)
    assert processes_in_group(server.pgid) == []


def test_bad_search_attribute_type_rejected() -> None:
    with pytest.raises(ValueError):
        TemporalDevServer(None, port=1, ui_port=None, search_attributes={"X": "Strng"})
