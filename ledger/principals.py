"""Principals in the ledger: add, authenticate, list, revoke, rotate, and their audit rows.

A token is 32 random bytes, url-safe, shown once to whoever created it and stored nowhere:
the ledger keeps its SHA-256, and a request's token is looked up by that hash (an index
lookup on a hash reveals nothing about the token through timing; where two hashes are
compared, `hmac.compare_digest` does it). A token of that entropy needs no slow hash.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from domain import key_privacy, keys
from domain.principals import BREAK_GLASS_NAME, Principal, Role, check_name
from ledger.errors import InvalidNamespace, LastAdmin, NotFound, PrincipalExists, PrincipalRevoked
from ledger.models import AuditEvent, PrincipalRecord

TOKEN_BYTES = 32
LAST_USED_RESOLUTION = timedelta(minutes=1)
"""`last_used_at` is written at most this often per principal, so a busy app's requests
do not each write a row."""


@dataclass(frozen=True)
class PrincipalView:
    """What `principals list` shows: never a token or its hash."""

    name: str
    role: str
    namespace: str
    created_by: str
    created_at: datetime
    last_used_at: datetime | None
    rotated_at: datetime | None
    revoked_at: datetime | None


@dataclass(frozen=True)
class IssuedToken:
    """A principal and its new token: the only time the token exists outside its holder."""

    principal: Principal
    token: str


def new_token() -> str:
    """A new random token (shown once; only its hash is kept)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> str:
    """The SHA-256 of a token, in hex: what the ledger stores and looks tokens up by."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def hashes_to(token_sha256: str, expected_sha256: str | None) -> bool:
    """Whether a token hashes to `expected_sha256`, in constant time.

    Whether a token's hash is `expected_sha256` (none expected: never), in constant
    time; how the break-glass HERALD_OPERATOR_TOKEN is checked by the API and the CLI.
    """
    return expected_sha256 is not None and hmac.compare_digest(token_sha256, expected_sha256)


def _view(row: PrincipalRecord) -> PrincipalView:
    return PrincipalView(
        name=row.name,
        role=row.role,
        namespace=row.namespace,
        created_by=row.created_by,
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        rotated_at=row.rotated_at,
        revoked_at=row.revoked_at,
    )


def record_audit(
    session: Session,
    *,
    by: Principal,
    action: str,
    subject: str,
    at: datetime,
    detail: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append an audit row: who did what to which subject, with their role."""
    row = AuditEvent(
        at=at,
        actor=by.name,
        actor_role=by.role.value,
        action=action,
        subject=subject[:240],
        detail=detail,
    )
    session.add(row)
    session.flush()
    return row


RESERVED_NAMESPACES = frozenset({keys.DEFAULT_NAMESPACE, BREAK_GLASS_NAME})
"""Never a principal's namespace: the starter client's default, and break-glass's."""


def check_namespace(namespace: str) -> str:
    """A principal's key namespace, or InvalidNamespace saying why it cannot be one.

    Well formed (domain.keys), no contact data (it enters every workflow id of its keys),
    not one of RESERVED_NAMESPACES.
    """
    try:
        keys.validate_namespace(namespace)
        key_privacy.refuse_contact_data_in_namespace(namespace)
    except keys.InvalidKey as err:
        raise InvalidNamespace(str(err)) from None
    if namespace.lower() in RESERVED_NAMESPACES:
        raise InvalidNamespace(
            f"namespace {namespace!r} is reserved (the starter client's default and "
            "break-glass's): choose another with --namespace"
        )
    return namespace


def create(
    session: Session,
    name: str,
    role: Role,
    *,
    by: Principal,
    at: datetime,
    namespace: str | None = None,
) -> IssuedToken:
    """Add a principal and return its token, once.

    Add a principal; its token is returned once. `namespace` is where the business keys
    it records live (default its name): its own for ever, like its name, so no other
    principal meets its keys. Raises ValueError (a bad name or namespace) or
    PrincipalExists (the name, or the namespace, is taken, whatever its case).
    """
    check_name(name)
    role = Role(role)
    # Names differ by more than case: `Root` beside `root` would read as one person in
    # every timeline and audit trail.
    taken = session.execute(
        select(PrincipalRecord.name).where(func.lower(PrincipalRecord.name) == name.lower())
    ).scalar()
    if taken is not None:
        raise PrincipalExists(
            f"a principal named {taken!r} exists (names are not reused, whatever their case)"
        )
    namespace = check_namespace(name if namespace is None else namespace)
    held = session.execute(
        select(PrincipalRecord.name).where(
            func.lower(PrincipalRecord.namespace) == namespace.lower()
        )
    ).scalar()
    if held is not None:
        raise PrincipalExists(
            f"namespace {namespace!r} belongs to principal {held!r} (a namespace is one "
            "principal's, like its name): choose another with --namespace"
        )
    token = new_token()
    session.add(
        PrincipalRecord(
            name=name,
            role=role.value,
            namespace=namespace,
            token_sha256=token_hash(token),
            created_by=by.name,
            created_at=at,
        )
    )
    record_audit(
        session,
        by=by,
        action="principal.added",
        subject=name,
        at=at,
        detail={"role": role.value, "namespace": namespace},
    )
    return IssuedToken(Principal(name, role, namespace), token)


def authenticate(session: Session, token: str, *, at: datetime) -> Principal | None:
    """The live principal holding `token`, or None.

    The live principal holding `token`, or None (unknown or revoked). Touches its
    `last_used_at` (at most once per LAST_USED_RESOLUTION).
    """
    if not token:
        return None
    row = session.execute(
        select(PrincipalRecord).where(PrincipalRecord.token_sha256 == token_hash(token))
    ).scalar_one_or_none()
    if row is None or row.revoked_at is not None:
        return None
    touch_last_used(session, row.id, at=at)
    return Principal(row.name, Role(row.role), row.namespace)


def authenticate_name(
    session: Session,
    name: str,
    token: str,
    *,
    at: datetime,
    allowed: Callable[[Principal], bool] = lambda _: True,
) -> Principal | None:
    """The live principal `name` if `token` is its token and `allowed` lets it sign in.

    For a sign-in form; else None. A principal refused by `allowed` is refused before
    anything is written (its `last_used_at` stays), on the path a wrong token takes.
    """
    row = session.execute(
        select(PrincipalRecord).where(PrincipalRecord.name == name)
    ).scalar_one_or_none()
    # Hash even when the name is unknown, so both refusals take the same time.
    offered = token_hash(token or "")
    stored = row.token_sha256 if row is not None else token_hash(new_token())
    if not hmac.compare_digest(offered, stored) or row is None or row.revoked_at is not None:
        return None
    principal = Principal(row.name, Role(row.role), row.namespace)
    if not allowed(principal):
        return None
    touch_last_used(session, row.id, at=at)
    return principal


def touch_last_used(session: Session, principal_id: int, *, at: datetime) -> None:
    """Record that a principal was used, at most once per LAST_USED_RESOLUTION."""
    session.execute(
        update(PrincipalRecord)
        .where(
            PrincipalRecord.id == principal_id,
            or_(
                PrincipalRecord.last_used_at.is_(None),
                PrincipalRecord.last_used_at < at - LAST_USED_RESOLUTION,
            ),
        )
        .values(last_used_at=at)
    )


def list_principals(session: Session) -> list[PrincipalView]:
    """Every principal, revoked ones too, by name."""
    rows = session.execute(select(PrincipalRecord).order_by(PrincipalRecord.name)).scalars()
    return [_view(row) for row in rows]


def count_live(session: Session) -> int:
    """How many principals are not revoked."""
    return len(
        session.execute(
            select(PrincipalRecord.id).where(PrincipalRecord.revoked_at.is_(None))
        ).all()
    )


def _live_row(session: Session, name: str) -> PrincipalRecord:
    row = session.execute(
        select(PrincipalRecord).where(PrincipalRecord.name == name).with_for_update()
    ).scalar_one_or_none()
    if row is None:
        said = f"no principal named {name!r}"
        raise NotFound(said, answer=said)
    if row.revoked_at is not None:
        raise PrincipalRevoked(f"principal {name!r} was revoked at {row.revoked_at.isoformat()}")
    return row


def revoke(session: Session, name: str, *, by: Principal, at: datetime) -> PrincipalView:
    """Revoke a principal.

    Revoke `name`: its token is refused from the next request on. Raises NotFound,
    PrincipalRevoked, or LastAdmin when `name` is the last live admin.
    """
    # Every live admin is locked first, in one order, whoever is revoked: two admins
    # revoking each other at once are serialised, and the second sees the first's revoke
    # (Postgres re-reads a locked row it waited for), so one admin always remains.
    live_admins = session.execute(
        select(PrincipalRecord.name)
        .where(PrincipalRecord.role == Role.ADMIN.value, PrincipalRecord.revoked_at.is_(None))
        .order_by(PrincipalRecord.id)
        .with_for_update()
    ).scalars()
    others = [admin for admin in live_admins if admin != name]
    row = _live_row(session, name)
    if row.role == Role.ADMIN.value and not others:
        raise LastAdmin(
            f"{name!r} is the last active admin: add another admin first (`herald principals "
            "add NAME --role admin`), or nobody could manage principals again"
        )
    row.revoked_at = at
    record_audit(
        session, by=by, action="principal.revoked", subject=name, at=at, detail={"role": row.role}
    )
    session.flush()
    return _view(row)


def rotate(session: Session, name: str, *, by: Principal, at: datetime) -> IssuedToken:
    """Give a principal a new token.

    A new token for `name`; the old one stops working at once. Raises NotFound or
    PrincipalRevoked.
    """
    row = _live_row(session, name)
    token = new_token()
    row.token_sha256 = token_hash(token)
    row.rotated_at = at
    record_audit(
        session, by=by, action="principal.rotated", subject=name, at=at, detail={"role": row.role}
    )
    session.flush()
    return IssuedToken(Principal(row.name, Role(row.role), row.namespace), token)


def holds_token(session: Session, name: str, token: str) -> bool:
    """Whether `token` is live principal `name`'s current token (constant-time).

    `herald principals rotate` rewrites the token file when it held the token rotated.
    """
    stored = session.execute(
        select(PrincipalRecord.token_sha256).where(
            PrincipalRecord.name == name, PrincipalRecord.revoked_at.is_(None)
        )
    ).scalar_one_or_none()
    return hashes_to(token_hash(token), stored)


def audit_events(
    session: Session, *, subject: str | None = None, limit: int = 200
) -> list[AuditEvent]:
    """The latest audit rows, newest first (only `subject`'s when given)."""
    query = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)
    if subject is not None:
        query = query.where(AuditEvent.subject == subject)
    return list(session.execute(query).scalars())


BOOTSTRAP_ACTOR = Principal("herald-dev", Role.ADMIN)
"""Who the audit trail says created `herald dev`'s first admin."""


def bootstrap_admin(session: Session, name: str, *, at: datetime) -> IssuedToken | None:
    """Make the first admin of an empty ledger.

    On a ledger with no principal at all, add `name` as an admin and return its token;
    otherwise None (an existing ledger keeps the principals it has).
    """
    # One bootstrap at a time, even from two processes on one ledger.
    session.execute(select(func.pg_advisory_xact_lock(BOOTSTRAP_LOCK)))
    if session.execute(select(PrincipalRecord.id).limit(1)).first() is not None:
        return None
    return create(session, name, Role.ADMIN, by=BOOTSTRAP_ACTOR, at=at)


BOOTSTRAP_LOCK = 0x48455241  # "HERA"
