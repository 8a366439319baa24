"""The second terminal's longest stories, on a `herald dev` of their own: split from
test_second_terminal.py so a parallel run (`make test`, pytest-xdist by file) runs them
beside the rest instead of after it. Same stack, same rules: the installed `herald` in
other processes, told nothing but the data folder."""

# ruff: noqa: F811 - `dev` and `member` are the imported module-scoped fixtures
from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from cli.intents import STILL_WAITING_AFTER
from domain.principals import local_principal_name
from tests.cli.conftest import HERALD, assert_one_line_error, run_installed_herald
from tests.cli.test_second_terminal import (
    ROOT,
    VARIABLES,
    Stack,
    _show,
    _wait_for_state,
    _wait_for_text,
    member,  # noqa: F401 - the module-scoped recipient, on this module's stack
    running_dev,
)
from tests.conftest import long_story

pytestmark = pytest.mark.e2e

HORIZON = 10
"""Seconds of delivery polling in this module's policy: the demo policy's 60 s, which these
stories would wait out, shortened in a policy file as an adopter writes one."""
SHORT_HORIZON = "short-horizon-2026-12-07.1"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`herald dev --policy FILE`: the demo policy with a polling horizon of HORIZON s."""
    home = tmp_path_factory.mktemp("terminal-long")
    demo = (ROOT / "policies" / "demo.toml").read_text()
    short = demo.replace('version = "demo-2026-12-07.1"', f'version = "{SHORT_HORIZON}"')
    short = short.replace("sms_poll_horizon_seconds = 60", f"sms_poll_horizon_seconds = {HORIZON}")
    assert short.count(SHORT_HORIZON) == 1 and f"= {HORIZON}\n" in short
    policy = home / "short-horizon.toml"
    policy.write_text(short)
    with running_dev(home, str(policy)) as stack:
        yield stack


@long_story
def test_settle_from_another_terminal_then_resend(dev: Stack, member: str) -> None:
    # `herald settle --help` lists the running stack's active policy's rules.
    helped = dev.herald("settle", "--help")
    assert f"settlement rules (active policy {SHORT_HORIZON};" in helped.stdout, helped.stdout
    assert "carrier-confirmed-not-delivered" in helped.stdout
    phone = f"+4474005{uuid.uuid4().int % 100_000:05d}"
    scripted = httpx.post(
        f"{dev.addresses['simulator']}/_sim/script",
        json={"to": phone, "fault": "never_resolves", "count": 1},
        timeout=10,
    )
    assert scripted.status_code == 200, scripted.text
    key = f"class-opening:c-9087:{member}"
    dev.herald(
        "send", "--key", key, "--recipient", member, "--template", "class-opening",
        "--phone", phone, "--vars", json.dumps(VARIABLES), "--json",
    ).json()  # fmt: skip
    rule = "carrier-confirmed-not-delivered"
    refused = dev.herald("settle", key, "--rule", rule, "--reason", "r")
    assert refused.returncode == 3 and "refused: " in refused.stdout, refused.stdout
    # Past the policy's polling horizon the intent waits for a settlement.
    deadline = time.monotonic() + 120
    while _show(dev, key)["intent"]["awaiting"] != "settlement":
        assert time.monotonic() < deadline, "the intent never waited for a settlement"
        time.sleep(1)
    shown = dev.herald("show", key).stdout
    assert "waiting for a settlement of the unknown sms attempt until" in shown, shown
    # The carrier takes its time to answer the lookup: the command says once that it is
    # still asking, and how to follow the intent instead (the answer cannot come sooner).
    slow = STILL_WAITING_AFTER + 3
    scripted = httpx.post(
        f"{dev.addresses['simulator']}/_sim/script",
        json={"to": phone, "fault": "slow_lookup", "seconds": slow},
        timeout=10,
    )
    assert scripted.status_code == 200, scripted.text
    settled = dev.herald(
        "settle", key, "--lookup", "--rule", "carrier-confirmed-not-delivered",
        "--reason", "carrier holds it stuck at sent",
    )  # fmt: skip
    assert settled.returncode == 0, settled.stdout + settled.stderr
    assert settled.stderr.splitlines() == [
        "herald settle: still asking the provider (it may take up to 2 minutes); to follow "
        f"the intent instead, Ctrl-C and `herald show {key} --follow`"
    ]
    assert "lookup: the provider holds it as sent" in settled.stdout
    assert "settled: settled as undelivered under carrier-confirmed-not-delivered" in (
        settled.stdout
    )
    assert dev.herald("approve-resend", key, "--reason", "settled").returncode == 0
    text = _wait_for_text(dev, key, "  => sms #2: delivered")
    assert any("settle by " in line and ": accepted - carrier holds" in line for line in text)
    reconciled = dev.herald("reconcile", "--json").json()
    assert any(
        x["business_key"] == key and x["rule"] == "carrier-confirmed-not-delivered"
        for x in reconciled["settlements"]
    )


def _as_from_a_terminal() -> None:
    """In the child before it runs: SIGINT as a terminal's shell hands it over (default
    action, unblocked). In full runs the command sometimes took no Ctrl-C at all (two of
    five, never alone): a disposition or mask inherited from the test process."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_ctrl_c_during_send_wait_says_the_notification_goes_ahead(dev: Stack, member: str) -> None:
    key = f"class-opening:c-9185:{member}"
    argv = [str(HERALD), "send", "--key", key, "--recipient", member, "--template"]
    argv += ["class-opening", "--phone", "+447400000008", "--vars", json.dumps(VARIABLES)]
    argv += ["--wait"]  # +447400000008: the carrier accepts it and never resolves it
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    waiting = subprocess.Popen(
        argv,
        cwd=dev.home,
        env={**env, "HERALD_DATA_DIR": str(dev.data)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )
    try:
        assert waiting.stdout is not None
        first = waiting.stdout.readline()  # recorded: the intent exists from here on
        if not first.startswith("new intent "):
            waiting.wait(timeout=30)
            pytest.fail(f"send --wait said {first!r}, {waiting.stderr.read()!r}")  # type: ignore[union-attr]
        while " prepared token=" not in (line := waiting.stdout.readline()):
            assert line, "send --wait ended before its attempt was prepared"
        waiting.send_signal(signal.SIGINT)
        try:
            out, err = waiting.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            # A person presses it again; so does the test, held to the same words.
            waiting.send_signal(signal.SIGINT)
            out, err = waiting.communicate(timeout=30)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    if waiting.returncode != 130:  # it ended by itself: all it said, in the failure's report
        print(f"send --wait's stdout:\n{out}\nits stderr:\n{err}")
    assert waiting.returncode == 130
    assert err.strip().splitlines() == [
        f"herald send: stopped waiting; the notification {key} goes ahead: follow it with "
        f"`herald show {key} --follow`, or stop it with `herald cancel {key} --reason TEXT`"
    ]
    # It went ahead: nothing cancelled it, and its attempt went to the carrier.
    doc = _wait_for_state(dev, key, "unknown", within=90)  # never resolves: the horizon
    assert not doc["operator_actions"] and doc["attempts"][0]["remote_id"]


def test_principals_from_another_terminal_add_use_over_http_revoke(dev: Stack) -> None:
    """`herald dev` made an admin for the local user on its fresh data folder and wrote
    its token where a second terminal's CLI finds it; with it: add a viewer, use its
    printed token over HTTP, revoke it, and the next request is 401."""
    token_file = dev.data / "operator.token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    local = local_principal_name(getpass.getuser())
    before = {p["name"]: p for p in dev.herald("principals", "list", "--json").json()}
    assert before[local]["role"] == "admin" and before[local]["created_by"] == "herald-dev"

    name = f"support-{uuid.uuid4().hex[:8]}"
    added = dev.herald("principals", "add", name, "--role", "viewer")
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert len(token) == 43 and "will not show it again" in added.stderr
    bearer = {"Authorization": f"Bearer {token}"}
    api = dev.addresses["api"]
    after_printed: list[str] = []

    read = httpx.get(f"{api}/v1/intents?limit=1", headers=bearer, timeout=10)
    assert read.status_code == 200, read.text
    cancel = httpx.post(
        f"{api}/v1/intents/no-such:key/cancel", json={"reason": "r"}, headers=bearer, timeout=10
    )
    # An app cancels its own intents, an operator any: a viewer is neither.
    assert cancel.status_code == 403 and "operator" in cancel.json()["allowed_roles"]
    after_printed += [read.text, cancel.text]
    # The CLI acts as whoever HERALD_TOKEN names: a viewer may not cancel.
    as_viewer = run_installed_herald(
        "cancel",
        "no-such:key",
        "--reason",
        "r",
        settings={"HERALD_DATA_DIR": str(dev.data), "HERALD_TOKEN": token},
        cwd=dev.home,
    )
    assert "needs the operator role" in assert_one_line_error(as_viewer, "cancel")
    after_printed += [as_viewer.stdout, as_viewer.stderr]
    # Nor record an intent, as over HTTP (`send` once ran whatever the token said).
    key = f"order-created:o-{uuid.uuid4().hex[:8]}"
    viewer_send = run_installed_herald(
        *("send", "--key", key, "--recipient", "m-1", "--template", "order-created"),
        *("--phone", "+447400000100", "--vars", '{"order_id": "o-1"}'),
        settings={"HERALD_DATA_DIR": str(dev.data), "HERALD_TOKEN": token},
        cwd=dev.home,
    )
    assert "create intents needs the app role" in assert_one_line_error(viewer_send, "send")
    assert dev.herald("show", key).returncode == 2  # nothing was recorded
    after_printed += [viewer_send.stdout, viewer_send.stderr]

    listed = dev.herald("principals", "list")
    assert listed.returncode == 0 and name in listed.stdout
    shown = {p["name"]: p for p in dev.herald("principals", "list", "--json").json()}
    assert shown[name]["last_used_at"] is not None and shown[name]["revoked_at"] is None
    revoked = dev.herald("principals", "revoke", name)
    assert revoked.returncode == 0 and revoked.stdout.strip() == f"principal {name} revoked"
    refused = httpx.get(f"{api}/v1/intents?limit=1", headers=bearer, timeout=10)
    assert refused.status_code == 401
    after_printed += [listed.stdout, listed.stderr, revoked.stdout, refused.text]

    # Nowhere after it was printed: not in an answer, not in any log or file of the stack.
    assert all(token not in text for text in after_printed)
    assert token not in dev.output()
    for path in dev.data.rglob("*"):
        if path.is_file() and path.stat().st_size < 20_000_000:
            assert token.encode() not in path.read_bytes(), path
