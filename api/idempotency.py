"""`Idempotency-Key` on every mutating route that opts in, as the IETF draft "The
Idempotency-Key HTTP Header Field" describes it, kept in the ledger's `idempotency_record`
table.

A route opts in with one parameter, `_key: Idempotent`: that declares the request header in
the OpenAPI document, and its route class (`api.auth.GuardedRoute`) then answers through
:func:`answer` once the caller is authenticated (so the key is scoped to the principal
before anything else happens) and declares the `Idempotent-Replayed` response header, the
400 and the 409 on the route (:func:`documented`).

- A key is scoped to its principal: the record is stored under the SHA-256 of the
  principal's name and the key, so one app's key never finds (or blocks) another's.

- The first request with a key inserts its record with `status_code` NULL in a transaction
  of its own, committed *before* any work starts, so a concurrent duplicate (another
  process too) finds it and gets 409 instead of running the work a second time.
- When the work finishes, the status and body are stored; the same key with the same
  request replays them; the same key with another request is 422.
- A request that never finished its work (refused by validation, an unknown intent, a
  raised error, a 5xx) releases the key, so the client can correct the request and retry
  with the same key (what Stripe does). An answer the route returns (2xx, or a refusal
  such as approve-resend's 409) is stored and replayed.
- Keys are kept for :data:`RETENTION` (24 h). A record found past it is replaced on
  lookup; the retention purge (`herald purge`, the hourly `herald-purge` schedule)
  deletes the rest by the database's clock (`ledger.retention.expire_idempotency_keys`).
- An in-flight record older than :data:`IN_FLIGHT_LEASE` belongs to a process that died
  mid-request; a retry with the same request takes it over. Recording an intent by
  business key is itself idempotent; for an operator action the retry does it again (the
  crashed request may or may not have recorded it), which the action's own checks bound
  (a second cancel closes nothing more).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Literal

from fastapi import Depends, Header, HTTPException, Request, Response
from fastapi.dependencies.utils import get_typed_signature
from fastapi.params import Depends as DependsParam
from fastapi.responses import JSONResponse
from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session, sessionmaker

from api.schemas import domain_rule
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
    """What "the same request" means: method, path (the query included), the canonical
    JSON body, and who sent it."""
    doc = json.dumps(
        {"method": method, "path": path, "body": body, "by": by},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(doc.encode()).hexdigest()


def scoped(key: str, *, by: str) -> str:
    """The record's key: the client's key within its principal's own namespace (a SHA-256,
    so any key of any principal fits the column)."""
    return hashlib.sha256(json.dumps([by, key]).encode()).hexdigest()


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


# --- the routes' side -------------------------------------------------------------------

NOTE = (
    "Idempotency-Key-Retention: 24 h. The same key with the same request replays the "
    "stored status and body (with `Idempotent-Replayed: true`); the same key with another "
    "body or on another route is 422; a retry while the first request is still running is "
    "409 with `Retry-After`. A request refused (validation, an unknown intent) stores "
    "nothing, so the key may be reused with a corrected request. Keys are per principal."
)
REPLAYED_HEADER = "Idempotent-Replayed"
KEPT_HEADERS = ("Location",)
"""Headers of a stored answer that a replay repeats (besides the body and status)."""


async def key_header(
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="Optional. "
            + NOTE
            + " "
            + domain_rule(
                "idempotency_key.same_request",
                "a key already used by this principal names that one request "
                "(422 `idempotency_key_reused`).",
            ),
            # Declared, and checked by `parse_key` (400, not 422).
            json_schema_extra={
                "minLength": 1,
                "maxLength": MAX_KEY_LENGTH,
                "pattern": KEY_PATTERN,
            },
        ),
    ] = None,
) -> str | None:
    """The header as sent; :func:`answer` acts on it (this only declares it)."""
    return idempotency_key


Idempotent = Annotated[str | None, Depends(key_header)]
"""A route's parameter of this type opts it into `Idempotency-Key` (one line)."""


def opted_in(endpoint: Any) -> bool:
    """Whether a route's function takes an :data:`Idempotent` parameter."""
    for parameter in get_typed_signature(endpoint).parameters.values():
        for meta in getattr(parameter.annotation, "__metadata__", ()):
            if isinstance(meta, DependsParam) and meta.dependency is key_header:
                return True
    return False


_REPLAYED = {
    REPLAYED_HEADER: {
        "description": "`true` when this answer is the stored one of an earlier request "
        "with the same Idempotency-Key.",
        "schema": {"type": "string", "enum": ["true"]},
    }
}


def documented(
    responses: dict[int | str, dict[str, Any]], status_code: int | None, problem: type
) -> dict[int | str, dict[str, Any]]:
    """`responses` of an opted-in route with what the key adds: `Idempotent-Replayed` on
    the answers a replay may repeat, the 400 of a malformed key, the 409 of a key in
    flight (with `Retry-After`) and the 422 of a key used for another request."""
    out = {code: {**doc} for code, doc in responses.items()}
    for code in {status_code or 200, *(c for c in out if str(c) in ("200", "201", "409"))}:
        entry = out.setdefault(code, {})
        entry["headers"] = {**entry.get("headers", {}), **_REPLAYED}

    def add(code: int, words: str, **extra: Any) -> None:
        entry = out.setdefault(code, {"model": problem})
        entry.setdefault("model", problem)
        said = entry.get("description")
        entry["description"] = f"{said} Or: {words}" if said else words[0].upper() + words[1:]
        for name, value in extra.items():
            entry[name] = {**entry.get(name, {}), **value}

    add(400, "a malformed Idempotency-Key.")
    add(
        409,
        "a request with the same Idempotency-Key is still being processed.",
        headers={"Retry-After": {"description": "Seconds to wait.", "schema": {"type": "string"}}},
    )
    add(422, "the Idempotency-Key was used with another request (body or route).")
    return out


def _body(raw: bytes) -> Any:
    """The body as the fingerprint sees it: canonical JSON, else the bytes' SHA-256."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return {"sha256": hashlib.sha256(raw).hexdigest()}


def _replay(status_code: int, stored: dict[str, Any]) -> JSONResponse:
    if set(stored) == {"body", "headers"}:
        body, headers = stored["body"], dict(stored["headers"])
    else:  # stored by POST /v1/intents before every route could opt in: the body alone
        body = stored
        headers = {"Location": f"/v1/intents/{body['intent_id']}"} if "intent_id" in body else {}
    headers[REPLAYED_HEADER] = "true"
    return JSONResponse(body, status_code=status_code, headers=headers)


async def answer(
    request: Request, by: str, handler: Callable[[Request], Awaitable[Response]]
) -> Response:
    """The route's answer under the request's `Idempotency-Key`, if it has one: the stored
    one replayed, a refusal, or the handler's (stored when it is one to replay)."""
    header = request.headers.get("Idempotency-Key")
    if header is None:
        return await handler(request)
    try:
        key = scoped(parse_key(header), by=by)
    except InvalidIdempotencyKey as err:
        raise HTTPException(400, str(err)) from err
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    request_sha = fingerprint(request.method, path, _body(await request.body()), by=by)
    ingress = request.app.state.ingress
    store: IdempotencyStore = ingress.idempotency
    claim = await asyncio.to_thread(store.claim, key, request_sha)
    if claim.kind == "mismatch":
        raise HTTPException(
            422,
            [
                {
                    "loc": ["header", "Idempotency-Key"],
                    "msg": "this key was used with another request (a different body, or "
                    "another route); use a new key for a new request",
                    "type": "idempotency_key_reused",
                }
            ],
        )
    if claim.kind == "in_flight":
        raise HTTPException(
            409,
            "a request with this Idempotency-Key is still being processed; retry later",
            headers={"Retry-After": "1"},
        )
    if claim.kind == "replay":
        ingress.counters.duplicates.labels("idempotency_key_replay").inc()
        assert claim.status_code is not None
        return _replay(claim.status_code, claim.response or {})
    try:
        response = await handler(request)
    except BaseException:
        # Refused (nothing done; the corrected request may reuse the key) or failed
        # unexpectedly: nothing to replay either way.
        await asyncio.to_thread(store.release, key)
        raise
    stored = _storable(response)
    if stored is None:
        await asyncio.to_thread(store.release, key)
    else:
        await asyncio.to_thread(store.complete, key, response.status_code, stored)
    return response


def _storable(response: Response) -> dict[str, Any] | None:
    """What a replay repeats of `response`, or None for an answer not to keep: a 5xx, a
    validation refusal, or one that is not JSON."""
    if response.status_code >= 500 or response.status_code in (400, 422):
        return None
    if not response.headers.get("content-type", "").startswith("application/json"):
        return None
    try:
        body = json.loads(bytes(response.body))
    except ValueError:
        return None
    headers = {name: response.headers[name] for name in KEPT_HEADERS if name in response.headers}
    return {"body": body, "headers": headers}
