"""`herald erase` and `herald archive run | verify | export`, run as an operator would:
through `python -m cli`, reading `--json` back, refusals as one line on stderr."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.models import ArchivedIntent, Attempt, AuditEvent, Intent
from settings import Settings
from tests.cli.conftest import Ledger, assert_one_line_error
from tests.conftest import key_id
from tests.ledger.conftest import fields, make_attempt

pytestmark = pytest.mark.ledger

TWO_YEARS_ON = (datetime.now(UTC) + timedelta(days=730)).isoformat()


def _closed(cli_ledger: Ledger, phone: str, *, hold: bool = False) -> str:
    """A delivered SMS intent for `phone`, under the CLI's own data key; its key."""
    cipher = FieldCipher(Settings(data_dir=cli_ledger.data_dir, env="dev").resolved_data_keys())
    key = f"retention-cli:{key_id()}"
    with cli_ledger.sessions.begin() as session:
        recorded = repo.record_intent(session, fields(session, cipher, key, phone=phone))
        make_attempt(session, cipher, recorded.intent_id, key, destination=phone)
        session.execute(
            update(Attempt).where(Attempt.intent_id == recorded.intent_id).values(state="delivered")
        )
        if hold:
            session.execute(
                update(Intent).where(Intent.id == recorded.intent_id).values(legal_hold=True)
            )
    return key


def _intent(cli_ledger: Ledger, key: str) -> Intent | None:
    with cli_ledger.sessions() as session:
        return session.execute(
            select(Intent).where(Intent.business_key == key)
        ).scalar_one_or_none()


def test_erase_nulls_the_recipients_contact_data_and_records_itself(herald, cli_ledger):
    phone, other = "+447400000301", "+447400000302"
    mine, theirs = _closed(cli_ledger, phone), _closed(cli_ledger, other)

    dry = herald("erase", "--phone", phone, "--reason", "GDPR request 118", "--dry-run", "--json")
    assert dry.json()["rows_erased"] == {"intent": 1, "attempt": 1}
    assert _intent(cli_ledger, mine).sms_destination_ct is not None  # type: ignore[union-attr]

    done = herald("erase", "--phone", phone, "--reason", "GDPR request 118", "--json").json()
    assert done["rows_erased"] == {"intent": 1, "attempt": 1} and done["dry_run"] is False
    assert _intent(cli_ledger, mine).sms_destination_ct is None  # type: ignore[union-attr]
    assert _intent(cli_ledger, theirs).sms_destination_ct is not None  # type: ignore[union-attr]
    with cli_ledger.sessions() as session:
        event = session.get(AuditEvent, done["audit_event_id"])
    assert event is not None and (event.actor, event.action) == ("cli-admin", "recipient.erased")
    assert phone not in event.subject and phone.lstrip("+") not in str(event.detail)
    text = herald("erase", "--phone", phone, "--reason", "asked again")
    assert text.returncode == 0 and text.stdout.startswith("erased the contact data of phone ")
    assert phone not in text.stdout


def test_erase_refuses_under_legal_hold_and_bad_input_in_one_line(herald, cli_ledger):
    phone = "+447400000303"
    held = _closed(cli_ledger, phone, hold=True)
    refused = herald("erase", "--phone", phone, "--reason", "request")
    line = assert_one_line_error(refused, "erase")
    assert f"legal hold on {held}" in line
    assert _intent(cli_ledger, held).sms_destination_ct is not None  # type: ignore[union-attr]

    both = herald("erase", "--phone", phone, "--email", "a@example.org", "--reason", "r")
    assert "name the recipient once" in assert_one_line_error(both, "erase")
    bad = herald("erase", "--phone", "call-me-maybe", "--reason", "r")
    assert "call-me-maybe" not in assert_one_line_error(bad, "erase")
    named = herald("erase", "--phone", phone, "--reason", f"asked by {phone}")
    assert "reason.no_contact_data" in assert_one_line_error(named, "erase")


def test_archive_runs_verifies_and_exports(herald, cli_ledger, tmp_path: Path):
    key = _closed(cli_ledger, "+447400000304")
    held = _closed(cli_ledger, "+447400000305", hold=True)

    dry = herald("archive", "run", "--now", TWO_YEARS_ON, "--dry-run", "--json").json()
    assert key in dry["business_keys"] and held not in dry["business_keys"]
    assert _intent(cli_ledger, key) is not None

    done = herald("archive", "run", "--now", TWO_YEARS_ON, "--json").json()
    assert done["archived"] >= 1 and key in done["business_keys"] and done["held"] >= 1
    assert _intent(cli_ledger, key) is None and _intent(cli_ledger, held) is not None
    again = herald("archive", "run", "--now", TWO_YEARS_ON, "--json").json()
    assert again["archived"] == 0

    assert herald("archive", "verify", "--json").json()["ok"] is True
    export = tmp_path / "archive.jsonl"
    written = herald("archive", "export", "--out", str(export), "--json").json()
    with cli_ledger.sessions() as session:
        stones = session.scalar(select(ArchivedIntent.id).order_by(ArchivedIntent.id.desc()))
    assert written["documents"] >= 1 and stones is not None
    assert herald("archive", "verify", str(export)).returncode == 0

    lines = export.read_text().splitlines()
    lines[0] = lines[0].replace('"state":"delivered"', '"state":"failed"')
    export.write_text("\n".join(lines) + "\n")
    tampered = herald("archive", "verify", str(export))
    assert tampered.returncode == 1 and "line 1: intent" in tampered.stdout
    again_export = herald("archive", "export", "--out", str(export))
    assert "exists" in assert_one_line_error(again_export, "archive")

    # To cold storage: the documents leave the ledger, the tombstones verify the file.
    cold = tmp_path / "cold.jsonl"
    moved = herald("archive", "export", "--out", str(cold), "--drop", "--json").json()
    assert moved["dropped"] == moved["documents"] >= 1
    with cli_ledger.sessions() as session:
        assert session.scalar(select(ArchivedIntent.document).limit(1)) is None
    verified = herald("archive", "verify", str(cold), "--json").json()
    assert verified["ok"] is True and verified["documents_checked"] == moved["documents"]
    empty = herald("archive", "export", "--out", str(tmp_path / "none.jsonl"), "--json")
    assert empty.json()["documents"] == 0
