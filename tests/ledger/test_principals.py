"""Principals in the real ledger: the token is only hashed, a revoke or a rotation is
seen by the next lookup, last-used is throttled, and the bootstrap happens once."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, select

from domain.principals import Principal, Role
from ledger import principals
from ledger.models import AuditEvent, PrincipalRecord

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
    with pytest.raises(principals.PrincipalRevoked):
        principals.rotate(db, name, by=ADMIN, at=NOW)
    with pytest.raises(principals.PrincipalExists):
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
