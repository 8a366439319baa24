"""What a person and a script read from `herald`, through the real entry point against a
ledger of its own: `--version`, help that names defaults and choices, shell completion,
`template show`, `purge --dry-run`, and output free of Python reprs."""

from __future__ import annotations

import os
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from ledger import repository as repo
from ledger.models import Intent
from tests.cli.conftest import HERALD, assert_one_line_error
from tests.conftest import PYTHON_REPR, unique
from tests.ledger.conftest import fields

pytestmark = pytest.mark.ledger

LATER = (datetime.now(UTC) + timedelta(days=31)).isoformat()
REPR = PYTHON_REPR


def test_version_names_the_installed_package():
    done = subprocess.run([str(HERALD), "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and re.fullmatch(r"herald \d+\.\d+\.\d+\S*\n", done.stdout)


def test_send_help_names_every_api_option_its_choices_and_defaults(herald):
    done = herald("send", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for option in ("--expires-at", "--timezone", "--country", "--template-version", "--artifact"):
        assert option in text
    assert "--category {transactional,operational,promotional}" in text
    assert "--mode {fallback,all}" in text and "(default: fallback)" in text
    assert "--wait" in text and "example: herald send" in text
    assert not REPR.search(done.stdout)


def test_the_shell_completes_commands_and_options(tmp_path: Path):
    out = tmp_path / "completions"
    line = "herald template sh"  # a sub-action; options complete the same way
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HERALD_")},
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
    }
    done = subprocess.run([str(HERALD)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert out.read_text().split() == ["show"]


def test_template_show_lists_the_variables_each_channel_needs(herald):
    doc = herald("template", "show", "class-opening", "--json").json()
    assert {(t["channel"], t["locale"]) for t in doc} == {("sms", "en"), ("sms", "fr")}
    assert all(
        t["required"] == ["class_name", "starts_at", "hold_until", "booking_url"] for t in doc
    )
    text = herald("template", "show", "class-opening", "--version", "1")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["CHANNEL", "LOCALE", "VERSION", "ACTIVE", "REQUIRED", "OPTIONAL"]
    assert "class_name,starts_at,hold_until,booking_url" in lines[1]
    assert "{{ class_name }}" in text.stdout and not REPR.search(text.stdout)
    missing = herald("template", "show", "class-opening", "--version", "9")
    line = assert_one_line_error(missing, "template")
    assert "has no version 9 (known versions: 1)" in line


def test_purge_dry_run_says_what_it_would_remove_and_removes_nothing(herald, cli_ledger, cipher):
    key = unique("class-opening:c-9081")
    with cli_ledger.sessions.begin() as session:
        repo.record_intent(session, fields(session, cipher, key))

    dry = herald("purge", "--now", LATER, "--dry-run", "--json").json()
    text = herald("purge", "--now", LATER, "--dry-run", "--utc")

    with cli_ledger.sessions() as session:
        intent = session.execute(select(Intent).where(Intent.business_key == key)).scalar_one()
        assert intent.sms_destination_ct is not None and intent.pii_purged_at is None
    assert dry["dry_run"] is True and intent.id in dry["intent_ids"]
    assert key in dry["business_keys"] and dry["intents_purged"] >= 1
    assert text.returncode == 0 and text.stdout.startswith("would purge PII of ")
    assert f"\n  {key}\n" in text.stdout and "(dry run: nothing was removed)" in text.stdout
    assert not REPR.search(text.stdout)

    done = herald("purge", "--now", LATER, "--json").json()
    assert intent.id in done["intent_ids"] and done["dry_run"] is False


def test_a_list_with_several_bad_options_names_them_all_at_once(herald):
    done = herald("list", "--state", "happy", "--limit", "0", "--since", "2026-12-01T09:00:00")
    line = assert_one_line_error(done, "list")
    for problem in ("--state: unknown state 'happy'", "--limit", "--since:"):
        assert problem in line, line
    # A time without a zone is refused, saying how to write one (not read as local).
    assert "needs a timezone, e.g. 2025-01-31T12:00:00+00:00" in line


def test_no_command_prints_a_python_repr(herald, cli_ledger, cipher):
    key = unique("class-opening:c-9081")
    with cli_ledger.sessions.begin() as session:
        repo.record_intent(session, fields(session, cipher, key))
    shown = herald("show", key)
    assert shown.returncode == 0 and not REPR.search(shown.stdout), shown
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("times in the local zone")
    assert any(line.split() == ["AT", "EVENT", "CHANNEL", "DETAIL"] for line in lines)
    listed = herald("list", "--utc")
    assert listed.returncode == 0 and not REPR.search(listed.stdout), listed
    assert listed.stdout.splitlines()[0] == "times in UTC"
    assert listed.stdout.splitlines()[1].split() == ["CREATED", "AT", "STATE", "BUSINESS",
                                                     "KEY", "CHANNELS", "REGION", "EVENT",
                                                     "TYPE"]  # fmt: skip
    # (template show, purge --dry-run, consent list: checked by their own tests above)
    for command in (["reconcile", "--now", LATER], ["policy", "list"], ["template", "list"],
                    ["suppression", "list", "+447400000100"]):  # fmt: skip
        done = herald(*command)
        assert done.returncode == 0, (command, done.stderr)
        assert not REPR.search(done.stdout), (command, done.stdout)


def test_send_refusals_are_in_words_with_no_pydantic_prefix_or_regex(herald):
    done = herald(
        "send",
        "--key",
        "signup:+447400987654",
        "--recipient",
        "m-1842",
        "--template",
        "order-created",
        "--phone",
        "07400 123456",
    )
    line = assert_one_line_error(done, "send")
    assert "--key: business key holds a phone number (rule business_key.no_contact_data)" in line
    assert "--phone: must be a phone number in E.164 form" in line
    assert "Value error" not in line and "should match pattern" not in line and "^" not in line
    assert "447400987654" not in line
