"""`herald suppression add | list | lift` through the real entry point: a suppression added
from the terminal denies the next authorization, lifting it allows the one after, and the
destination is never printed back."""

from __future__ import annotations

import pytest

from activities.contracts import AuthorizeInput
from activities.ledger import LedgerActivities
from ledger.crypto import FieldCipher
from tests.activities import intents
from tests.conftest import key_id

pytestmark = pytest.mark.ledger

PHONE = "+447400032002"


async def test_a_suppression_from_the_cli_denies_until_it_is_lifted(herald, cli_ledger):  # type: ignore[no-untyped-def]
    # Nothing on record yet; this first command also gives the dev data key the CLI uses.
    empty = herald("suppression", "list", PHONE)
    assert empty.returncode == 0, empty.stderr
    assert "no suppression on record" in empty.stdout
    cipher = FieldCipher((cli_ledger.data_dir / "data.key").read_text().strip())
    key = f"order-created:o-{key_id()}"
    intent_id = intents.record(
        cli_ledger.sessions, cipher, intents.demo_request(key, PHONE), consent="sms"
    )
    ledger = LedgerActivities(cli_ledger.sessions, cipher)

    added = herald("suppression", "add", PHONE, "--channel", "sms", "--json").json()
    assert (added["created"], added["active"], added["reason"]) == (True, True, "operator")
    denied = await ledger.authorize(AuthorizeInput(intent_id, "sms", 1))
    assert (denied.outcome, denied.rule) == ("deny", "suppression.operator"), denied

    again = herald("suppression", "add", PHONE, "--channel", "sms")
    assert again.returncode == 0 and "already active, nothing added" in again.stdout
    listed = herald("suppression", "list", "+44 7400 032002", "--channel", "sms", "--json")
    # POST /v1/suppressions/search's document (SuppressionList).
    assert [(r["id"], r["active"]) for r in listed.json()["items"]] == [(added["id"], True)]
    assert PHONE not in listed.stdout and "7400" not in listed.stdout

    lifted = herald("suppression", "lift", str(added["id"]), "--source", "ops-ada", "--json")
    assert (lifted.json()["changed"], lifted.json()["lifted_source"]) == (True, "ops-ada")
    allowed = await ledger.authorize(AuthorizeInput(intent_id, "sms", 2))
    assert allowed.outcome == "allow", allowed
    history = herald("suppression", "list", PHONE, "--json").json()
    assert [(r["id"], r["active"]) for r in history["items"]] == [(added["id"], False)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "not-a-number", "--channel", "sms"], "destination: not a phone number"),
        (["add", PHONE, "--channel", "sms", "--reason", "Bad Reason"], "--reason: a machine word"),
        (["lift", "987654321"], "no suppression 987654321"),
    ],
)
def test_bad_suppression_input_is_one_line_naming_the_problem(herald, args, message):  # type: ignore[no-untyped-def]
    done = herald("suppression", *args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"herald suppression: {message}"), lines
    assert "Traceback" not in done.stderr
