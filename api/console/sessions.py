"""Console sign-in: who may sign in (the principals seam), the session cookie and CSRF.

The cookie carries 32 random bytes; the ledger keeps only their SHA-256 beside the
principal's name and role, the session's CSRF token and when it was last used, so a
session ends on sign-out or after `IDLE_LIMIT` without use, and any API process can
check it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from sqlalchemy import update
from sqlalchemy.orm import Session

from ledger.models import ConsoleSession

COOKIE = "herald_console"
IDLE_LIMIT = timedelta(minutes=30)
"""A session unused this long is over; the next request goes to the sign-in page."""
SEEN_EVERY = timedelta(seconds=30)
"""`last_seen_at` is written at most this often (every page would otherwise write)."""


class Role(StrEnum):
    APP = "app"
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"


ACTING_ROLES = (Role.OPERATOR, Role.ADMIN)
"""Who may cancel, approve a resend, resolve a review item, grant or revoke consent, lift
a suppression, and reveal a destination."""
READING_ROLES = (Role.VIEWER, Role.OPERATOR, Role.ADMIN)
"""Who may sign in to the console at all (an app's credential may not)."""


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role

    @property
    def may_act(self) -> bool:
        return self.role in ACTING_ROLES


@dataclass(frozen=True)
class SignedIn:
    principal: Principal
    csrf_token: str


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def authenticate(operator_token: str, name: str, token: str) -> Principal | None:
    """The principal `name` if `token` is its credential.

    Until the ledger's principals (issue 28) land, the one credential is the operator
    token, which signs in as admin under the name given.
    """
    if not name or not hmac.compare_digest(token.encode(), operator_token.encode()):
        return None
    return Principal(name, Role.ADMIN)


def start(session: Session, principal: Principal, now: datetime) -> tuple[str, str]:
    """A new session for `principal`: (cookie value, CSRF token)."""
    value = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(32)
    session.add(
        ConsoleSession(
            id_sha256=_digest(value),
            principal=principal.name,
            role=principal.role.value,
            csrf_token=csrf,
            created_at=now,
            last_seen_at=now,
        )
    )
    return value, csrf


def resume(session: Session, value: str | None, now: datetime) -> SignedIn | None:
    """The live session the cookie names, its idle clock restarted; None when there is
    none (no cookie, signed out, idle too long)."""
    if not value:
        return None
    row = session.get(ConsoleSession, _digest(value))
    if row is None or row.ended_at is not None or now - row.last_seen_at > IDLE_LIMIT:
        return None
    if now - row.last_seen_at > SEEN_EVERY:
        row.last_seen_at = now
    return SignedIn(Principal(row.principal, Role(row.role)), row.csrf_token)


def end(session: Session, value: str, now: datetime) -> None:
    session.execute(
        update(ConsoleSession)
        .where(ConsoleSession.id_sha256 == _digest(value), ConsoleSession.ended_at.is_(None))
        .values(ended_at=now)
    )


def csrf_ok(expected: str, sent: str | None) -> bool:
    return bool(sent) and hmac.compare_digest(expected.encode(), (sent or "").encode())


def now() -> datetime:
    return datetime.now(UTC)
