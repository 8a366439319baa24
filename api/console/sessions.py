"""Console sign-in: who may sign in (the principals seam), the session cookie and CSRF.

The cookie carries 32 random bytes; the ledger keeps only their SHA-256 beside the
principal's name and role, the session's CSRF token and when it was last used, so a
session ends on sign-out, after `IDLE_LIMIT` without use or `LIFETIME` after sign-in
(HERALD_CONSOLE_SESSION_HOURS), and any API process can check it.

Only a person's requests are use: a page's own refresh says so (the `REFRESH_HEADER`)
and leaves the idle clock alone, so an unattended tab on an open intent ends like any
other.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from domain.principals import BREAK_GLASS_NAME, Access, Principal, Role
from ledger.models import ConsoleSession, PrincipalRecord
from ledger.principals import hashes_to, token_hash

COOKIE = "herald_console"
IDLE_LIMIT = timedelta(minutes=30)
"""A session unused this long is over; the next request goes to the sign-in page."""
LIFETIME = timedelta(hours=12)
"""A session this old is over, used or not (the default of HERALD_CONSOLE_SESSION_HOURS)."""
REFRESH_HEADER = "X-Herald-Refresh"
"""Sent by the page's own refresh (console.js): such a request is not a person's use."""
SEEN_EVERY = timedelta(seconds=30)
"""`last_seen_at` is written at most this often (every page would otherwise write)."""


@dataclass(frozen=True)
class SignedIn:
    principal: Principal
    csrf_token: str

    @property
    def may_act(self) -> bool:
        """Cancel, approve a resend, resolve a review item, grant or revoke consent, lift a
        suppression, reveal a destination: the operator's rights (ledger principals)."""
        return self.principal.may(Access.OPERATE)


def may_sign_in(principal: Principal) -> bool:
    """The console shows evidence and reconciliation sets: viewers and up, not apps."""
    return principal.may(Access.READ_EVIDENCE)


def start(session: Session, principal: Principal, token: str, now: datetime) -> tuple[str, str]:
    """A new session for `principal`, who signed in with `token`: (cookie value, CSRF
    token). Only the token's hash is kept, to end the session when the token changes."""
    value = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(32)
    session.add(
        ConsoleSession(
            id_sha256=token_hash(value),
            principal=principal.name,
            role=principal.role.value,
            csrf_token=csrf,
            credential_sha256=token_hash(token),
            created_at=now,
            last_seen_at=now,
        )
    )
    return value, csrf


def resume(
    session: Session,
    value: str | None,
    now: datetime,
    *,
    break_glass: Callable[[str], bool],
    used: bool = True,
    lifetime: timedelta = LIFETIME,
) -> SignedIn | None:
    """The live session the cookie names, its idle clock restarted when `used` (a person's
    request, not a page's refresh); None when there is none (no cookie, signed out, idle
    longer than IDLE_LIMIT, older than `lifetime`, or the token it was opened with is no
    longer the principal's: revoked or rotated; `break_glass` says whether a hash is that
    of today's HERALD_OPERATOR_TOKEN)."""
    if not value:
        return None
    row = session.get(ConsoleSession, token_hash(value))
    if row is None or row.ended_at is not None or now - row.last_seen_at > IDLE_LIMIT:
        return None
    if now - row.created_at > lifetime:
        row.ended_at = now
        return None
    role = Role(row.role)
    if row.principal == BREAK_GLASS_NAME:
        if not break_glass(row.credential_sha256):
            row.ended_at = now
            return None
    else:
        # A revoke, a rotate (a leaked token's usual answer) or a role change takes effect
        # on the session's next request.
        record = session.execute(
            select(PrincipalRecord).where(PrincipalRecord.name == row.principal)
        ).scalar_one_or_none()
        if (
            record is None
            or record.revoked_at is not None
            or not hashes_to(row.credential_sha256, record.token_sha256)
        ):
            row.ended_at = now
            return None
        role = Role(record.role)
    if used and now - row.last_seen_at > SEEN_EVERY:
        row.last_seen_at = now
    return SignedIn(Principal(row.principal, role), row.csrf_token)


def end(session: Session, value: str, now: datetime) -> None:
    session.execute(
        update(ConsoleSession)
        .where(ConsoleSession.id_sha256 == token_hash(value), ConsoleSession.ended_at.is_(None))
        .values(ended_at=now)
    )


def csrf_ok(expected: str, sent: str | None) -> bool:
    return bool(sent) and hmac.compare_digest(expected.encode(), (sent or "").encode())


def now() -> datetime:
    return datetime.now(UTC)
