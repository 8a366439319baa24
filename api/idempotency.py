"""`Idempotency-Key` for POST /v1/intents, as the IETF draft "The Idempotency-Key HTTP
Header Field" describes it, kept in the ledger's `idempotency_record` table.

- The first request with a key inserts its record with `status_code` NULL in a transaction
  of its own, committed *before* any work starts, so a concurrent duplicate (another
  process too) finds it and gets 409 instead of running the work a second time.
- When the work finishes, the status and body are stored; the same key with the same
  request replays them; the same key with another request is 422.
- A request that never started its work (validation failed) releases the key, so the
  client can correct the body and retry with the same key (what Stripe does).
- Keys are kept for :data:`RETENTION` (24 h). A record found past it is replaced on
  lookup; the retention purge (`herald purge`, the hourly `herald-purge` schedule)
  deletes the rest by the database's clock (`ledger.retention.expire_idempotency_keys`).
- An in-flight record older than :data:`IN_FLIGHT_LEASE` belongs to a process that died
  mid-request; a retry with the same request takes it over. That is safe because the work
  itself (recording an intent by business key) is idempotent.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session, sessionmaker

from ledger.models import IdempotencyRecord
from ledger.retention import IDEMPOTENCY_RETENTION
from ledger.transactions import rows_changed

RETENTION = IDEMPOTENCY_RETENTION
IN_FLIGHT_LEASE = timedelta(seconds=60)
MAX_KEY_LENGTH = 200


class InvalidIdempotencyKey(ValueError):
    """An `Idempotency-Key` header that is empty, too long or not printable ASCII (the
    business key's own refusal is domain.keys.InvalidKey)."""


KEY_PATTERN = r"^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$"
"""What the OpenAPI document declares for the header: printable ASCII, not blank, at most
:data:`MAX_KEY_LENGTH` characters as sent (quotes included)."""
_KEY = re.compile(KEY_PATTERN)


def parse_key(header: str) -> str:
    """The key from the header: a Structured Field string (`"abc"`) or a bare token.

    The header as sent is checked against :data:`KEY_PATTERN` and the length limit; a
    quoted non-empty string is then unquoted (`""` stays a two-character key)."""
    if not header:
        raise InvalidIdempotencyKey("Idempotency-Key must not be empty")
    if len(header) > MAX_KEY_LENGTH:
        raise InvalidIdempotencyKey(f"Idempotency-Key longer than {MAX_KEY_LENGTH} characters")
    if not _KEY.match(header):
        raise InvalidIdempotencyKey(
            "Idempotency-Key must be printable ASCII, without leading or trailing blanks"
        )
    if len(header) > 2 and header[0] == header[-1] == '"':
        return header[1:-1]
    return header


def fingerprint(method: str, path: str, body: Any, *, by: str) -> str:
    """What "the same request" means: method, path, the canonical JSON body, and who sent
    it. A key another principal used is not a replay of its answer (that answer names an
    intent this one may not read): it is the 422 of a key used for another request."""
    doc = json.dumps(
        {"method": method, "path": path, "body": body, "by": by},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(doc.encode()).hexdigest()


@dataclass(frozen=True)
class Claim:
    kind: Literal["new", "replay", "in_flight", "mismatch"]
    status_code: int | None = None
    response: dict[str, Any] | None = None


class IdempotencyStore:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        retention: timedelta = RETENTION,
        lease: timedelta = IN_FLIGHT_LEASE,
    ) -> None:
        self._sessions = sessions
        self.retention = retention
        self.lease = lease

    def claim(self, key: str, request_sha256: str) -> Claim:
        """Insert the in-flight record (committed on return), or say what is there."""
        # Database time throughout: `created_at` is set by the server, and processes'
        # clocks may disagree.
        with self._sessions.begin() as session:
            session.execute(
                delete(IdempotencyRecord).where(
                    IdempotencyRecord.key == key,
                    IdempotencyRecord.status_code.is_not(None),
                    IdempotencyRecord.created_at < func.now() - self.retention,
                )
            )
            inserted = session.execute(
                pg_insert(IdempotencyRecord)
                .values(key=key, request_sha256=request_sha256, status_code=None, response=None)
                .on_conflict_do_nothing(index_elements=["key"])
                .returning(IdempotencyRecord.key)
            ).scalar_one_or_none()
            if inserted is not None:
                return Claim("new")
            row = session.execute(
                select(IdempotencyRecord).where(IdempotencyRecord.key == key)
            ).scalar_one_or_none()
            if row is None:  # released between our insert and our read: the client may retry
                return Claim("in_flight")
            if row.request_sha256 != request_sha256:
                return Claim("mismatch")
            if row.status_code is not None:
                return Claim("replay", row.status_code, row.response)
            taken = rows_changed(
                session.execute(
                    update(IdempotencyRecord)
                    .where(
                        IdempotencyRecord.key == key,
                        IdempotencyRecord.status_code.is_(None),
                        IdempotencyRecord.created_at < func.now() - self.lease,
                    )
                    .values(created_at=func.now())
                )
            )
            return Claim("new") if taken == 1 else Claim("in_flight")

    def complete(self, key: str, status_code: int, response: dict[str, Any]) -> None:
        with self._sessions.begin() as session:
            session.execute(
                update(IdempotencyRecord)
                .where(IdempotencyRecord.key == key, IdempotencyRecord.status_code.is_(None))
                .values(status_code=status_code, response=response)
            )

    def release(self, key: str) -> None:
        with self._sessions.begin() as session:
            session.execute(
                delete(IdempotencyRecord).where(
                    IdempotencyRecord.key == key, IdempotencyRecord.status_code.is_(None)
                )
            )
