"""Importing an adopter's template and policy files into the ledger: new versions recorded
with their author, the same content again a no-op, other content under a recorded version
number refused, and an import recorded whole or not at all."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

import policies
import templates
from domain.principals import Principal, Role
from ledger.models import AuditEvent, PolicyVersion, TemplateVersionRow
from ledger.templates import (
    ContentFile,
    ImportRefused,
    import_policies,
    import_templates,
    seed_packaged,
    seed_templates,
)

pytestmark = pytest.mark.ledger

ADMIN = Principal("content-admin", Role.ADMIN)

WELCOME = """
[[template]]
key = "welcome"
version = 1
channel = "sms"
locale = "en"
body = "Welcome {{ first_name }}: {{ lines | length }} lines."

[template.variables]
first_name = "text"
lines = { type = "list", fields = { name = "text", qty = "number" } }
"""


def versions(db: Session, key: str) -> list[tuple[int, str | None, bool]]:
    rows = db.execute(
        select(TemplateVersionRow).where(TemplateVersionRow.key == key).order_by("version")
    ).scalars()
    return [(r.version, r.author, r.active) for r in rows]


def test_an_import_records_new_versions_with_their_author_and_schema_but_activates_none(db):
    done = import_templates(db, [ContentFile("welcome.toml", WELCOME)], by=ADMIN)
    assert done.recorded == ["welcome v1 (sms/en)"] and done.unchanged == []
    assert versions(db, "welcome") == [(1, "content-admin", False)]
    row = db.execute(select(TemplateVersionRow).where(TemplateVersionRow.key == "welcome")).one()[0]
    assert row.variables_schema["required"] == ["first_name", "lines"]
    assert row.created_at is not None
    audit = db.execute(
        select(AuditEvent).where(
            AuditEvent.action == "template.import", AuditEvent.subject == "welcome@v1"
        )
    ).one()[0]
    assert (audit.actor, audit.subject) == ("content-admin", "welcome@v1")


def test_the_same_version_with_the_same_content_is_a_no_op(db):
    import_templates(db, [ContentFile("welcome.toml", WELCOME)], by=ADMIN)
    again = import_templates(db, [ContentFile("welcome.toml", WELCOME)], by=ADMIN)
    assert again.recorded == [] and again.unchanged == ["welcome v1 (sms/en)"]
    assert versions(db, "welcome") == [(1, "content-admin", False)]


@pytest.mark.parametrize(
    "changed",
    [
        WELCOME.replace("Welcome", "Hello"),  # the text
        WELCOME.replace('first_name = "text"', 'first_name = { type = "text", optional = true }'),
    ],
)
def test_the_same_version_number_with_other_content_is_refused_naming_the_line(db, changed):
    import_templates(db, [ContentFile("welcome.toml", WELCOME)], by=ADMIN)
    with pytest.raises(ImportRefused) as refused:
        import_templates(db, [ContentFile("mine/welcome.toml", changed)], by=ADMIN)
    assert str(refused.value).startswith(
        "mine/welcome.toml:2: template welcome v1 (sms/en) is already recorded with other content"
    )


def test_an_import_is_all_or_nothing(db):
    later = WELCOME.replace("version = 1", "version = 2")
    broken = WELCOME.replace('key = "welcome"', 'key = "bye"').replace(
        "{{ first_name }}", "{{ x }}"
    )
    with pytest.raises(ImportRefused, match=r"^b\.toml:7: .*undeclared variable\(s\) 'x'"):
        import_templates(
            db, [ContentFile("a.toml", later), ContentFile("b.toml", broken)], by=ADMIN
        )
    db.flush()
    assert versions(db, "welcome") == [] and versions(db, "bye") == []
    # A conflict after a new version in the same file leaves that one out too.
    import_templates(db, [ContentFile("welcome.toml", WELCOME)], by=ADMIN)
    clash = later + WELCOME.replace("Welcome", "Hi")
    with pytest.raises(ImportRefused, match=r"^c\.toml:13: .* already recorded"):
        import_templates(db, [ContentFile("c.toml", clash)], by=ADMIN)
    db.flush()
    assert versions(db, "welcome") == [(1, "content-admin", False)]


def test_one_version_twice_in_an_import_is_refused(db):
    with pytest.raises(ImportRefused, match=r"^b\.toml:2: .* is also in a\.toml:2"):
        import_templates(
            db, [ContentFile("a.toml", WELCOME), ContentFile("b.toml", WELCOME)], by=ADMIN
        )


def test_the_packaged_seed_refuses_a_packaged_version_edited_in_place(db):
    packaged = templates.load_packaged()
    edited = [
        type(v)(**{**v.__dict__, "body": v.body + "!"}) if v.key == "demo" else v for v in packaged
    ]
    with pytest.raises(ImportRefused, match="template demo v1 .* other content"):
        seed_templates(db, edited)


def test_the_packaged_seed_fills_in_declarations_on_a_ledger_recorded_before_them(db):
    db.execute(
        TemplateVersionRow.__table__.update()
        .where(TemplateVersionRow.key == "demo")
        .values(variables_schema=None)
    )
    seed_packaged(db, "default")  # as `herald migrate` does on an existing ledger
    (schema,) = db.execute(
        select(TemplateVersionRow.variables_schema).where(TemplateVersionRow.key == "demo")
    ).one()
    assert schema["required"] == ["n", "intent_id"]


POLICY = policies.load_packaged("default").replace(
    'version = "2026-12-07.1"', 'version = "2099-01-01.1"'
)


def test_a_policy_import_records_the_version_with_its_author_once(db):
    done = import_policies(db, [ContentFile("policies/strict.toml", POLICY)], by=ADMIN)
    assert done.recorded == ["2099-01-01.1"]
    row = db.get(PolicyVersion, "2099-01-01.1")
    assert (row.name, row.author, row.active) == ("strict", "content-admin", False)
    again = import_policies(db, [ContentFile("policies/strict.toml", POLICY)], by=ADMIN)
    assert again.recorded == [] and again.unchanged == ["2099-01-01.1"]
    with pytest.raises(ImportRefused, match="strict.toml:14: policy version 2099-01-01.1 is"):
        import_policies(db, [ContentFile("strict.toml", POLICY + "\n# edited\n")], by=ADMIN)


@pytest.mark.parametrize(
    ("edit", "line", "reason"),
    [
        (("[rules.sms]\n", "[rules.sms]\ncolour = 1\n"), 41, "unknown field 'colour'"),
        (("min_gap_seconds = 60", "min_gap_seconds = -1"), 33, "min_gap_seconds"),
        (('version = "2099-01-01.1"', "version = "), 14, "not valid TOML"),
    ],
)
def test_a_broken_policy_is_refused_with_its_line_and_nothing_is_recorded(db, edit, line, reason):
    before = db.scalar(select(func.count()).select_from(PolicyVersion))
    text = POLICY.replace(*edit)
    with pytest.raises(ImportRefused) as refused:
        import_policies(db, [ContentFile("p.toml", text)], by=ADMIN)
    assert str(refused.value).startswith(f"p.toml:{line}: "), refused.value
    assert reason in str(refused.value)
    assert db.scalar(select(func.count()).select_from(PolicyVersion)) == before


def test_a_policy_import_of_several_files_is_all_or_nothing(db):
    broken = POLICY.replace("2099-01-01.1", "2099-01-02.1").replace(
        "[rules.sms]\n", "[rules.fax]\n"
    )
    with pytest.raises(ImportRefused, match=r"^b\.toml:40: rules\.fax"):
        import_policies(
            db, [ContentFile("a.toml", POLICY), ContentFile("b.toml", broken)], by=ADMIN
        )
    assert db.get(PolicyVersion, "2099-01-01.1") is None


async def test_two_imports_of_one_new_version_at_once_record_it_once_and_refuse_the_other_cleanly(
    committed,
):
    import asyncio
    import threading

    from sqlalchemy import text as sql

    from tests.conftest import unique, until

    catalog = WELCOME.replace('key = "welcome"', f'key = "{unique("race")}"')
    first = committed()
    first.begin()
    import_templates(first, [ContentFile("a.toml", catalog)], by=ADMIN)  # inserted, uncommitted
    outcome: list[object] = []

    def second() -> None:
        try:
            with committed.begin() as session:  # it checks before the first commits: new
                outcome.append(
                    import_templates(session, [ContentFile("b.toml", catalog)], by=ADMIN)
                )
        except ImportRefused as err:
            outcome.append(err)

    racer = threading.Thread(target=second)
    racer.start()

    async def second_waits_on_the_first() -> bool:
        with committed() as probe:
            return bool(
                probe.scalar(
                    sql(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND query LIKE 'INSERT INTO template_version%'"
                    )
                )
            )

    await until(second_waits_on_the_first, what="the second import waiting on the first")
    first.commit()
    first.close()
    await asyncio.to_thread(racer.join, 30)
    (refused,) = outcome
    assert isinstance(refused, ImportRefused), refused
    assert str(refused).startswith("b.toml: another import recorded the same version")
