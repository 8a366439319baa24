"""No phone number, email address or message body in Temporal's history or search
attributes, checked over every run a test session made rather than by a test that has to
run last (issue 52).

Each xdist worker has its own embedded stack (tests/conftest.py's session fixture
`stack`); when the session tears it down, every run on its Temporal server is scanned and
`record` keeps what was found. A worker hands its findings to the controller in its
`workeroutput` (read in `pytest_testnodedown`), and the session's end fails the run naming
each history and the kind of contact data in it (never the value itself). A session that
started no stack has nothing to scan and says nothing."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio.client import Client

FORBIDDEN = {
    "a phone number": re.compile(r"\+\d{10,14}|\b447400\d{6}\b"),
    "an email address": re.compile(r"[\w.+-]+@[\w-]+\.example\b"),
    "a message body": re.compile(
        r"seat opened|Herald demo \d|order \w+ is confirmed", re.IGNORECASE
    ),
}
"""Shapes of what the tests and scenarios send: E.164 numbers (also without their `+`),
the `.example` addresses, phrases of the template bodies."""


def contact_data_in(text: str) -> list[str]:
    """The kinds of contact data `text` holds, by name."""
    return [kind for kind, pattern in FORBIDDEN.items() if pattern.search(text)]


def readable(node: Any) -> str:
    """Every string of a history as JSON, each payload's data decoded: the JSON form holds
    inputs, results and failures' details base64-encoded, where no pattern would see them."""
    if isinstance(node, dict):
        if isinstance(node.get("data"), str) and "metadata" in node:
            decoded = base64.b64decode(node["data"]).decode("utf-8", errors="replace")
            return decoded + "\n" + readable(node["metadata"])
        return "\n".join(readable(value) for value in node.values())
    if isinstance(node, list):
        return "\n".join(readable(value) for value in node)
    return str(node)


async def histories_holding_pii(client: Client) -> tuple[int, list[str]]:
    """Scan every run in the client's namespace: (runs scanned, one line per finding)."""
    scanned = 0
    findings = []
    async for execution in client.list_workflows():
        history = await client.get_workflow_handle(
            execution.id, run_id=execution.run_id
        ).fetch_history()
        run = f"workflow {execution.id} (run {execution.run_id})"
        for kind in contact_data_in(readable(json.loads(history.to_json()))):
            findings.append(f"{run}: {kind} in its history")
        for kind in contact_data_in(str(execution.typed_search_attributes)):
            findings.append(f"{run}: {kind} in its search attributes")
        scanned += 1
    return scanned, findings


@dataclass
class Check:
    stacks: int = 0
    scanned: int = 0
    findings: list[str] = field(default_factory=list)


CHECK = pytest.StashKey[Check]()
OUTPUT = "herald_history_pii"


def _check(config: pytest.Config) -> Check:
    return config.stash.setdefault(CHECK, Check())


def record(config: pytest.Config, scanned: int, findings: list[str]) -> None:
    """Keep one stack's scan for the session's end (and, on an xdist worker, for the
    controller, which alone decides the run's exit status)."""
    check = _check(config)
    check.stacks += 1
    check.scanned += scanned
    check.findings += findings
    workeroutput: dict[str, Any] | None = getattr(config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[OUTPUT] = [check.stacks, check.scanned, check.findings]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    stacks, scanned, findings = getattr(node, "workeroutput", {}).get(OUTPUT, [0, 0, []])
    check = _check(node.config)
    check.stacks += stacks
    check.scanned += scanned
    check.findings += findings


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _check(session.config).findings:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    check = _check(config)
    if check.findings:
        terminalreporter.section("contact data in Temporal's history", sep="=", red=True)
        for finding in check.findings:
            terminalreporter.line(finding, red=True)
    elif check.stacks:
        terminalreporter.line(
            f"{check.scanned} workflow histories on {check.stacks} stack(s) scanned: "
            "none holds contact data"
        )
