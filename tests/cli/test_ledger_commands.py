"""`herald purge | legal-hold | reconcile | list | policy | template`, run as an operator
would: through `python -m cli` (or the installed `herald`), reading `--json` back, errors
on stderr."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from domain.keys import content_sha256
from domain.principals import Principal, Role
from ledger import repository as repo
from ledger.models import AuditEvent, Intent, OperatorAction
from ledger.templates import ContentFile, import_policies, import_templates
from tests.cli.conftest import assert_one_line_error, run_herald, run_installed_herald
from tests.conftest import unique
from tests.ledger.conftest import fields

pytestmark = pytest.mark.ledger

LATER = (datetime.now(UTC) + timedelta(days=31)).isoformat()
CLI_ADMIN = Principal("cli-admin", Role.ADMIN)
"""The principal `herald` acts as in these tests (tests/cli/conftest.py, cli_ledger)."""


def _record(cli_ledger, cipher, *, n: int = 1, **overrides) -> list[str]:  # type: ignore[no-untyped-def]
    keys = [unique("class-opening:c-9081") for _ in range(n)]
    with cli_ledger.sessions.begin() as session:
        for key in keys:
            repo.record_intent(session, fields(session, cipher, key, **overrides))
    return keys


@pytest.mark.parametrize(
    "command",
    [
        ["purge"],
        ["legal-hold"],
        ["reconcile"],
        ["list"],
        ["policy"],
        ["policy", "list"],
        ["policy", "show"],
        ["policy", "activate"],
        ["template"],
        ["template", "list"],
        ["template", "activate"],
        ["template", "import"],
        ["policy", "import"],
        ["template", "versions"],
        ["template", "diff"],
        ["template", "preview"],
        ["template", "approve"],
        ["template", "refuse"],
        ["policy", "diff"],
        ["policy", "approve"],
        ["policy", "refuse"],
    ],
)
def test_every_ledger_command_explains_itself_with_help(herald, command):
    done = herald(*command, "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: herald")


def test_purge_removes_pii_past_its_window_and_a_legal_hold_exempts_an_intent(
    herald, cli_ledger, cipher
):
    held, free = _record(cli_ledger, cipher, n=2)

    hold = herald(
        "legal-hold",
        held,
        "--on",
        "--reason",
        "case 41",
        "--json",
    ).json()
    assert hold["legal_hold"] is True and hold["changed"] is True

    report = herald("purge", "--now", LATER, "--json").json()
    with cli_ledger.sessions() as session:
        by_key = {
            i.business_key: i
            for i in session.execute(
                select(Intent).where(Intent.business_key.in_([held, free]))
            ).scalars()
        }
        action = session.execute(
            select(OperatorAction).where(OperatorAction.intent_id == by_key[held].id)
        ).scalar_one()
        purge_run = (
            session.execute(
                select(AuditEvent)
                .where(AuditEvent.action == "purge.run")
                .order_by(AuditEvent.id.desc())
            )
            .scalars()
            .first()
        )
    assert purge_run is not None and (purge_run.actor, purge_run.actor_role) == (
        "cli-admin",
        "admin",
    )
    assert by_key[free].id in report["intent_ids"]
    assert by_key[held].id not in report["intent_ids"] and report["held"] >= 1
    assert by_key[free].sms_destination_ct is None and by_key[free].pii_purged_at is not None
    assert by_key[held].sms_destination_ct is not None
    assert (action.action, action.operator, action.operator_role, action.reason) == (
        "legal-hold",
        "cli-admin",  # the authenticated principal, never a flag
        "admin",
        "case 41",
    )

    lifted = herald("legal-hold", held, "--off", "--reason", "closed")
    assert lifted.returncode == 0 and "legal hold off" in lifted.stdout
    assert by_key[held].id in herald("purge", "--now", LATER, "--json").json()["intent_ids"]
    text = herald("purge")
    assert text.returncode == 0 and text.stdout.startswith("purged PII of 0 intent(s)")


def test_purge_and_legal_hold_refuse_bad_arguments_on_stderr(herald):
    done = herald("purge", "--now", "yesterday")
    assert done.returncode == 2 and "--now: 'yesterday' is not an ISO 8601 time" in done.stderr
    naive = herald("purge", "--now", "2030-01-01T00:00:00")
    assert naive.returncode == 2 and "needs a timezone" in naive.stderr
    missing = herald("legal-hold", "no-such:key", "--on", "--reason", "r")
    assert missing.returncode == 2
    assert "no intent with id or business key 'no-such:key'" in missing.stderr
    assert "Traceback" not in missing.stderr
    neither = herald("legal-hold", "k:1", "--reason", "r")
    assert neither.returncode == 2 and "--on" in neither.stderr


def test_reconcile_lists_with_ages_and_records_each_review_item_once(herald, cli_ledger, cipher):
    (key,) = _record(cli_ledger, cipher)
    later = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    listed = herald("reconcile", "--now", later, "--json").json()
    mine = [r for r in listed["rows"] if r["business_key"] == key]
    assert [r["kind"] for r in mine] == ["intent_without_attempt"]
    assert 7000 < mine[0]["age_seconds"] < 7300 and listed["recorded_new"] is None

    first = herald("reconcile", "--now", later, "--record", "--json").json()
    second = herald("reconcile", "--now", later, "--record", "--json").json()
    assert first["recorded_new"] >= 1 and second["recorded_new"] == 0
    text = herald("reconcile", "--now", later)
    assert text.returncode == 0 and "intent_without_attempt" in text.stdout and key in text.stdout


def test_list_filters_by_derived_state_channel_and_limit(herald, cli_ledger, cipher):
    keys = _record(cli_ledger, cipher, n=2)
    pending = herald("list", "--state", "pending", "--event-type", "class-opening", "--json")
    # GET /v1/intents's document (IntentPage).
    found = {i["business_key"]: i for i in pending.json()["items"]}
    assert set(keys) <= set(found)
    assert all(i["state"] == "pending" for i in found.values())
    assert [found[k]["channels"] for k in keys] == [["sms"], ["sms"]]

    assert herald("list", "--state", "delivered", "--json").json()["items"] == []
    by_email = herald("list", "--channel", "email", "--json").json()["items"]
    assert not set(keys) & {i["business_key"] for i in by_email}
    assert len(herald("list", "--limit", "1", "--json").json()["items"]) == 1
    since = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert herald("list", "--since", since, "--json").json()["items"] == []
    assert keys[0] in herald("list").stdout

    bad = herald("list", "--state", "happy")
    assert bad.returncode == 2 and "unknown state 'happy'" in bad.stderr


def test_list_filters_the_intents_waiting_for_an_operator(herald, cli_ledger, cipher):
    waiting, working = _record(cli_ledger, cipher, n=2)
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    with cli_ledger.sessions.begin() as session:
        intent = session.execute(select(Intent).where(Intent.business_key == waiting)).scalar_one()
        intent.awaiting, intent.awaiting_until = "resend", until
    found = {
        i["business_key"]: i
        for i in herald("list", "--awaiting", "resend", "--limit", "500", "--json").json()["items"]
    }
    assert waiting in found and working not in found
    assert datetime.fromisoformat(found[waiting]["awaiting_until"]) == until
    assert waiting not in herald("list", "--awaiting", "settlement", "--json").stdout
    bad = herald("list", "--awaiting", "approval")
    assert bad.returncode == 2 and "--awaiting" in bad.stderr


def test_policy_list_show_and_activate(herald):
    versions = {p["version"]: p for p in herald("policy", "list", "--json").json()}
    assert set(versions) == {"2026-12-07.1", "demo-2026-12-07.1"}
    assert [v for v, p in versions.items() if p["active"]] == ["2026-12-07.1"]
    assert versions["2026-12-07.1"]["owner"] == "messaging-compliance@herald.example"
    assert versions["2026-12-07.1"]["effective_from"].startswith("2026-12-01T00:00:00")

    shown = herald("policy", "show", "demo-2026-12-07.1", "--json").json()
    assert 'version = "demo-2026-12-07.1"' in shown["document"]
    assert 'version = "2026-12-07.1"' in herald("policy", "show", "2026-12-07.1").stdout

    try:
        activated = herald("policy", "activate", "demo-2026-12-07.1", "--json").json()
        assert activated["active"] is True
        active = [p["version"] for p in herald("policy", "list", "--json").json() if p["active"]]
        assert active == ["demo-2026-12-07.1"]
    finally:
        assert herald("policy", "activate", "2026-12-07.1").returncode == 0

    missing = herald("policy", "show", "1999.1")
    assert missing.returncode == 2 and "no policy version '1999.1'" in missing.stderr
    assert herald("policy", "activate", "1999.1").returncode == 2


def test_template_activate_rolls_back_to_an_older_version_keeping_history(herald):
    def versions() -> list[dict]:  # type: ignore[type-arg]
        return herald("template", "list", "--key", "order-created", "--json").json()

    before = versions()
    assert {(t["channel"], t["version"]) for t in before} == {
        ("sms", 1),
        ("sms", 2),
        ("email", 1),
        ("email", 2),
    }
    assert {(t["channel"], t["version"]) for t in before if t["active"]} == {
        ("sms", 2),
        ("email", 2),
    }
    try:
        rolled = herald("template", "activate", "order-created", "--version", "1", "--json")
        assert {(t["channel"], t["version"]) for t in rolled.json()} == {("sms", 1), ("email", 1)}
        after = versions()
        assert len(after) == len(before)  # history is untouched
        assert {(t["channel"], t["version"]) for t in after if t["active"]} == {
            ("sms", 1),
            ("email", 1),
        }
        only_sms = herald(
            "template",
            "activate",
            "order-created",
            "--version",
            "2",
            "--channel",
            "sms",
            "--json",
        ).json()
        assert [(t["channel"], t["version"]) for t in only_sms] == [("sms", 2)]
    finally:
        assert herald("template", "activate", "order-created", "--version", "2").returncode == 0
    assert {(t["channel"], t["version"]) for t in versions() if t["active"]} == {
        ("sms", 2),
        ("email", 2),
    }
    listing = herald("template", "list")
    assert listing.returncode == 0 and "order-created" in listing.stdout


def test_template_activate_refuses_unknown_templates_and_versions_on_stderr(herald):
    nope = herald("template", "activate", "nope", "--version", "9")
    assert nope.returncode == 2 and nope.stdout == ""
    assert "herald template: no template 'nope'" in nope.stderr
    assert "Traceback" not in nope.stderr
    no_version = herald("template", "activate", "order-created", "--version", "9")
    assert no_version.returncode == 2
    assert "has no version 9 (known versions: 1, 2)" in no_version.stderr
    not_a_number = herald("template", "activate", "order-created", "--version", "two")
    assert not_a_number.returncode == 2 and "invalid int value" in not_a_number.stderr


def test_an_unreachable_database_is_a_clear_error_not_a_traceback(tmp_path):
    from devstack import free_port

    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/herald"
    done = run_herald("list", "--json", database_url=url, data_dir=tmp_path)
    assert done.returncode == 2
    assert "cannot use the ledger database" in done.stderr and "Traceback" not in done.stderr


def test_list_pages_with_the_cursor_it_prints_and_all_follows_every_page(
    herald, cli_ledger, cipher
):
    since = datetime.now(UTC).isoformat()
    # One transaction each: intents recorded together share their created_at.
    keys = [_record(cli_ledger, cipher)[0] for _ in range(5)]
    newest_first = keys[::-1]
    scope = ("--since", since, "--event-type", "class-opening", "--limit", "2")
    first = herald("list", *scope, "--json").json()
    assert [i["business_key"] for i in first["items"]] == newest_first[:2]
    assert first["previous"] is None and first["next"]
    second = herald("list", *scope, "--cursor", first["next"], "--json").json()
    assert [i["business_key"] for i in second["items"]] == newest_first[2:4]
    back = herald("list", *scope, "--cursor", second["previous"], "--json").json()
    assert [i["business_key"] for i in back["items"]] == newest_first[:2]
    # The table says where the next page starts, as a flag to give back.
    table = herald("list", *scope, "--cursor", first["next"])
    assert f"older: --cursor {second['next']}" in table.stdout
    assert f"newer: --cursor {second['previous']}" in table.stdout
    everything = herald("list", *scope, "--all", "--json").json()
    assert [i["business_key"] for i in everything["items"]] == newest_first
    assert everything["next"] is None

    foreign = herald("list", "--state", "failed", "--cursor", first["next"])
    assert foreign.returncode == 2 and "--cursor: a page cursor of another filter" in foreign.stderr
    assert "Traceback" not in foreign.stderr and len(foreign.stderr.strip().splitlines()) == 1
    garbage = herald("list", "--cursor", "%%%")
    assert garbage.returncode == 2 and "--cursor: not a page cursor" in garbage.stderr


WELCOME = """# an adopter's own catalog
[[template]]
key = "welcome"
version = 1
channel = "sms"
locale = "en"
body = "Welcome {{ first_name }}, {{ lines | length }} lines."

[template.variables]
first_name = "text"
lines = { type = "list", fields = { name = "text", qty = "number" } }
"""


def test_template_import_records_an_adopters_folder_once_and_refuses_a_broken_file_in_one_line(
    cli_ledger, tmp_path
):
    """The installed `herald template import`, as an adopter's CI/CD runs it."""
    settings = {
        "HERALD_DATABASE_URL": cli_ledger.url,
        "HERALD_DATA_DIR": str(cli_ledger.data_dir),
    }
    folder = tmp_path / "templates"
    (folder / "sms").mkdir(parents=True)
    (folder / "sms" / "welcome.toml").write_text(WELCOME)
    done = run_installed_herald(
        "template", "import", str(folder), "--json", settings=settings, cwd=tmp_path
    )
    assert done.json() == {"recorded": ["welcome v1 (sms/en)"], "unchanged": []}
    again = run_installed_herald("template", "import", str(folder), settings=settings, cwd=tmp_path)
    assert again.returncode == 0 and "already recorded as they are" in again.stdout
    shown = run_installed_herald(
        "template", "show", "welcome", "--version", "1", settings=settings, cwd=tmp_path
    )
    assert "variable lines: a list of objects with fields name, qty" in shown.stdout
    inactive = run_installed_herald("template", "show", "welcome", settings=settings, cwd=tmp_path)
    assert "has no active version yet (known versions: 1;" in assert_one_line_error(
        inactive, "template"
    )

    # A second file that uses a variable it does not declare: one line naming file and line,
    # and the good file beside it is not recorded either.
    (folder / "sms" / "welcome.toml").write_text(WELCOME.replace("version = 1", "version = 2"))
    (folder / "zz-broken.toml").write_text(WELCOME.replace("{{ first_name }}", "{{ name }}"))
    broken = run_installed_herald(
        "template", "import", str(folder), settings=settings, cwd=tmp_path
    )
    line = assert_one_line_error(broken, "template")
    assert line.startswith(f"herald template: {folder / 'zz-broken.toml'}:7: ")
    assert "undeclared variable(s) 'name'" in line
    listed = run_installed_herald(
        "template", "list", "--key", "welcome", "--json", settings=settings, cwd=tmp_path
    ).json()
    assert [(t["version"], t["active"], t["author"]) for t in listed] == [(1, False, "cli-admin")]

    # And a policy file with a key Herald does not know.
    import policies

    policy = tmp_path / "strict.toml"
    policy.write_text(
        policies.load_packaged("default").replace("[rules.sms]\n", "[rules.sms]\ncolour = 1\n")
    )
    refused = run_installed_herald("policy", "import", str(policy), settings=settings, cwd=tmp_path)
    line = assert_one_line_error(refused, "policy")
    assert line == f"herald policy: {policy}:41: rules.sms: unknown field 'colour'"


def test_a_template_is_diffed_previewed_approved_by_a_second_principal_and_activated(
    herald, cli_ledger, tmp_path
):
    """The review commands as an operator runs them: every refusal one line, never a
    traceback (an activation refused by review used to print one)."""
    from ledger import principals

    key = unique("welcome")
    catalog = WELCOME.replace('"welcome"', f'"{key}"')
    catalog += catalog.replace("version = 1", "version = 2").replace("Welcome {{", "Hello {{")
    with cli_ledger.sessions.begin() as session:
        # Imported by cli-admin, the principal `herald` acts as here (the import command
        # has its own test above).
        import_templates(session, [ContentFile("welcome.toml", catalog)], by=CLI_ADMIN)
        reviewer = unique("reviewer")
        token = principals.create(
            session, reviewer, Role.OPERATOR, by=principals.BOOTSTRAP_ACTOR, at=datetime.now(UTC)
        ).token

    def as_reviewer(*args: str):  # type: ignore[no-untyped-def]
        return run_herald(
            *args,
            database_url=cli_ledger.url,
            data_dir=cli_ledger.data_dir,
            settings={"HERALD_TOKEN": token},
        )

    diff = herald("template", "diff", key, "1", "2")
    assert f"--- {key} v1 (sms/en)" in diff.stdout
    assert "-Welcome {{ first_name }}" in diff.stdout and "+Hello {{ first_name }}" in diff.stdout

    lines = '[{"name": "Poster", "qty": 2}]'
    shown = as_reviewer(
        "template", "preview", key, "--version", "2", "--var", "first_name=Ada",
        "--var", f"lines={lines}", "--json",
    ).json()  # fmt: skip
    assert shown["text"].startswith("Hello Ada, 1 lines.")
    assert (shown["encoding"], shown["segments"], len(shown["sha256"])) == ("GSM-7", 1, 64)
    sample = tmp_path / "sample.json"
    sample.write_text(json.dumps({"first_name": "Ada", "lines": json.loads(lines)}))
    printed = herald("template", "preview", key, "--version", "1", "--vars-file", str(sample))
    assert printed.stdout.splitlines() == [
        f"template {key!r} v1 (sms/en), rendered with the sample variables; nothing sent",
        "encoding: GSM-7, 1 segment(s)",
        f"content hash: {content_sha256('Welcome Ada, 1 lines.')}",
        "| Welcome Ada, 1 lines.",
    ]

    sample.write_text('{"first_name": "Ada", "lines": ["Poster"]}')
    wrong = herald("template", "preview", key, "--version", "2", "--vars-file", str(sample))
    assert assert_one_line_error(wrong, "template") == (
        f"herald template: template {key!r}: variable 'lines' must be a list of objects "
        "with fields name, qty; item 0 is text"
    )
    assert "Poster" not in wrong.stderr

    own = herald("template", "approve", key, "2")
    assert assert_one_line_error(own, "template").endswith(
        "was recorded by cli-admin: its author cannot approve it, a second principal must"
    )
    approved = as_reviewer("template", "approve", key, "2")
    assert approved.stdout.strip() == f"template {key!r} v2 (sms/en) approved by {reviewer}"
    unfit = as_reviewer("template", "refuse", key, "1", "--reason", "call +447400000142")
    assert assert_one_line_error(unfit, "template").startswith(
        "herald template: --reason holds a phone number (rule reason.no_contact_data)"
    )
    assert "7400000142" not in unfit.stderr
    refused = as_reviewer("template", "refuse", key, "1", "--reason", "typo")
    assert refused.returncode == 0, refused.stderr
    blocked = as_reviewer("template", "activate", key, "1")
    assert assert_one_line_error(blocked, "template").endswith(
        f"was refused by {reviewer}; it never becomes active"
    )
    live = as_reviewer("template", "activate", key, "2", "--json").json()
    assert [(t["version"], t["active"], t["approved_by"]) for t in live] == [(2, True, reviewer)]
    versions = herald("template", "versions", key, "--json").json()
    assert [(t["version"], t["author"], t["refused_by"]) for t in versions] == [
        (1, "cli-admin", reviewer),
        (2, "cli-admin", None),
    ]
    with cli_ledger.sessions() as session:
        trail = session.execute(
            select(AuditEvent.action, AuditEvent.actor)
            .where(AuditEvent.subject.in_([f"{key}@v1", f"{key}@v2"]))
            .order_by(AuditEvent.id)
        ).all()
    assert [tuple(t) for t in trail if t[0] != "template.import"] == [
        ("template.preview", reviewer),
        ("template.preview", "cli-admin"),  # a refused preview is not one: nothing shown
        ("template.approve", reviewer),
        ("template.refuse", reviewer),
        ("template.activate", reviewer),  # once: the activation records it, the CLI no more
    ]


def test_a_policy_version_is_diffed_and_refused_and_not_activated_unapproved(herald, cli_ledger):
    import policies

    version = unique("2099-03-01")
    text = policies.load_packaged("default").replace('"2026-12-07.1"', f'"{version}"')
    with cli_ledger.sessions.begin() as session:
        import_policies(session, [ContentFile("strict.toml", text)], by=CLI_ADMIN)
    diff = herald("policy", "diff", "2026-12-07.1", version)
    assert f'+version = "{version}"' in diff.stdout
    # Policies are reviewed by default: the author is refused, and so is the activation.
    assert "its author cannot approve it" in assert_one_line_error(
        herald("policy", "approve", version), "policy"
    )
    assert "is not approved: [review] policies of policy 2026-12-07.1" in assert_one_line_error(
        herald("policy", "activate", version), "policy"
    )
    missing = herald("policy", "diff", "1999.1", version)
    assert assert_one_line_error(missing, "policy") == (
        "herald policy: no policy version '1999.1' (see `herald policy list`)"
    )
