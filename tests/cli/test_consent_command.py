"""`herald consent [--revoke]` through the real entry point: a revoke ends the earlier grant,
and the next authorization is denied citing it."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from activities.contracts import AuthorizeInput
from activities.ledger import LedgerActivities
from ledger.models import Consent
from tests.activities import intents
from tests.conftest import key_id

pytestmark = pytest.mark.ledger


def _intent(cli_ledger, cipher, recipient: str) -> str:  # type: ignore[no-untyped-def]
    key = f"order-created:o-{key_id()}"
    request = intents.demo_request(key, "+447400032001", recipient_ref=recipient)
    return intents.record(cli_ledger.sessions, cipher, request)


async def test_consent_revoke_through_the_cli_denies_the_next_authorization(
    herald, cli_ledger, cipher
):
    recipient = f"m-{uuid.uuid4().hex[:8]}"
    intent_id = _intent(cli_ledger, cipher, recipient)
    ledger = LedgerActivities(cli_ledger.sessions, cipher)
    granted = herald("consent", recipient, "--channel", "sms", "--json").json()
    assert (await ledger.authorize(AuthorizeInput(intent_id, "sms", 1))).outcome == "allow"

    revoked = herald("consent", recipient, "--channel", "sms", "--revoke", "--json").json()

    decision = await ledger.authorize(AuthorizeInput(intent_id, "sms", 2))
    assert (decision.outcome, decision.rule) == ("deny", "consent.revoked"), decision
    # The document POST /v1/consents/revoke answers: the grants it ended, as ConsentView.
    assert [(c["id"], c["channel"], c["live"]) for c in revoked["ended"]] == [
        (granted["id"], "sms", False)
    ]
    assert f"consent {granted['id']}" in decision.reason and "by cli" in decision.reason
    with cli_ledger.sessions() as session:
        rows = session.scalars(select(Consent).where(Consent.recipient_ref == recipient)).all()
    # One row, kept as history and ended: the revoke did not add a grant-and-revoke row.
    assert [(r.id, r.revoked_at is not None) for r in rows] == [(granted["id"], True)]


def test_a_revoke_with_nothing_live_says_so_and_changes_nothing(herald, cli_ledger):
    recipient = f"m-{uuid.uuid4().hex[:8]}"
    done = herald("consent", recipient, "--channel", "email", "--revoke")
    assert done.returncode == 0, done.stderr
    assert "nothing to revoke" in done.stdout
    with cli_ledger.sessions() as session:
        assert not session.scalars(select(Consent).where(Consent.recipient_ref == recipient)).all()


def test_a_too_long_recipient_is_one_line_on_stderr(herald):
    done = herald("consent", "x" * 121, "--channel", "sms")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "recipient" in done.stderr
    assert "Traceback" not in done.stderr


def test_consent_list_shows_every_grant_revoked_too_as_the_api_lists_them(herald):
    recipient = f"m-{uuid.uuid4().hex[:8]}"
    sms = herald("consent", recipient, "--channel", "sms", "--json").json()
    email = herald("consent", recipient, "--channel", "email", "--purpose", "news", "--json").json()
    assert herald("consent", recipient, "--channel", "sms", "--revoke").returncode == 0

    listed = herald("consent", "list", recipient, "--json").json()
    # POST /v1/consents/search's document (ConsentList), oldest first.
    assert [(c["id"], c["channel"], c["purpose"], c["live"]) for c in listed["items"]] == [
        (sms["id"], "sms", "service", False),
        (email["id"], "email", "news", True),
    ]

    text = herald("consent", "list", recipient, "--channel", "sms", "--utc")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f"consent of {recipient}; times in UTC"
    assert lines[1].split() == [
        "ID",
        "CHANNEL",
        "PURPOSE",
        "SOURCE",
        "GRANTED",
        "AT",
        "REVOKED",
        "AT",
        "LIVE",
    ]
    assert lines[2].split()[0] == str(sms["id"]) and lines[2].split()[-1] == "no"
    assert len(lines) == 3  # the email grant does not apply to sms
    assert "None" not in text.stdout


def test_consent_list_of_a_recipient_without_grants_says_so(herald):
    done = herald("consent", "list", f"m-{uuid.uuid4().hex[:8]}")
    assert done.returncode == 0 and "no consent on record" in done.stdout


def test_recording_consent_without_a_channel_names_every_problem_at_once(herald):
    done = herald("consent", "x" * 121, "--purpose", "p" * 41)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    for problem in ("recipient: required", "--purpose: required", "--channel: required"):
        assert problem in done.stderr
