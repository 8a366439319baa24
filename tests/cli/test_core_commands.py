"""The core `herald` commands through the real entry point, against the running e2e stack:
send, show, consent, cancel, approve-resend, migrate, and the help of the long runners."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TEST_KEYRING

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PHONE = "+447400000100"


def herald(stack: Any, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cfg = stack.cfg
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env.update(
        HERALD_DATA_DIR=str(cfg.data_path / "cli"),
        HERALD_DATABASE_URL=cfg.resolved_database_url(),
        HERALD_TEMPORAL_ADDRESS=cfg.temporal_target,
        HERALD_DATA_KEY=TEST_KEYRING,
        HERALD_TASK_QUEUE=cfg.task_queue,
        # The stack's local admin (`herald dev` wrote its token on the fresh ledger).
        HERALD_TOKEN=cfg.token_file.read_text(),
    )
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_send_show_and_cancel_through_the_cli(stack):
    suffix = uuid.uuid4().hex[:8]
    key, recipient = f"demo:cli-{suffix}", f"cli-{suffix}"
    consent = as_json(herald(stack, "consent", recipient, "--channel", "sms", "--json"))
    assert (consent["channel"], consent["live"]) == ("sms", True)
    send = (
        "send",
        "--key",
        key,
        "--recipient",
        recipient,
        "--template",
        "demo",
        "--phone",
        PHONE,
        "--vars",
        json.dumps({"n": 7, "intent_id": key}),
        "--json",
    )
    sent = as_json(herald(stack, *send))
    assert sent["business_key"] == key and sent["existed"] is False
    again = as_json(herald(stack, *send))  # the same request again
    assert again["existed"] is True and again["intent_id"] == sent["intent_id"]

    # The workflow runs on the stack's worker process.
    await asyncio.wait_for(
        stack.client.temporal.get_workflow_handle(sent["workflow_id"]).result(), 90
    )
    shown = as_json(herald(stack, "show", key, "--json"))
    assert shown["intent"]["state"] == "delivered"
    assert shown["intent"]["created_by"]  # the token's principal, as the API records it
    # The key in the sending principal's namespace (its name).
    namespace = shown["intent"]["created_by"]
    assert shown["attempts"][0]["token"] == f"{namespace}~{key}:sms:1"
    text = herald(stack, "show", key)
    assert text.returncode == 0 and "delivered" in text.stdout and PHONE not in text.stdout

    cancelled = as_json(herald(stack, "cancel", key, "--reason", "seat filled", "--json"))
    assert cancelled["accepted"] is True and "nothing recalled" in cancelled["message"]
    refused = herald(stack, "approve-resend", key, "--reason", "again", "--json")
    assert refused.returncode == 3 and json.loads(refused.stdout)["accepted"] is False
    actions = as_json(herald(stack, "show", key, "--json"))["operator_actions"]
    assert [(a["action"], a["outcome"]) for a in actions] == [
        ("cancel", "accepted"),
        ("approve-resend", "refused"),
    ]


def test_bad_input_is_a_clear_error_on_stderr(stack):
    bad_phone = herald(
        stack,
        "send",
        "--key",
        "demo:cli-bad",
        "--recipient",
        "r",
        "--template",
        "demo",
        "--phone",
        "+44 12",
    )
    assert bad_phone.returncode == 2 and "phone" in bad_phone.stderr
    assert "Traceback" not in bad_phone.stderr
    bad_template = herald(
        stack,
        "send",
        "--key",
        "demo:cli-bad2",
        "--recipient",
        "r",
        "--template",
        "no-such",
        "--phone",
        PHONE,
    )
    assert bad_template.returncode == 2 and "template" in bad_template.stderr
    missing = herald(stack, "show", "demo:no-such-intent")
    assert missing.returncode == 2 and "no intent" in missing.stderr
    usage = herald(stack, "send", "--recipient", "r")
    assert usage.returncode == 2 and "--key" in usage.stderr


def test_migrate_is_idempotent(stack):
    first = as_json(herald(stack, "migrate", "--json"))
    second = as_json(herald(stack, "migrate", "--json"))
    assert first == second == {"migrated": True}


@pytest.mark.parametrize(
    "command",
    [
        "dev",
        "demo",
        "worker",
        "bench",
        "send",
        "show",
        "cancel",
        "approve-resend",
        "consent",
        "migrate",
    ],
)
def test_every_command_has_help(stack, command):
    done = herald(stack, command, "--help", timeout=60)
    assert done.returncode == 0 and "usage: herald" in done.stdout


def test_migrate_leaves_the_active_policy_alone(stack):
    from sqlalchemy import select

    from ledger.models import PolicyVersion

    with stack.client.sessions() as session:
        before = session.scalars(select(PolicyVersion.version).where(PolicyVersion.active)).all()
    as_json(herald(stack, "migrate", "--json"))  # its HERALD_POLICY_NAME is `default`
    with stack.client.sessions() as session:
        after = session.scalars(select(PolicyVersion.version).where(PolicyVersion.active)).all()
    assert before == after and len(after) == 1


def test_send_refuses_a_business_key_holding_a_phone_number_in_one_line(stack):
    key = "signup:447400123456"
    done = herald(
        stack, "send", "--key", key, "--recipient", "m-1", "--template", "demo", "--phone", PHONE
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "business_key.no_contact_data" in lines[0], done.stderr
    assert "447400123456" not in done.stderr + done.stdout
