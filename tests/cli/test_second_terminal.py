"""The README's two terminals: `herald dev` started as a process of its own (its own data
folder and ports), and the installed `herald` run in other processes that are told nothing
but the data folder. They find the stack through its `dev.json`, as a user's second
terminal does; then SIGTERM stops the stack and nothing of it is left running. Temporal's
own tools against the stack are test_second_terminal_temporal.py, the longest stories
test_second_terminal_long.py: each file on a stack of its own, so a parallel run spreads
them across its workers."""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import httpx
import psutil
import pytest
from sqlalchemy import create_engine, text

from devstack import EmbeddedPostgres, free_port, no_orphans, port_in_use
from domain.principals import local_principal_name
from settings import Settings
from tests.cli.conftest import HERALD, Run, assert_one_line_error, run_installed_herald
from tests.conftest import assert_no_python_repr, long_story

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
READY_WITHIN = 120.0
"""Seconds for `herald dev` to be up (Postgres init, Temporal, worker) on a busy machine."""
STOP_WITHIN = 30.0
VARIABLES = {
    "class_name": "Spin 18:00",
    "starts_at": "18:30",
    "hold_until": "18:15",
    "booking_url": "https://x.test/c",
}


@dataclass
class Stack:
    process: subprocess.Popen[str]
    home: Path
    data: Path
    log: IO[str]
    addresses: dict[str, Any] = field(default_factory=dict)

    def herald(self, *args: str, timeout: float = 90) -> Run:
        """The second terminal: only the data folder is known."""
        settings = {"HERALD_DATA_DIR": str(self.data)}
        return run_installed_herald(*args, settings=settings, cwd=self.home, timeout=timeout)

    def output(self) -> str:
        self.log.flush()
        return (self.home / "dev.out").read_text()


def _wait_until_up(stack: Stack) -> dict[str, Any]:
    """dev.json written (the last step of start-up) and the API answering /readyz."""
    state = stack.data / "dev.json"
    deadline = time.monotonic() + READY_WITHIN
    while time.monotonic() < deadline:
        if stack.process.poll() is not None:
            pytest.fail(f"herald dev exited {stack.process.returncode}:\n{stack.output()}")
        if state.exists():
            addresses = json.loads(state.read_text())
            try:
                if httpx.get(f"{addresses['api']}/readyz", timeout=5).status_code == 200:
                    return addresses
            except httpx.HTTPError:
                pass
        time.sleep(0.25)
    pytest.fail(f"herald dev was not up within {READY_WITHIN:.0f} s:\n{stack.output()}")


def _stack_processes(addresses: dict[str, Any]) -> list[psutil.Process]:
    """Every process of the stack: the recorded pids (the postmaster is not a child of the
    supervisor: pg_ctl detaches it) and all their descendants."""
    found: dict[int, psutil.Process] = {}
    for pid in addresses["pids"].values():
        try:
            process = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
        for each in [process, *process.children(recursive=True)]:
            found[each.pid] = each
    return list(found.values())


def _stop(stack: Stack) -> None:
    if stack.process.poll() is None:
        stack.process.send_signal(signal.SIGTERM)
        try:
            stack.process.wait(timeout=STOP_WITHIN)
        except subprocess.TimeoutExpired:
            os.killpg(stack.process.pid, signal.SIGKILL)
            stack.process.wait()


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The stack the module's tests share. Its teardown is the README's last step, SIGTERM
    stops it and leaves no process, checked there (a failure is an error at the module's
    teardown) rather than by a test that would have to run after every other one."""
    # The demo policy, which `herald demo` needs of a running stack (`--policy demo`).
    with running_dev(tmp_path_factory.mktemp("terminal"), "demo") as stack:
        yield stack
        sigterm_stops_the_stack_and_leaves_no_process(stack)


ANY_FREE_PORT = ("SIMULATOR", "TELNYX_SIMULATOR", "SMTP", "EMAIL_SIMULATOR")
"""The servers `herald dev` binds itself, which take 0 for any free port."""


@contextmanager
def running_dev(home: Path, policy: str) -> Iterator[Stack]:
    """The first terminal: `herald dev --policy POLICY` in `home`, on its own ports (so no
    other stack on this machine is in the way), stopped and removed on leaving."""
    data = home / "data"
    settings = {
        "HERALD_DATA_DIR": str(data),
        **{
            f"HERALD_{name}_PORT": str(free_port())
            for name in ("POSTGRES", "TEMPORAL", "TEMPORAL_UI", "API")
        },
        # The servers `herald dev` binds itself take any free port as they bind (0): a port
        # picked here first could be taken by another process before the stack binds it.
        **{f"HERALD_{name}_PORT": "0" for name in ANY_FREE_PORT},
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")} | settings
    log = open(home / "dev.out", "w")  # a file, not a pipe nobody drains
    process = subprocess.Popen(
        [str(HERALD), "dev", "--policy", policy],
        cwd=home,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    stack = Stack(process, home, data, log)
    try:
        stack.addresses = _wait_until_up(stack)
        yield stack
    finally:
        _stop(stack)
        log.close()
        # As root the cluster lives under /var/tmp/herald-pg: remove it with the folder.
        EmbeddedPostgres(data, port=free_port()).destroy()


@pytest.fixture(scope="module")
def member(dev: Stack) -> str:
    """A recipient with a live SMS consent on the running stack."""
    recipient = f"m-{uuid.uuid4().hex[:8]}"
    assert dev.herald("consent", recipient, "--channel", "sms").returncode == 0
    return recipient


def _intent_in_this_stacks_ledger(stack: Stack, intent_id: str) -> bool:
    """Read the stack's own Postgres directly: the command reached this stack, not some
    other one listening on the default ports."""
    url = Settings(database_url=stack.addresses["postgres"]).resolved_database_url()
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            found = conn.execute(text("SELECT 1 FROM intent WHERE id = :id"), {"id": intent_id})
            return found.first() is not None
    finally:
        engine.dispose()


def _show(stack: Stack, key: str) -> dict[str, Any]:
    done = stack.herald("show", key, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _wait_for_state(stack: Stack, key: str, state: str, within: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        doc = _show(stack, key)
        if doc["intent"]["state"] == state:
            return doc
        if time.monotonic() > deadline:
            pytest.fail(f"{key} is {doc['intent']['state']} after {within:.0f} s, not {state}")
        time.sleep(0.5)


@long_story  # about 30 s and a dozen commands; as the module's first test, also its stack's start
def test_send_show_list_cancel_and_a_refused_resend_from_another_terminal(dev: Stack) -> None:
    suffix = uuid.uuid4().hex[:8]
    recipient = f"m-{suffix}"
    consent = dev.herald("consent", recipient, "--channel", "sms", "--json")
    assert (consent.json()["channel"], consent.json()["live"]) == ("sms", True)
    send = ["--recipient", recipient, "--template", "class-opening", "--phone", "+447400000100"]
    send += ["--vars", json.dumps(VARIABLES), "--json"]

    # The role is in the published URL: libpq would take the login user's name otherwise.
    assert dev.addresses["postgres"].startswith("postgresql://postgres@127.0.0.1:")
    key = f"class-opening:c-9081:{recipient}"
    sent = dev.herald("send", "--key", key, *send).json()
    assert sent["business_key"] == key and sent["existed"] is False
    assert _intent_in_this_stacks_ledger(dev, sent["intent_id"])
    doc = _wait_for_state(dev, key, "delivered")
    assert doc["intent"]["id"] == sent["intent_id"]
    assert [a["state"] for a in doc["attempts"]] == ["delivered"]

    # Sent long ago in the ledger's terms: a resend is refused, in one line, exit 3.
    refused = dev.herald("approve-resend", key, "--reason", "again")
    assert refused.returncode == 3, refused.stderr
    assert refused.stdout.strip().splitlines() == [
        "refused: the intent's workflow has finished; record a new intent instead"
    ]

    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    scheduled = f"class-opening:c-9082:{recipient}"
    dev.herald("send", "--key", scheduled, *send, "--send-at", later).json()
    # A reason holding contact data never reaches the workflow's history: one line, exit 2.
    leaked = dev.herald("cancel", scheduled, "--reason", "she asked on +44 7400 000777")
    assert leaked.returncode == 2 and leaked.stderr.count("\n") == 1, leaked.stderr
    assert "reason.no_contact_data" in leaked.stderr and "000777" not in leaked.stderr
    cancel = dev.herald("cancel", scheduled, "--reason", "seat filled")
    assert cancel.returncode == 0 and cancel.stdout.strip() == "future work closed", cancel
    shown = _show(dev, scheduled)
    assert shown["intent"]["state"] == "cancelled"
    assert [a["reason"] for a in shown["operator_actions"]] == ["seat filled"]

    listed = {i["business_key"]: i["state"] for i in dev.herald("list", "--json").json()["items"]}
    assert listed[key] == "delivered" and listed[scheduled] == "cancelled"


def test_reconcile_reads_the_running_stacks_ledger(dev: Stack) -> None:
    report = dev.herald("reconcile", "--json").json()
    assert isinstance(report["rows"], list) and report["now"]


def test_demo_runs_its_story_on_the_running_stack(dev: Stack) -> None:
    # template-rollout: #53's story (an adopter's template version reviewed, sent, rolled
    # back), and a short one (about 4 s; class-opening, here before, waits out a 10 s read
    # timeout and runs in tests/e2e/test_scenarios.py as every story does).
    done = dev.herald("demo", "template-rollout", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Using the herald dev stack running on {dev.data}" in done.stdout
    assert "clinic-content-lead rolled appointment-reminder back: v2 -> v1" in done.stdout
    assert "== template-rollout: as the story says" in done.stdout
    _no_python_reprs(done.stdout)


@pytest.mark.parametrize("command", ["cancel", "approve-resend"])
def test_an_operator_action_on_an_unknown_key_is_one_line(dev: Stack, command: str) -> None:
    done = dev.herald(command, "no-such:key-1", "--reason", "why")
    line = assert_one_line_error(done, command)
    assert "no intent with id or business key 'no-such:key-1'" in line


def test_demo_with_a_role_the_cluster_lacks_is_one_line(dev: Stack, tmp_path: Path) -> None:
    # What dev.json used to say (no role: libpq takes the login user's name).
    port = _port(dev.addresses["postgres"])
    settings = {
        "HERALD_DATA_DIR": str(dev.data),
        "HERALD_DATABASE_URL": f"postgresql://no_such_role@127.0.0.1:{port}/herald",
    }
    done = run_installed_herald("demo", "class-opening", settings=settings, cwd=tmp_path)
    line = assert_one_line_error(done, "demo")
    assert 'role "no_such_role" does not exist' in line


def test_a_second_stack_on_a_taken_port_names_the_port_and_its_setting(
    dev: Stack, tmp_path: Path
) -> None:
    # Its own data folder and ports, but the running stack's API port.
    api_port = _port(dev.addresses["api"])
    data = tmp_path / "second"
    settings = {
        "HERALD_DATA_DIR": str(data),
        **{
            f"HERALD_{name}_PORT": str(free_port())
            for name in ("POSTGRES", "TEMPORAL", "TEMPORAL_UI")
        },
        **{f"HERALD_{name}_PORT": "0" for name in ANY_FREE_PORT},
        "HERALD_API_PORT": str(api_port),
    }
    try:
        done = run_installed_herald("dev", settings=settings, cwd=tmp_path, timeout=180)
        line = assert_one_line_error(done, "dev")
        assert f"127.0.0.1:{api_port} is already in use" in line and "HERALD_API_PORT" in line
        # What it had started before the API (Postgres, Temporal) was stopped again.
        assert not (data / "dev.json").exists()
        assert not port_in_use("127.0.0.1", int(settings["HERALD_TEMPORAL_PORT"]))
        assert not port_in_use("127.0.0.1", int(settings["HERALD_POSTGRES_PORT"]))
    finally:
        EmbeddedPostgres(data, port=free_port()).destroy()
    # The first stack is untouched.
    assert httpx.get(f"{dev.addresses['api']}/readyz", timeout=5).status_code == 200


def test_send_wait_returns_when_the_message_is_delivered(dev: Stack, member: str) -> None:
    recipient = member
    key = f"class-opening:c-9083:{recipient}"
    expires = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    done = dev.herald(
        "send", "--key", key, "--recipient", recipient, "--template", "class-opening",
        "--phone", "+447400000100", "--vars", json.dumps(VARIABLES),
        "--template-version", "1", "--country", "GB", "--expires-at", expires.isoformat(),
        "--wait", "--timeout", "60", "--utc",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # The API's options reach the ledger: the pinned version and the business expiry.
    recorded = dev.herald("show", key, "--json").json()["intent"]
    assert recorded["template_version"] == 1
    assert datetime.fromisoformat(recorded["expires_at"]) == expires
    lines = done.stdout.splitlines()
    assert lines[0].startswith("new intent ") and "times in UTC" in lines
    # The delivered receipt is a row of the timeline it printed, then where the attempt ended.
    assert any(" observed " in line and "delivered -> delivered" in line for line in lines)
    assert lines[-2].startswith("  => sms #1: delivered") and lines[-1] == "  delivered"
    _no_python_reprs(done.stdout)


def test_send_wait_returns_when_an_email_is_delivered_by_its_signed_event(dev: Stack) -> None:
    # herald dev sends email through the SendGrid simulator: `delivered` comes from a signed
    # event, and `send --wait` counts it as reached (exit 0), as an SMS receipt.
    recipient = f"b-{uuid.uuid4().hex[:8]}"
    assert dev.herald("consent", recipient, "--channel", "email").returncode == 0
    order = {
        "order_id": "o-77",
        "first_name": "Camille",
        "total": "EUR 84.90",
        "items": ["Poster A2"],
        "tracking_url": "https://x.test/o-77",
    }
    done = dev.herald(
        "send", "--key", f"order-created:{recipient}", "--recipient", recipient,
        "--template", "order-created", "--email", f"{recipient}@shop.example",
        "--country", "FR", "--vars", json.dumps(order), "--wait", "--timeout", "60", "--utc",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-2].startswith("  => email #1: delivered") and lines[-1] == "  delivered"
    assert f"{recipient}@shop.example" not in done.stdout


def test_show_follow_prints_rows_as_they_happen_until_delivered(dev: Stack, member: str) -> None:
    recipient = member
    key = f"class-opening:c-9084:{recipient}"
    sent = dev.herald(
        "send",
        "--key",
        key,
        "--recipient",
        recipient,
        "--template",
        "class-opening",
        "--phone",
        "+447400000005",
        "--vars",
        json.dumps(VARIABLES),
    )  # fmt: skip  (+447400000005: the simulator delays the final receipt)
    assert sent.returncode == 0, sent.stderr
    # Started before the receipt comes, so the delivered row is printed as it happens.
    follow = dev.herald("show", key, "--follow", "--timeout", "60")
    assert follow.returncode == 0, follow.stdout + follow.stderr
    lines = follow.stdout.splitlines()
    assert lines[0].startswith("times in the local zone (")
    headers = [
        i for i, line in enumerate(lines) if line.split() == ["AT", "EVENT", "CHANNEL", "DETAIL"]
    ]
    assert len(headers) == 1, follow.stdout  # printed once, then only new rows
    header = headers[0]
    delivered = [i for i, line in enumerate(lines) if "delivered -> delivered" in line]
    assert delivered and delivered[0] > header, follow.stdout
    assert lines[-1] == "  delivered"
    _no_python_reprs(follow.stdout)


def test_show_json_is_the_document_the_api_returns(dev: Stack) -> None:
    listed = dev.herald("list", "--state", "delivered", "--limit", "1", "--json").json()
    intent_id = listed["items"][0]["id"]
    token = (dev.data / "operator.token").read_text().strip()
    api = httpx.get(
        f"{dev.addresses['api']}/v1/intents/{intent_id}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert api.status_code == 200, api.text
    assert dev.herald("show", intent_id, "--json").json() == api.json()
    page = httpx.get(
        f"{dev.addresses['api']}/v1/intents",
        params={"state": "delivered", "limit": 1},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert listed == page.json()


def test_a_retryable_failure_is_shown_waiting_for_an_operator(dev: Stack, member: str) -> None:
    recipient = member
    key = f"class-opening:c-9085:{recipient}"
    # +447400030003: undelivered with 30003, which a resend may cure.
    done = dev.herald(
        "send", "--key", key, "--recipient", recipient, "--template", "class-opening",
        "--phone", "+447400030003", "--vars", json.dumps(VARIABLES), "--wait", "--timeout", "60",
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    note = f"herald approve-resend {key} --channel sms --reason TEXT"
    # The ledger's own record of the window: until when it waits.
    assert "waiting for an operator's approve-resend until " in done.stdout
    assert f"(sms): {note}" in done.stdout
    shown = dev.herald("show", key)
    assert shown.returncode == 0 and note in shown.stdout, shown.stdout + shown.stderr

    approved = dev.herald("approve-resend", key, "--reason", "retry")
    assert approved.returncode == 0, approved.stdout + approved.stderr
    # The resend's attempt #2 goes the same way (the simulator's number says so).
    text = _wait_for_text(dev, key, "  => sms #2: undelivered")
    # Recorded under the CLI's principal: the admin `herald dev` made for the local user.
    accepted = f"approve-resend by {local_principal_name(getpass.getuser())} (admin): accepted"
    approval = next(i for i, line in enumerate(text) if accepted in line)
    decisions = [i for i, line in enumerate(text) if " decision " in line]
    # The approval comes before the decision on the attempt it led to.
    assert len(decisions) == 2 and decisions[0] < approval < decisions[1], "\n".join(text)


def test_a_send_missing_several_variables_is_refused_naming_them_all(dev: Stack) -> None:
    done = dev.herald(
        "send", "--key", f"class-opening:c-9086:m-{uuid.uuid4().hex[:8]}", "--recipient", "m-1",
        "--template", "class-opening", "--phone", "+447400000100",
        "--vars", json.dumps({"class_name": "Spin"}), "--expires-at", "tomorrow",
        "--country", "FRA", "--artifact", "not-a-hash",
    )  # fmt: skip
    line = assert_one_line_error(done, "send")
    # Every problem the API's schema finds, at once, before anything is recorded.
    for option in ("--expires-at:", "--country:", "--artifact:"):
        assert option in line, line
    again = dev.herald(
        "send", "--key", f"class-opening:c-9086:m-{uuid.uuid4().hex[:8]}", "--recipient", "m-1",
        "--template", "class-opening", "--phone", "+447400000100",
        "--vars", json.dumps({"class_name": "Spin"}),
    )  # fmt: skip
    line = assert_one_line_error(again, "send")
    assert (
        "--vars: template 'class-opening': needs starts_at (text), hold_until (text), "
        "booking_url (text), missing from the variables"
    ) in line


def test_demo_on_a_stack_without_the_demo_policy_prints_the_command_that_works(
    dev: Stack,
) -> None:
    # `herald dev --policy demo` started it on the demo policy (the demo story above ran).
    assert "Herald dev stack is up, policy demo" in dev.output()
    default, demo = "2026-12-07.1", "demo-2026-12-07.1"  # policies/*.toml
    assert dev.herald("policy", "activate", default).returncode == 0
    try:
        done = dev.herald("demo", "class-opening")
    finally:
        assert dev.herald("policy", "activate", demo).returncode == 0
    assert done.returncode == 2
    assert (
        "start it again with `herald dev --policy demo`, then run `herald demo class-opening`"
        in done.stderr
    )


def _wait_for_text(stack: Stack, key: str, line: str, within: float = 60) -> list[str]:
    """`herald show KEY`'s lines once one of them starts with `line`."""
    deadline = time.monotonic() + within
    while True:
        lines = stack.herald("show", key).stdout.splitlines()
        if any(each.startswith(line) for each in lines):
            return lines
        if time.monotonic() > deadline:
            pytest.fail(f"no {line!r} for {key} within {within:.0f} s:\n" + "\n".join(lines))
        time.sleep(0.5)


def test_a_key_sent_again_with_other_variables_is_one_line(dev: Stack, member: str) -> None:
    key = f"class-opening:c-9189:{member}"
    send = ["send", "--key", key, "--recipient", member, "--template", "class-opening"]
    send += ["--phone", "+447400000100", "--vars"]
    assert dev.herald(*send, json.dumps(VARIABLES)).returncode == 0
    again = dev.herald(*send, json.dumps({**VARIABLES, "class_name": "Yoga"}))
    line = assert_one_line_error(again, "send")
    assert f"business key '{key}' already recorded with a different payload" in line


def _readme_block(starting: str) -> list[str]:
    """The README's code block whose first line starts with `starting`."""
    text = (ROOT / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```\n")[1::2]]
    [block] = [b for b in blocks if b.startswith(starting)]
    return block.rstrip("\n").splitlines()


def test_the_readmes_banner_is_what_herald_dev_prints(dev: Stack) -> None:
    printed = dev.output().splitlines()
    start = next(i for i, line in enumerate(printed) if line.startswith("Herald dev stack is up"))
    readme = _readme_block("Herald dev stack is up")
    banner = printed[start : start + len(readme)]

    def labels(lines: list[str]) -> list[tuple[str, int]]:
        # Each row's label and the column its value starts at (values differ by machine).
        found = []
        for line in lines[1:]:
            label = line.strip().split("  ")[0]
            found.append((label, len(line) - len(line[len(label) + 2 :].lstrip())))
        return found

    assert banner[0] == readme[0]
    assert labels(banner) == labels(readme)


def _sample_pattern(line: str, key: str) -> re.Pattern[str]:
    """A README sample line as a pattern: `...` and times stand for what varies."""
    line = line.replace("class-opening:c-9081:m-1842", key)
    # An id shown by its first characters (`7b1b5a7e-...`, `SM8db5691d...`) is any id.
    text = re.escape(re.sub(r"[\w-]*\.\.\.", "...", line))
    text = text.replace(re.escape("..."), ".*")
    # `ana~`: the sending principal's key namespace (the user's admin, named after them).
    text = text.replace(re.escape("ana~"), r"[\w.-]+~")
    text = re.sub(
        r"2026\\-12\\-06T\d\d:\d\d:\d\d\\.\d{3}", r"\\d{4}-\\d\\d-\\d\\dT[\\d:.]{12}", text
    )
    text = text.replace("state\\ sending", "state\\ \\w+")  # the first look may be earlier
    assert "2026\\-12\\-06" not in text, text  # every sample time became a pattern
    return re.compile(text)


def test_the_readmes_send_wait_sample_is_what_it_prints(dev: Stack, member: str) -> None:
    import shlex

    block = _readme_block("$ herald template show class-opening")
    start = next(i for i, line in enumerate(block) if line.startswith("$ herald send "))
    command = block[start].removeprefix("$ ")
    end = start + 1
    while command.endswith("\\") or block[end].startswith("    "):
        command = command.rstrip("\\") + " " + block[end].strip()
        end += 1
    sample = block[end:]
    key = f"class-opening:c-9086:{member}"
    argv = shlex.split(command.replace("class-opening:c-9081:m-1842", key))
    argv[argv.index("--recipient") + 1] = member
    settings = {"HERALD_DATA_DIR": str(dev.data), "TZ": "CET-1"}  # the sample's zone
    done = run_installed_herald(*argv[1:], settings=settings, cwd=dev.home, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    printed = done.stdout.splitlines()
    # Every sample line is printed, in order (a run may show a row more, e.g. a poll).
    at = 0
    for line in sample:
        pattern = _sample_pattern(line, key)
        while at < len(printed) and not pattern.fullmatch(printed[at]):
            at += 1
        assert at < len(printed), f"README line not printed: {line!r}\n{done.stdout}"
        at += 1
    assert printed[-1] == sample[-1]


def _no_python_reprs(text: str) -> None:
    assert_no_python_repr(text)


def sigterm_stops_the_stack_and_leaves_no_process(dev: Stack) -> None:
    processes = _stack_processes(dev.addresses)
    names = {p.name() for p in processes}
    assert {"postgres", "temporal"} <= names, names
    ports = [_port(dev.addresses[name]) for name in ("temporal", "api", "simulator", "smtp")]
    ports += [_port(dev.addresses["worker_metrics"]), _port(dev.addresses["postgres"])]
    started = time.monotonic()
    dev.process.send_signal(signal.SIGTERM)
    assert dev.process.wait(timeout=STOP_WITHIN) == 0, dev.output()
    assert time.monotonic() - started < STOP_WITHIN
    assert no_orphans(p.pid for p in processes), [p for p in processes if p.is_running()]
    assert [port for port in ports if port_in_use("127.0.0.1", port)] == []
    assert not (dev.data / "dev.json").exists()
    assert "stopping..." in dev.output()
    # The second terminal now finds nothing (and is kept off any default-port stack).
    down = {"HERALD_DATA_DIR": str(dev.data), "HERALD_POSTGRES_PORT": str(ports[-1])}
    after = run_installed_herald("list", settings=down, cwd=dev.home)
    assert "herald dev" in assert_one_line_error(after, "list")


def _port(address: str) -> int:
    """The port of `host:port`, `http://host:port` or `postgresql://role@host:port/db`."""
    return int(address.split("//")[-1].split("/")[0].rsplit(":", 1)[1])


def _wait_for_api_state(
    api: str, headers: dict[str, str], key: str, state: str, within: float = 60
) -> dict[str, Any]:
    """As _wait_for_state, over HTTP: the document `herald show --json` prints, without a
    process per look."""
    deadline = time.monotonic() + within
    while True:
        answer = httpx.get(f"{api}/v1/intents/{key}", headers=headers, timeout=10)
        assert answer.status_code == 200, answer.text
        doc: dict[str, Any] = answer.json()
        if doc["intent"]["state"] == state:
            return doc
        if time.monotonic() > deadline:
            pytest.fail(f"{key} is {doc['intent']['state']} after {within:.0f} s, not {state}")
        time.sleep(0.2)


ADOPTERS_CATALOG = """# not in Herald's package: an adopter's own template, in its own repository
[[template]]
key = "{key}"
version = 1
channel = "sms"
locale = "en"
body = "Hi {{{{ first_name }}}}, {{{{ lines | length }}}} item(s) shipped: {{{{ lines[0].name }}}}."

[template.variables]
first_name = "text"
lines = {{ type = "list", fields = {{ name = "text", qty = "number" }} }}
"""


def test_an_adopters_template_is_imported_approved_previewed_and_sent_by_cli_and_api(
    dev: Stack, member: str
) -> None:
    """Issue #53's done-when: a template that is not in Herald's package is imported,
    approved by a second principal (its author is refused), previewed and sent through a
    fresh `herald dev`, by the CLI and by the API; a wrong-shaped variable is refused
    naming the variable. Under a policy whose `[review]` covers the key, so the approval
    is what lets it go live."""
    suffix = uuid.uuid4().hex[:8]
    key, policy_version = f"shipped-{suffix}", f"review-{suffix}"
    api, admin_token = dev.addresses["api"], (dev.data / "operator.token").read_text().strip()
    admin = {"Authorization": f"Bearer {admin_token}"}
    (dev.home / f"{key}.toml").write_text(ADOPTERS_CATALOG.format(key=key))
    demo = (ROOT / "policies" / "demo.toml").read_text()
    (dev.home / f"{policy_version}.toml").write_text(
        demo.replace('"demo-2026-12-07.1"', f'"{policy_version}"')
        + f'\n[review]\ntemplates = ["{key}"]\n'
    )
    reviewer = f"reviewer-{suffix}"
    added = dev.herald("principals", "add", reviewer, "--role", "operator")
    assert added.returncode == 0, added.stderr
    reviewer_token = added.stdout.strip()

    def as_reviewer(*args: str) -> Run:
        settings = {"HERALD_DATA_DIR": str(dev.data), "HERALD_TOKEN": reviewer_token}
        return run_installed_herald(*args, settings=settings, cwd=dev.home)

    # The policy that reviews the key: imported by the admin, approved by the reviewer.
    assert dev.herald("policy", "import", f"{policy_version}.toml").returncode == 0
    assert as_reviewer("policy", "approve", policy_version).returncode == 0
    assert dev.herald("policy", "activate", policy_version).returncode == 0
    try:
        imported = dev.herald("template", "import", f"{key}.toml", "--json").json()
        assert imported["recorded"] == [f"{key} v1 (sms/en)"]
        early = dev.herald("template", "activate", key, "1")
        assert f"[review] templates of policy {policy_version} requires" in (
            assert_one_line_error(early, "template")
        )
        own = dev.herald("template", "approve", key, "1")
        assert "its author cannot approve it" in assert_one_line_error(own, "template")
        approved = as_reviewer("template", "approve", key, "1")
        assert approved.stdout.strip() == f"template {key!r} v1 (sms/en) approved by {reviewer}"

        variables = {"first_name": "Ada", "lines": [{"name": "Poster A2", "qty": 1}]}
        by_cli = dev.herald(
            "template", "preview", key, "--version", "1", "--var", "first_name=Ada",
            "--var", f"lines={json.dumps(variables['lines'])}", "--json",
        ).json()  # fmt: skip
        by_api = httpx.post(
            f"{api}/v1/templates/{key}/versions/1/preview",
            json={"variables": variables},
            headers={"Authorization": f"Bearer {reviewer_token}"},
            timeout=10,
        )
        assert by_api.status_code == 200, by_api.text
        assert by_api.json()["text"] == by_cli["text"] == "Hi Ada, 1 item(s) shipped: Poster A2."
        assert by_api.json()["sha256"] == by_cli["sha256"]
        assert (by_cli["encoding"], by_cli["segments"]) == ("GSM-7", 1)

        assert as_reviewer("template", "activate", key, "1").returncode == 0

        # Sent by the CLI, then by the API; each delivered, its evidence naming version 1.
        cli_key = f"{key}:o-{suffix}-1"
        sent = dev.herald(
            "send", "--key", cli_key, "--recipient", member, "--template", key,
            "--phone", "+447400000100", "--vars", json.dumps(variables),
            "--wait", "--timeout", "60",
        )  # fmt: skip
        assert sent.returncode == 0, sent.stdout + sent.stderr
        api_key = f"{key}:o-{suffix}-2"
        created = httpx.post(
            f"{api}/v1/intents",
            json={
                "business_key": api_key, "recipient_ref": member, "template_key": key,
                "channels": ["sms"], "phone": "+447400000100", "variables": variables,
            },
            headers=admin,
            timeout=10,
        )  # fmt: skip
        assert created.status_code in (200, 201), created.text
        for sent_key in (cli_key, api_key):
            doc = _wait_for_api_state(api, admin, sent_key, "delivered")
            (attempt,) = doc["attempts"]
            assert (attempt["template_version"], attempt["state"]) == (1, "delivered")
            # What was previewed is what was sent (region default, transactional: no footer).
            assert attempt["content_sha256"] == by_cli["sha256"]
            assert doc["intent"]["template_pins"] == {"sms": {"locale": "en", "version": 1}}

        # A wrong-shaped variable, refused by name and shape, by the CLI and by the API.
        wrong = {"first_name": "Ada", "lines": ["Poster A2"]}
        refusal = (
            f"template {key!r}: variable 'lines' must be a list of objects with fields "
            "name, qty; item 0 is text"
        )
        refused = dev.herald(
            "send", "--key", f"{key}:o-{suffix}-3", "--recipient", member, "--template", key,
            "--phone", "+447400000100", "--vars", json.dumps(wrong),
        )  # fmt: skip
        assert refusal in assert_one_line_error(refused, "send")
        rejected = httpx.post(
            f"{api}/v1/intents",
            json={
                "business_key": f"{key}:o-{suffix}-4", "recipient_ref": member,
                "template_key": key, "phone": "+447400000100", "variables": wrong,
            },
            headers=admin,
            timeout=10,
        )  # fmt: skip
        assert rejected.status_code == 422
        assert {i["loc"][-1]: i["msg"] for i in rejected.json()["detail"]}["variables"] == refusal
        assert "Poster" not in refused.stderr + rejected.text
    finally:
        assert dev.herald("policy", "activate", "demo-2026-12-07.1").returncode == 0
