"""The session-end check of tests/history_pii.py: it finds contact data planted in a real
history and in a search attribute (and nothing in a clean run), and a session whose
stack's histories hold some fails at its end, in one process or across xdist workers."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from devstack import TemporalDevServer, free_port
from tests.conftest import until
from tests.history_pii import histories_holding_pii

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
async def test_the_scan_names_each_history_holding_contact_data_and_only_those() -> None:
    server = TemporalDevServer(
        None, port=free_port(), ui_port=None, search_attributes={"HeraldChannel": "Keyword"}
    )
    await asyncio.to_thread(server.start)
    try:
        client = await Client.connect(server.address)
        # No worker: each run stays open with its start event (and input) in its history.
        await client.start_workflow("Notify", "+447400123456", id="planted-phone", task_queue="q")
        await client.start_workflow(
            "Notify",
            "intent-1",
            id="planted-address",
            task_queue="q",
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(
                        SearchAttributeKey.for_keyword("HeraldChannel"), "ann@shop.example"
                    )
                ]
            ),
        )
        await client.start_workflow("Notify", "intent-2", id="clean", task_queue="q")

        async def listed() -> bool:
            return len([e async for e in client.list_workflows()]) == 3

        await until(listed, what="the three runs in visibility")
        scanned, findings = await histories_holding_pii(client)
    finally:
        await asyncio.to_thread(server.stop)
    assert scanned == 3
    assert [f.split(" (run ")[0] + f.split(")")[1] for f in sorted(findings)] == [
        "workflow planted-address: an email address in its history",  # the start event
        "workflow planted-address: an email address in its search attributes",
        "workflow planted-phone: a phone number in its history",
    ]
    assert not any("123456" in f or "ann@" in f for f in findings)


SESSION_TEST = """
from tests.history_pii import record


def test_a_stack_was_scanned(request):
    record(request.config, 4, {findings!r})
"""


def _session(tmp_path: Path, findings: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.history_pii"]\n')
    (tmp_path / "test_session.py").write_text(SESSION_TEST.format(findings=findings))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("workers", [["-n", "0"], ["-n", "2"]], ids=["one process", "xdist"])
def test_a_session_whose_histories_hold_contact_data_fails_naming_them(
    tmp_path: Path, workers: list[str]
) -> None:
    finding = "workflow planted (run r1): a phone number in its history"
    done = _session(tmp_path, [finding], *workers)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert "contact data in Temporal's history" in done.stdout
    assert finding in done.stdout


def test_a_session_whose_histories_are_clean_passes_and_says_how_many_it_scanned(
    tmp_path: Path,
) -> None:
    done = _session(tmp_path, [], "-n", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 workflow histories on 1 stack(s) scanned: none holds contact data" in done.stdout
