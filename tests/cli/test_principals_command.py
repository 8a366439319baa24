"""`herald principals` through the real entry point, against the CLI's own ledger: the
break-glass HERALD_OPERATOR_TOKEN, the token file's admin, HERALD_TOKEN, rotate and revoke,
the audit trail, and one-line refusals."""

from __future__ import annotations

import re
import uuid

import pytest
from sqlalchemy import select

from ledger.models import AuditEvent
from tests.cli.conftest import Ledger, Run, assert_one_line_error, run_herald


def _herald(cli_ledger: Ledger, *args: str, **settings: str) -> Run:
    return run_herald(
        *args, database_url=cli_ledger.url, data_dir=cli_ledger.data_dir, settings=settings
    )


def test_add_as_break_glass_rotate_revoke_and_refusals_in_one_line(cli_ledger: Ledger) -> None:
    glass = "break-glass-" + uuid.uuid4().hex
    name = f"app-{uuid.uuid4().hex[:8]}"
    added = _herald(
        cli_ledger,
        *("principals", "add", name, "--role", "app", "--json"),
        HERALD_OPERATOR_TOKEN=glass,
        HERALD_TOKEN=glass,
    ).json()
    assert added["role"] == "app" and len(added["token"]) == 43

    # An app's token may not manage principals; the refusal names the role needed.
    as_app = _herald(cli_ledger, "principals", "list", HERALD_TOKEN=added["token"])
    assert "needs the admin role" in assert_one_line_error(as_app, "principals")
    bad = _herald(cli_ledger, "principals", "add", "ann@example.com", "--role", "viewer")
    assert "letters, digits" in assert_one_line_error(bad, "principals")

    # The token file's admin (what `herald dev` writes) rotates and revokes.
    rotated = _herald(cli_ledger, "principals", "rotate", name)
    assert rotated.returncode == 0 and rotated.stdout.strip() != added["token"]
    assert _herald(cli_ledger, "principals", "revoke", name).returncode == 0

    listed = {p["name"]: p for p in _herald(cli_ledger, "principals", "list", "--json").json()}
    assert listed[name]["revoked_at"] and listed[name]["rotated_at"]
    assert not any(added["token"] in str(p) for p in listed.values())
    with cli_ledger.sessions() as session:
        trail = session.execute(
            select(AuditEvent.action, AuditEvent.actor, AuditEvent.actor_role)
            .where(AuditEvent.subject == name)
            .order_by(AuditEvent.id)
        ).all()
    assert [tuple(row) for row in trail] == [
        ("principal.added", "break-glass", "admin"),
        ("principal.rotated", "cli-admin", "admin"),
        ("principal.revoked", "cli-admin", "admin"),
    ]


def test_activating_a_policy_needs_an_operator_and_is_audited_once(cli_ledger: Ledger) -> None:
    viewer, operator = (
        _herald(
            cli_ledger, "principals", "add", f"{role}-{uuid.uuid4().hex[:8]}", "--role", role,
            "--json",
        ).json()
        for role in ("viewer", "operator")
    )  # fmt: skip
    version = "2026-12-07.1"  # policies/default.toml, the one the CLI's ledger is seeded with
    refused = _herald(cli_ledger, "policy", "activate", version, HERALD_TOKEN=viewer["token"])
    assert "needs the operator role" in assert_one_line_error(refused, "policy")
    with cli_ledger.sessions() as session:
        before = session.execute(
            select(AuditEvent.id).where(AuditEvent.action == "policy.activate")
        ).all()
    done = _herald(cli_ledger, "policy", "activate", version, HERALD_TOKEN=operator["token"])
    assert done.returncode == 0, done.stderr
    with cli_ledger.sessions() as session:
        trail = session.execute(
            select(AuditEvent.actor, AuditEvent.subject)
            .where(AuditEvent.action == "policy.activate")
            .order_by(AuditEvent.id)
        ).all()
    # Once: the activation records it; the command no longer records its own beside it.
    assert len(trail) == len(before) + 1 and tuple(trail[-1]) == (operator["name"], version)


def test_principals_list_names_its_zone_prints_local_milliseconds_and_takes_utc(
    cli_ledger: Ledger, tmp_path
) -> None:
    from tests.cli.conftest import run_installed_herald

    settings = {
        "HERALD_DATABASE_URL": cli_ledger.url,
        "HERALD_DATA_DIR": str(cli_ledger.data_dir),
        "TZ": "Asia/Kolkata",  # +05:30 all year: no daylight saving to guess
    }
    local = run_installed_herald("principals", "list", settings=settings, cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    lines = local.stdout.splitlines()
    assert lines[0] == "times in the local zone (IST, UTC+05:30; --utc for UTC)"
    assert lines[1].split()[:4] == ["NAME", "ROLE", "CREATED", "BY"]
    admin = next(line for line in lines if line.startswith("cli-admin "))
    created = admin.split()[2]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+05:30", created), admin

    utc = run_installed_herald("principals", "list", "--utc", settings=settings, cwd=tmp_path)
    assert utc.returncode == 0, utc.stderr
    assert utc.stdout.splitlines()[0] == "times in UTC"
    admin = next(line for line in utc.stdout.splitlines() if line.startswith("cli-admin "))
    assert re.fullmatch(r"\S+T\S+\.\d{3}\+00:00", admin.split()[2]), admin


def test_the_last_admin_stays_and_rotating_the_files_token_rewrites_the_file(
    cli_ledger: Ledger,
) -> None:
    token_file = cli_ledger.data_dir / "operator.token"
    before = token_file.read_text().strip()
    listed = _herald(cli_ledger, "principals", "list", "--json").json()
    admins = [p["name"] for p in listed if p["role"] == "admin" and not p["revoked_at"]]
    assert admins == ["cli-admin"]

    # The only admin cannot revoke itself: the stack would have nobody to manage it.
    refused = _herald(cli_ledger, "principals", "revoke", "cli-admin")
    assert "last active admin" in assert_one_line_error(refused, "principals")

    # Rotating the principal whose token is in the file puts the new token there.
    rotated = _herald(cli_ledger, "principals", "rotate", "cli-admin", "--json")
    new = rotated.json()["token"]
    assert new != before and token_file.read_text() == new
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert str(token_file) in rotated.stderr and new not in rotated.stderr
    assert _herald(cli_ledger, "principals", "list").returncode == 0

    # Rotating anyone else leaves the file alone.
    other = f"app-{uuid.uuid4().hex[:8]}"
    assert _herald(cli_ledger, "principals", "add", other, "--role", "app").returncode == 0
    assert _herald(cli_ledger, "principals", "rotate", other).returncode == 0
    assert token_file.read_text() == new


def test_commands_that_record_act_as_the_tokens_principal_and_its_role(cli_ledger: Ledger) -> None:
    # Once `reconcile --record` and `schedules trigger` ran whatever the token said (`send`
    # too: tests/cli/test_second_terminal_long.py, it needs a Temporal).
    viewer = _herald(
        cli_ledger, "principals", "add", f"vi-{uuid.uuid4().hex[:8]}", "--role", "viewer",
        "--json",
    ).json()  # fmt: skip
    operator = _herald(
        cli_ledger, "principals", "add", f"op-{uuid.uuid4().hex[:8]}", "--role", "operator",
        "--json",
    ).json()  # fmt: skip
    record = _herald(cli_ledger, "reconcile", "--record", HERALD_TOKEN=viewer["token"])
    assert "needs the operator role" in assert_one_line_error(record, "reconcile")
    assert _herald(cli_ledger, "reconcile", HERALD_TOKEN=viewer["token"]).returncode == 0
    purge = _herald(cli_ledger, "schedules", "trigger", "purge", HERALD_TOKEN=operator["token"])
    assert "needs the admin role" in assert_one_line_error(purge, "schedules")


def test_consent_list_without_a_recipient_is_refused_not_recorded_for_list(
    cli_ledger: Ledger,
) -> None:
    # Once `consent list --channel sms` recorded a grant for a recipient named "list".
    for args in (("consent", "list", "--channel", "sms"), ("consent", "list")):
        refused = _herald(cli_ledger, *args)
        assert "give the recipient whose grants to list" in assert_one_line_error(
            refused, "consent"
        )
    listed = _herald(cli_ledger, "consent", "list", "list", "--json")
    assert listed.returncode == 0 and listed.json()["items"] == [], listed.stdout
    empty = _herald(cli_ledger, "consent", "m-1", "--channel", "sms", "--purpose", "")
    assert "--purpose: give one" in assert_one_line_error(empty, "consent")


@pytest.mark.parametrize(
    "args",
    [
        ("cancel", "order-created:o-1"),
        ("approve-resend", "order-created:o-1"),
        ("settle", "order-created:o-1", "--rule", "carrier-confirmed-delivered"),
        ("legal-hold", "order-created:o-1", "--on"),
    ],
    ids=lambda args: args[0],
)
@pytest.mark.parametrize("reason", ["", "   ", "\u200b\u2060"])
def test_an_empty_reason_is_refused_as_the_api_refuses_it(
    cli_ledger: Ledger, args: tuple[str, ...], reason: str
) -> None:
    refused = _herald(cli_ledger, *args, "--reason", reason)
    assert "--reason: say why in words" in assert_one_line_error(refused, args[0])


def test_an_app_is_added_with_its_key_namespace_and_a_bad_or_taken_one_is_one_line(
    cli_ledger: Ledger,
) -> None:
    name, namespace = f"app-{uuid.uuid4().hex[:8]}", f"shop-{uuid.uuid4().hex[:8]}"
    added = _herald(
        cli_ledger, "principals", "add", name, "--role", "app", "--namespace", namespace, "--json"
    ).json()
    assert added["namespace"] == namespace
    # Without one, a principal's keys are in its own name.
    other = f"app-{uuid.uuid4().hex[:8]}"
    assert (
        _herald(cli_ledger, "principals", "add", other, "--role", "app", "--json").json()[
            "namespace"
        ]
        == other
    )
    listed = {p["name"]: p for p in _herald(cli_ledger, "principals", "list", "--json").json()}
    assert (listed[name]["namespace"], listed[other]["namespace"]) == (namespace, other)

    taken = _herald(
        cli_ledger, "principals", "add", f"app-{uuid.uuid4().hex[:8]}", "--role", "app",
        "--namespace", namespace.upper(),
    )  # fmt: skip
    assert f"belongs to principal '{name}'" in assert_one_line_error(taken, "principals")
    phone = _herald(
        cli_ledger, "principals", "add", f"app-{uuid.uuid4().hex[:8]}", "--role", "app",
        "--namespace", "shop-447911123456",
    )  # fmt: skip
    message = assert_one_line_error(phone, "principals")
    assert "business_key.no_contact_data" in message and "447911" not in message
