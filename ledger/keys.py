"""The data key ring against the ledger: checked at start, rotated, retired.

Every process that reads or writes the ledger's contact data calls `check_key_ring` before
it starts (the worker, the API and the CLI through `starter.client.HeraldClient.connect`,
the ledger commands that compute a lookup, `herald doctor`). It refuses, naming the key
id, a ring that lacks a key the ledger still has in use, or that holds another key under a
recorded id (its check value differs), or a key that was retired; it records a ring key
the ledger has never met; and it installs the ledger's lookup and action-proof keys
(`ledger.crypto.DerivedKeys`) into the cipher.

Those two keys are the ledger's own secrets, kept encrypted under the ring
(`ledger_secret`), made once from the ring's last key (how they were derived before the
ledger kept them, so every lookup HMAC already written still matches). A lookup HMAC can
not be re-derived under a new key without its plaintext, and suppressions, inbound
keywords and purged intents keep only the HMAC (by design: a suppression must outlive the
contact data). So a rotation re-encrypts the ledger's copy of the two keys like any other
field, and the HMACs stay as they are; an action proof made before a rotation verifies
after it, since its key is the same key.

Rotation (`herald keys rotate`) re-encrypts every ciphertext of every registered column
(`ENCRYPTED_COLUMNS`) whose prefix names another key than the ring's primary, in batches
of one transaction each, each row a compare-and-set: a crash resumes where it stopped,
since "not under the primary" is the query. `herald keys retire KID` then refuses while any
ciphertext is still under the key, and otherwise records it retired: from then on a ring
that still holds it is refused, and it can leave every ring (and be destroyed).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Column, Engine, Table, bindparam, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from ledger import review_items
from ledger.contact_data import ENCRYPTED_COLUMNS, EncryptedColumn
from ledger.crypto import DerivedKeys, FieldCipher, KeyRingError, kid_of
from ledger.models import Base, DataKeyRecord, LedgerSecret

LOCK_ID = 0x48455241_4C44_4B59 & 0x7FFF_FFFF_FFFF_FFFF
"""The advisory lock that serializes key checks, rotations and retirements."""
LOOKUP_SECRET = "lookup"
ACTION_SECRET = "action_proof"


def _column(spec: EncryptedColumn) -> tuple[Table, Column[str], Column[str], Column[object]]:
    table = Base.metadata.tables[spec.table]
    (key,) = table.primary_key.columns
    return table, table.c[spec.column], table.c[spec.context_column], key


def _lock(conn: Connection) -> None:
    conn.execute(select(func.pg_advisory_xact_lock(LOCK_ID)))


# --- the check at start --------------------------------------------------------------------


@dataclass(frozen=True)
class KeyRingCheck:
    """What `check_key_ring` found: the ring reads the ledger."""

    recorded: list[str]
    """Ring keys the ledger met for the first time (recorded now, unless `record=False`)."""
    derived_under: str
    """The key id the ledger's lookup and action-proof keys are encrypted under."""


def check_key_ring(
    engine: Engine, cipher: FieldCipher, *, now: datetime | None = None, record: bool = True
) -> KeyRingCheck:
    """Refuse a ring that cannot read the ledger, record its new keys, install the rest.

    Refused (a KeyRingError naming the kid): a kid the ledger has in use that the ring
    lacks, a ring key whose check value differs from the ledger's, a retired key. The
    ledger's lookup and action-proof keys are installed into `cipher`.

    One transaction under an advisory lock, so processes starting together agree. With
    `record=False` (a diagnosis, `herald doctor`) the same checks run and the transaction
    is rolled back: nothing is recorded.
    """
    now = now or datetime.now(UTC)
    with engine.connect() as conn, conn.begin() as tx:
        _lock(conn)
        records = {r.kid: r for r in conn.execute(select(DataKeyRecord.__table__))}
        for kid, row in records.items():
            if row.retired_at is None and kid not in cipher.kids:
                raise KeyRingError(
                    f"the ledger has data under data key {kid!r}, which HERALD_DATA_KEY "
                    "lacks: refusing to start (add the key to the ring)"
                )
        recorded: list[str] = []
        for kid in cipher.kids:
            known = records.get(kid)
            check = cipher.check_value(kid)
            if known is None:
                conn.execute(
                    insert(DataKeyRecord).values(kid=kid, check_value=check, created_at=now)
                )
                recorded.append(kid)
            elif known.retired_at is not None:
                raise KeyRingError(
                    f"data key {kid!r} was retired on {known.retired_at:%Y-%m-%d}: remove it "
                    "from HERALD_DATA_KEY"
                )
            elif known.check_value is None:
                conn.execute(
                    update(DataKeyRecord).where(DataKeyRecord.kid == kid).values(check_value=check)
                )
            elif known.check_value != check:
                raise KeyRingError(
                    f"data key {kid!r} in HERALD_DATA_KEY is not the key the ledger knows by "
                    "that id (its check value differs): refusing to start"
                )
        secrets = dict(conn.execute(select(LedgerSecret.name, LedgerSecret.value_ct)).all())
        if LOOKUP_SECRET not in secrets or ACTION_SECRET not in secrets:
            legacy = cipher.legacy_derived()
            for name, value in ((LOOKUP_SECRET, legacy.lookup), (ACTION_SECRET, legacy.action)):
                if name not in secrets:
                    secrets[name] = _seal_secret(cipher, name, value)
                    conn.execute(
                        insert(LedgerSecret).values(
                            name=name, value_ct=secrets[name], created_at=now
                        )
                    )
        cipher.install(
            DerivedKeys(
                lookup=_open_secret(cipher, LOOKUP_SECRET, secrets[LOOKUP_SECRET]),
                action=_open_secret(cipher, ACTION_SECRET, secrets[ACTION_SECRET]),
            )
        )
        if not record:
            tx.rollback()
    return KeyRingCheck(recorded, kid_of(secrets[LOOKUP_SECRET]))


def load_cipher(engine: Engine, keyring: str) -> FieldCipher:
    """A FieldCipher for `keyring`, checked against the ledger (`check_key_ring`)."""
    cipher = FieldCipher(keyring)
    check_key_ring(engine, cipher)
    return cipher


def _secret_context(name: str) -> str:
    (spec,) = [c for c in ENCRYPTED_COLUMNS if c.table == LedgerSecret.__tablename__]
    return spec.context(name)


def _seal_secret(cipher: FieldCipher, name: str, value: bytes) -> str:
    return cipher.encrypt(base64.b64encode(value).decode(), context=_secret_context(name))


def _open_secret(cipher: FieldCipher, name: str, sealed: str) -> bytes:
    from cryptography.exceptions import InvalidTag

    try:
        return base64.b64decode(cipher.decrypt(sealed, context=_secret_context(name)))
    except InvalidTag:
        raise KeyRingError(
            f"the ledger's {name} key does not open under data key {kid_of(sealed)!r}"
        ) from None


# --- status, rotation, retirement ----------------------------------------------------------


def ciphertexts_by_kid(conn: Connection | Session) -> dict[str, dict[str, int]]:
    """{kid: {"table.column": rows}} over every registered column."""
    found: dict[str, dict[str, int]] = {}
    for spec in ENCRYPTED_COLUMNS:
        _, column, _, _ = _column(spec)
        kid = func.split_part(column, ":", 1)
        query = select(kid, func.count()).where(column.is_not(None)).group_by(kid)
        for name, rows in conn.execute(query):
            found.setdefault(name, {})[spec.name] = rows
    return found


@dataclass(frozen=True)
class KeyStatus:
    """One data key as `herald keys status` shows it."""

    kid: str
    in_ring: bool
    primary: bool
    rows: int
    """Ciphertexts under it, over every registered column."""
    derivation: bool
    """The ledger's lookup and action-proof keys are encrypted under it."""
    recorded_at: datetime | None
    retired_at: datetime | None
    columns: dict[str, int] = field(default_factory=dict)


def key_status(engine: Engine, cipher: FieldCipher) -> list[KeyStatus]:
    """Every kid the ledger or the ring knows, the ring's first."""
    with engine.connect() as conn:
        records = {r.kid: r for r in conn.execute(select(DataKeyRecord.__table__))}
        counts = ciphertexts_by_kid(conn)
        sealed = conn.execute(
            select(LedgerSecret.value_ct).where(LedgerSecret.name == LOOKUP_SECRET)
        ).scalar_one_or_none()
    order = list(cipher.kids) + sorted(set(records) - set(cipher.kids))
    order += sorted(set(counts) - set(order))
    return [
        KeyStatus(
            kid=kid,
            in_ring=kid in cipher.kids,
            primary=kid == cipher.primary,
            rows=sum(counts.get(kid, {}).values()),
            derivation=sealed is not None and kid_of(sealed) == kid,
            recorded_at=records[kid].created_at if kid in records else None,
            retired_at=records[kid].retired_at if kid in records else None,
            columns=counts.get(kid, {}),
        )
        for kid in order
    ]


Progress = Callable[[int, int], None]
"""Called with (re-encrypted so far, to re-encrypt in all) after each batch."""


def pending_rotation(conn: Connection | Session, primary: str) -> int:
    """Ciphertexts not under `primary`, over every registered column."""
    return sum(
        rows
        for kid, columns in ciphertexts_by_kid(conn).items()
        if kid != primary
        for rows in columns.values()
    )


def rotate(
    engine: Engine, cipher: FieldCipher, *, batch: int = 500, progress: Progress | None = None
) -> int:
    """Re-encrypt every registered ciphertext not under the ring's primary key.

    One transaction per batch; returns how many were re-encrypted. Resumable: a run stopped
    half-way leaves only rows that are either old or new, and the next run takes the rest.

    A ciphertext the ring cannot open is a KeyRingError naming its kid and column.
    """
    from cryptography.exceptions import InvalidTag

    with engine.connect() as conn:
        total = pending_rotation(conn, cipher.primary)
    done = 0
    if progress:
        progress(done, total)
    for spec in ENCRYPTED_COLUMNS:
        table, column, context, key = _column(spec)
        prefix = f"{cipher.primary}:"
        while True:
            with engine.begin() as conn:
                rows = conn.execute(
                    select(key, column, context)
                    .where(column.is_not(None), ~column.startswith(prefix, autoescape=True))
                    .order_by(key)
                    .limit(batch)
                    .with_for_update(skip_locked=True)
                ).all()
                changes = []
                for row_key, old, row_context in rows:
                    try:
                        plain = cipher.decrypt(old, context=spec.context(row_context))
                    except InvalidTag:
                        raise KeyRingError(
                            f"a ciphertext of {spec.name} does not open under data key "
                            f"{kid_of(old)!r}"
                        ) from None
                    except KeyRingError as err:
                        raise KeyRingError(f"{err} (a ciphertext of {spec.name})") from None
                    fresh = cipher.encrypt(plain, context=spec.context(row_context))
                    changes.append({"row_key": row_key, "old_ct": old, "new_ct": fresh})
                if changes:
                    # Compare-and-set, one statement for the batch: a purge that nulled a
                    # value meanwhile leaves it purged.
                    conn.execute(
                        update(table)
                        .where(key == bindparam("row_key"), column == bindparam("old_ct"))
                        .values({spec.column: bindparam("new_ct")}),
                        changes,
                    )
            done += len(rows)
            if progress and rows:
                progress(done, max(total, done))
            if len(rows) < batch:
                break
    return done


class StillInUse(KeyRingError):
    """`retire` refused: something still depends on the key."""


def retire(engine: Engine, cipher: FieldCipher, kid: str, *, now: datetime | None = None) -> None:
    """Record `kid` retired; StillInUse (naming what depends on it) while anything does."""
    now = now or datetime.now(UTC)
    with engine.begin() as conn:
        _lock(conn)
        record = conn.execute(
            select(DataKeyRecord.__table__).where(DataKeyRecord.kid == kid)
        ).one_or_none()
        if record is None:
            raise KeyRingError(f"the ledger has no data key {kid!r}")
        if record.retired_at is not None:
            raise KeyRingError(
                f"data key {kid!r} was already retired on {record.retired_at:%Y-%m-%d}"
            )
        if kid == cipher.primary:
            raise StillInUse(
                f"data key {kid!r} is the ring's primary (it encrypts every new field): put "
                "the new key first in HERALD_DATA_KEY"
            )
        columns = ciphertexts_by_kid(conn).get(kid, {})
        if columns:
            where = ", ".join(f"{name}: {rows}" for name, rows in sorted(columns.items()))
            raise StillInUse(
                f"{sum(columns.values())} ciphertexts are still under data key {kid!r} "
                f"({where}): run `herald keys rotate` first"
            )
        conn.execute(update(DataKeyRecord).where(DataKeyRecord.kid == kid).values(retired_at=now))


def new_key(kid: str) -> str:
    """A new ring entry `kid:base64` of 32 random bytes."""
    import secrets

    from ledger.crypto import parse_key_ring

    entry = f"{kid}:{base64.b64encode(secrets.token_bytes(32)).decode()}"
    parse_key_ring(entry)  # the kid's form
    return entry


# --- a key error met by an activity --------------------------------------------------------


def file_unreadable(
    session: Session,
    *,
    step: str,
    problem: str,
    now: datetime,
    intent_id: str | None = None,
    attempt_token: str | None = None,
) -> None:
    """File a `data_key_unreadable` review item and count the metric.

    For an intent (named, or found by its attempt's token) whose contact data this worker's
    ring cannot read; the activity then fails for good (no retry cures a missing key: a
    worker with the right ring is a new process, checked at its start).
    """
    from ledger import metrics
    from ledger.models import Attempt, Intent

    query = select(Intent.id, Intent.business_key)
    if attempt_token is not None:
        query = query.join(Attempt, Attempt.intent_id == Intent.id).where(
            Attempt.token == attempt_token
        )
    else:
        query = query.where(Intent.id == intent_id)
    found = session.execute(query).one_or_none()
    if found is not None:
        review_items.record_review_items(
            session,
            [
                review_items.ReviewRow(
                    kind=review_items.DATA_KEY_UNREADABLE,
                    subject=f"intent:{found.id}",
                    since=now,
                    age=now - now,
                    intent_id=found.id,
                    business_key=found.business_key,
                    detail={"step": step, "problem": problem},
                )
            ],
            now,
        )
    metrics.note(session, lambda: metrics.DATA_KEY_ERRORS.labels(metrics.label(step)).inc())
