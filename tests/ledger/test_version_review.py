"""Review before activation in the ledger: approvals by a second principal, activations
refused until then, and an audit event for every step (approve, refuse, activate,
roll back, preview)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

import policies
import templates as packaged_templates
from domain import policy as domain_policy
from domain.principals import Principal, Role
from domain.review import SYSTEM, ReviewRefused
from domain.templates import TemplateVersion
from ledger.errors import NotFound
from ledger.models import AuditEvent, PolicyVersion, TemplateVersionRow
from ledger.templates import activate_policy, activate_template, seed_policy, seed_templates
from ledger.version_review import (
    approve_policy_version,
    approve_template_version,
    policy_diff,
    preview_template,
    record_preview,
    refuse_policy_version,
    refuse_template_version,
    template_diff,
)
from tests.conftest import until

pytestmark = pytest.mark.ledger

ALICE = Principal("alice", Role.ADMIN)
BOB = Principal("bob", Role.ADMIN)
NOW = datetime(2026, 12, 8, 1, 0, tzinfo=UTC)


def _policy(name: str, review: str = "") -> str:
    """The packaged default under a version of the test's own, with a `[review]` table."""
    version = f"{name}-{uuid.uuid4().hex[:8]}"
    document = policies.load_packaged("default").replace(
        'version = "2026-12-07.1"', f'version = "{version}"'
    )
    return document + (f"\n[review]\n{review}\n" if review else "")


def _reviewing(db: Session, key: str) -> str:
    """Make a policy that reviews template `key` the active one (Herald's own seed)."""
    return seed_policy(db, _policy("review", f'templates = ["{key}"]'), name="t", activate=True)


def _versions(key: str, *numbers: int) -> list[TemplateVersion]:
    return [TemplateVersion(key, n, "sms", "en", f"v{n} {{{{ order_id }}}}") for n in numbers]


def _active(db: Session, key: str) -> int:
    return db.execute(
        select(TemplateVersionRow.version).where(
            TemplateVersionRow.key == key, TemplateVersionRow.active.is_(True)
        )
    ).scalar_one()


def _audit(db: Session, subject: str) -> list[tuple[str, str]]:
    return [
        (row.action, row.actor)
        for row in db.execute(
            select(AuditEvent).where(AuditEvent.subject == subject).order_by(AuditEvent.id)
        ).scalars()
    ]


def test_packaged_versions_are_on_record_approved_by_the_system_principal(db) -> None:  # type: ignore[no-untyped-def]
    # The shared ledger also holds versions other tests imported: only the packaged ones.
    keys = {tv.key for tv in packaged_templates.load_packaged()}
    rows = db.execute(
        select(TemplateVersionRow.approved_by, TemplateVersionRow.author).where(
            TemplateVersionRow.key.in_(keys)
        )
    ).all()
    assert rows and set(rows) == {(SYSTEM, None)}
    versions = {
        domain_policy.load_policy(policies.load_packaged(name)).version
        for name in policies.packaged_names()
    }
    approved = db.execute(
        select(PolicyVersion.approved_by).where(PolicyVersion.version.in_(versions))
    ).scalars()
    assert set(approved) == {SYSTEM}


def test_an_imported_template_version_under_review_waits_for_a_second_principal(db) -> None:  # type: ignore[no-untyped-def]
    key = f"reviewed-{uuid.uuid4().hex[:8]}"
    seed_templates(db, _versions(key, 1))
    policy = _reviewing(db, key)
    seed_templates(db, _versions(key, 2), author="alice")

    with pytest.raises(ReviewRefused) as refused:
        activate_template(db, key, 2, by=BOB, at=NOW)
    assert "template" in str(refused.value) and "v2 (sms/en) is not approved" in str(refused.value)
    assert f"[review] templates of policy {policy}" in str(refused.value)
    assert "(alice)" in str(refused.value)
    assert _active(db, key) == 1

    with pytest.raises(ReviewRefused, match="its author cannot approve"):
        approve_template_version(db, key, 2, by=ALICE, at=NOW)
    approve_template_version(db, key, 2, by=BOB, at=NOW)
    approve_template_version(db, key, 2, by=BOB, at=NOW)  # the same approver: no-op
    activate_template(db, key, 2, by=ALICE, at=NOW)
    assert _active(db, key) == 2
    activate_template(db, key, 1, by=ALICE, at=NOW)  # the rollback: v1 was approved
    assert _active(db, key) == 1

    assert _audit(db, f"{key}@v2") == [
        ("template.approve", "bob"),
        ("template.activate", "alice"),
    ]
    assert _audit(db, f"{key}@v1") == [("template.rollback", "alice")]


def test_a_new_key_under_review_is_imported_inactive_and_unknown_versions_are_not_found(db) -> None:  # type: ignore[no-untyped-def]
    key = f"fresh-{uuid.uuid4().hex[:8]}"
    _reviewing(db, key)
    seed_templates(db, _versions(key, 1), author="alice")
    assert (
        db.execute(
            select(TemplateVersionRow.active).where(TemplateVersionRow.key == key)
        ).scalar_one()
        is False
    )
    with pytest.raises(NotFound, match="has no version 9"):
        approve_template_version(db, key, 9, by=BOB, at=NOW)


def test_a_refused_version_never_becomes_active_even_where_no_review_applies(db) -> None:  # type: ignore[no-untyped-def]
    key = f"refused-{uuid.uuid4().hex[:8]}"
    seed_templates(db, _versions(key, 1))
    seed_templates(db, _versions(key, 2), author="alice")  # the key is not under review
    refuse_template_version(db, key, 2, by=BOB, at=NOW, reason="wrong tone")
    with pytest.raises(ReviewRefused, match="refused by bob"):
        activate_template(db, key, 2, by=ALICE, at=NOW)
    with pytest.raises(ReviewRefused, match="already refused by bob"):
        approve_template_version(db, key, 2, by=Principal("carol", Role.ADMIN), at=NOW)
    event = db.execute(select(AuditEvent).where(AuditEvent.subject == f"{key}@v2")).scalar_one()
    assert (event.action, event.detail["reason"]) == ("template.refuse", "wrong tone")


def test_an_unreviewed_template_key_activates_an_authors_version_as_before(db) -> None:  # type: ignore[no-untyped-def]
    key = f"free-{uuid.uuid4().hex[:8]}"
    seed_templates(db, _versions(key, 1))
    seed_templates(db, _versions(key, 2), author="alice")
    activate_template(db, key, 2)
    assert _active(db, key) == 2


def test_a_policy_version_needs_a_second_principal_by_default(db) -> None:  # type: ignore[no-untyped-def]
    before = db.execute(select(PolicyVersion).where(PolicyVersion.active.is_(True))).scalar_one()
    version = seed_policy(db, _policy("imported"), name="imported", activate=False, author="alice")
    with pytest.raises(ReviewRefused) as refused:
        activate_policy(db, version, by=ALICE, at=NOW)
    assert f"[review] policies of policy {before.version}" in str(refused.value)
    with pytest.raises(ReviewRefused, match="its author cannot approve"):
        approve_policy_version(db, version, by=ALICE, at=NOW)
    with pytest.raises(NotFound):
        approve_policy_version(db, "no-such-version", by=BOB, at=NOW)
    approve_policy_version(db, version, by=BOB, at=NOW)
    approve_policy_version(db, version, by=BOB, at=NOW)
    activate_policy(db, version, by=ALICE, at=NOW)
    assert _audit(db, version) == [("policy.approve", "bob"), ("policy.activate", "alice")]
    activate_policy(db, before.version)  # back to where the session's other tests expect


def test_a_refused_policy_version_never_becomes_active(db) -> None:  # type: ignore[no-untyped-def]
    version = seed_policy(db, _policy("refused"), name="refused", activate=False, author="alice")
    refuse_policy_version(db, version, by=BOB, at=NOW, reason="quiet hours too short")
    with pytest.raises(ReviewRefused, match="refused by bob"):
        activate_policy(db, version)


def test_a_preview_is_an_audit_event_naming_who_and_which_version_and_no_values(db) -> None:  # type: ignore[no-untyped-def]
    record_preview(
        db, by=BOB, at=NOW, key="order-created", version=2, channel="sms", locale="en",
        content_sha256="ab" * 32,
    )  # fmt: skip
    event = db.execute(
        # Only this test's: API tests commit previews of their own to the shared ledger.
        select(AuditEvent).where(
            AuditEvent.action == "template.preview", AuditEvent.actor == BOB.name
        )
    ).scalar_one()
    assert (event.actor, event.subject) == ("bob", "order-created@v2")
    assert event.detail == {"channel": "sms", "locale": "en", "sha256": "ab" * 32}


def test_a_preview_renders_with_the_active_policys_footer_and_records_no_values(db) -> None:  # type: ignore[no-untyped-def]
    variables = {"order_id": "o-secret-77"}
    shown = preview_template(
        db, "order-created", 1, channel="sms", locale="en", variables=variables,
        region="US", category="promotional", by=BOB, at=NOW,
    )  # fmt: skip
    assert shown.text == "Herald: order o-secret-77 is confirmed.\nReply STOP to opt out."
    event = db.execute(
        # Only this test's: API tests commit previews of their own to the shared ledger.
        select(AuditEvent).where(
            AuditEvent.action == "template.preview", AuditEvent.actor == BOB.name
        )
    ).scalar_one()
    assert event.detail == {"channel": "sms", "locale": "en", "sha256": shown.sha256}
    assert "o-secret-77" not in str(event.detail) + event.subject
    with pytest.raises(NotFound):
        preview_template(
            db, "order-created", 9, channel="sms", locale="en", variables=variables,
            region="US", category="promotional", by=BOB, at=NOW,
        )  # fmt: skip


def test_diffs_read_the_versions_on_record(db) -> None:  # type: ignore[no-untyped-def]
    diffs = template_diff(db, "order-created", 1, 2)
    assert {("sms", "en"), ("email", "en")} <= set(diffs)
    assert "+Herald: order {{ order_id }} is confirmed ({{ total }})." in diffs[("sms", "en")]
    with pytest.raises(NotFound):
        template_diff(db, "order-created", 8, 9)
    version = seed_policy(db, _policy("diffed"), name="diffed", activate=False)
    assert f'+version = "{version}"' in policy_diff(db, "2026-12-07.1", version)
    with pytest.raises(NotFound):
        policy_diff(db, "2026-12-07.1", "no-such-version")


async def test_two_reviewers_at_once_give_one_verdict_and_the_second_is_told_whose(
    committed,
) -> None:  # type: ignore[no-untyped-def]
    key = f"raced-{uuid.uuid4().hex[:8]}"
    with committed.begin() as session:
        seed_templates(session, _versions(key, 1), author="alice")
    first = committed()
    first.begin()
    approve_template_version(first, key, 1, by=BOB, at=NOW)  # not committed yet

    def second() -> None:
        with committed.begin() as session:
            approve_template_version(session, key, 1, by=Principal("carol", Role.ADMIN), at=NOW)

    racing = asyncio.create_task(asyncio.to_thread(second))

    async def waiting() -> bool:
        with committed() as session:
            return bool(
                session.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND query LIKE '%template_version%'"
                    )
                ).scalar_one()
            )

    await until(waiting, what="the second reviewer waiting for the first")
    first.commit()
    first.close()
    with pytest.raises(ReviewRefused, match="already approved by bob"):
        await racing
    with committed() as session:
        assert _audit(session, f"{key}@v1") == [("template.approve", "bob")]
