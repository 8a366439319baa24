"""Principals in the real ledger: the token is only hashed, a revoke or a rotation is
seen by the next lookup, last-used is throttled, and the bootstrap happens once."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, delete, select, text, update
from sqlalchemy.orm import Session

from domain.principals import Principal, Role
from ledger import migrate, principals
from ledger.errors import LastAdmin, PrincipalExists, PrincipalRevoked
from ledger.models import AuditEvent, PrincipalRecord
from tests.conftest import fresh_database

pytestmark = pytest.mark.ledger

ADMIN = Principal("test-admin", Role.ADMIN)
NOW = datetime(2026, 12, 6, 20, 0, tzinfo=UTC)


def _name() -> str:
    return f"p-{uuid.uuid4().hex[:10]}"


def test_a_token_is_stored_only_as_its_hash_and_finds_its_principal(db):
    name = _name()
    issued = principals.create(db, name, Role.OPERATOR, by=ADMIN, at=NOW)
    row = db.execute(select(PrincipalRecord).where(PrincipalRecord.name == name)).scalar_one()
    assert issued.token not in (row.token_sha256, row.name, row.created_by)
    assert row.token_sha256 == principals.token_hash(issued.token)
    assert principals.authenticate(db, issued.token, at=NOW) == Principal(name, Role.OPERATOR)
    assert principals.authenticate(db, issued.token + "x", at=NOW) is None
    assert principals.authenticate_name(db, name, issued.token, at=NOW) == issued.principal
    assert principals.authenticate_name(db, name, "wrong", at=NOW) is None
    assert principals.authenticate_name(db, "nobody-" + name, issued.token, at=NOW) is None


def test_revoke_and_rotate_take_effect_on_the_next_lookup(db):
    name = _name()
    first = principals.create(db, name, Role.VIEWER, by=ADMIN, at=NOW)
    second = principals.rotate(db, name, by=ADMIN, at=NOW)
    assert principals.authenticate(db, first.token, at=NOW) is None
    assert principals.authenticate(db, second.token, at=NOW) is not None
    principals.revoke(db, name, by=ADMIN, at=NOW)
    assert principals.authenticate(db, second.token, at=NOW) is None
    assert principals.authenticate_name(db, name, second.token, at=NOW) is None
    with pytest.raises(PrincipalRevoked):
        principals.rotate(db, name, by=ADMIN, at=NOW)
    with pytest.raises(PrincipalExists):
        principals.create(db, name, Role.VIEWER, by=ADMIN, at=NOW)
    actions = db.execute(
        select(AuditEvent.action).where(AuditEvent.subject == name).order_by(AuditEvent.id)
    ).scalars()
    assert list(actions) == ["principal.added", "principal.rotated", "principal.revoked"]


def test_last_used_is_written_at_most_once_a_minute(db):
    name = _name()
    issued = principals.create(db, name, Role.APP, by=ADMIN, at=NOW)

    def last_used() -> datetime | None:
        db.expire_all()
        return next(v.last_used_at for v in principals.list_principals(db) if v.name == name)

    assert last_used() is None
    principals.authenticate(db, issued.token, at=NOW)
    assert last_used() == NOW
    principals.authenticate(db, issued.token, at=NOW + timedelta(seconds=30))
    assert last_used() == NOW
    principals.authenticate(db, issued.token, at=NOW + timedelta(minutes=2))
    assert last_used() == NOW + timedelta(minutes=2)


def test_the_bootstrap_admin_is_made_once_on_a_ledger_without_principals(db):
    db.execute(delete(PrincipalRecord))  # rolled back with the test
    first = principals.bootstrap_admin(db, "ana", at=NOW)
    assert first is not None and first.principal == Principal("ana", Role.ADMIN)
    assert principals.bootstrap_admin(db, "ana", at=NOW) is None
    assert principals.count_live(db) == 1


def test_the_last_live_admin_cannot_be_revoked_and_nothing_changes(db):
    # Alone in this (rolled-back) ledger: the other tests' admins are revoked here.
    db.execute(
        update(PrincipalRecord)
        .where(PrincipalRecord.role == "admin", PrincipalRecord.revoked_at.is_(None))
        .values(revoked_at=NOW)
    )
    first, second, operator = _name(), _name(), _name()
    principals.create(db, first, Role.ADMIN, by=ADMIN, at=NOW)
    principals.create(db, second, Role.ADMIN, by=ADMIN, at=NOW)
    principals.create(db, operator, Role.OPERATOR, by=ADMIN, at=NOW)
    principals.revoke(db, second, by=ADMIN, at=NOW)
    with pytest.raises(LastAdmin, match="last active admin"):
        principals.revoke(db, first, by=ADMIN, at=NOW)
    row = db.execute(select(PrincipalRecord).where(PrincipalRecord.name == first)).scalar_one()
    assert row.revoked_at is None
    assert principals.audit_events(db, subject=first)[0].action == "principal.added"
    # Rotating the last admin is fine, and so is revoking anyone who is not an admin.
    principals.rotate(db, first, by=ADMIN, at=NOW)
    principals.revoke(db, operator, by=ADMIN, at=NOW)


def _waiting_on_a_lock(engine, application_name: str) -> bool:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name "
                    "AND wait_event_type = 'Lock'"
                ),
                {"name": application_name},
            ).scalar_one()
        )


def test_two_admins_revoking_each_other_at_once_leave_one(pg_url):
    url = fresh_database(pg_url, "herald_last_admin")
    migrate.upgrade(url)
    second_name = f"revoker-{uuid.uuid4().hex[:8]}"
    first_engine = create_engine(url)
    second_engine = create_engine(url, connect_args={"application_name": second_name})
    try:
        with Session(first_engine) as setup, setup.begin():
            principals.create(setup, "ana", Role.ADMIN, by=ADMIN, at=NOW)
            principals.create(setup, "bo", Role.ADMIN, by=ADMIN, at=NOW)
        outcome: dict[str, object] = {}

        def revoke_ana_from_the_second_session() -> None:
            with Session(second_engine) as session, session.begin():
                try:
                    principals.revoke(session, "ana", by=Principal("bo", Role.ADMIN), at=NOW)
                    outcome["ana"] = "revoked"
                except LastAdmin:
                    outcome["ana"] = "refused"

        with Session(first_engine) as first, first.begin():
            principals.revoke(first, "bo", by=Principal("ana", Role.ADMIN), at=NOW)
            second = threading.Thread(target=revoke_ana_from_the_second_session)
            second.start()
            # Commit only once the second revoke has either finished (no lock held it) or
            # is waiting on this transaction's lock: both orders are then decided.
            deadline = time.monotonic() + 20
            while second.is_alive() and not _waiting_on_a_lock(second_engine, second_name):
                assert time.monotonic() < deadline, "the second revoke neither ran nor waited"
                time.sleep(0.02)
        second.join(timeout=20)
        assert outcome == {"ana": "refused"}
        with Session(first_engine) as check:
            live = check.execute(
                select(PrincipalRecord.name).where(PrincipalRecord.revoked_at.is_(None))
            ).scalars()
            assert list(live) == ["ana"]
    finally:
        first_engine.dispose()
        second_engine.dispose()


def test_a_name_that_differs_only_by_case_is_taken(db):
    # `Root` beside `root` would read as one person in every timeline and audit trail.
    name = _name()
    principals.create(db, name, Role.VIEWER, by=ADMIN, at=NOW)
    with pytest.raises(PrincipalExists, match=f"named '{name}' exists"):
        principals.create(db, name.upper(), Role.ADMIN, by=ADMIN, at=NOW)
