"""The data key ring against the ledger (ledger.keys): a ring that cannot read the ledger is
refused at start naming the key, a rotation re-encrypts everything and resumes after a
crash, a retired key can leave the ring, and every encrypted column is registered."""

from __future__ import annotations

import ast
import base64
import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, select, text
from sqlalchemy.orm import Session, sessionmaker

from api.console import search
from domain import proof
from ledger import contact_data, evidence, intake, keys, listing, migrate, timeline
from ledger import repository as repo
from ledger.crypto import FieldCipher, KeyRingError
from ledger.models import Base, InboundKeyword, Intent, Suppression
from ledger.templates import seed_packaged
from tests.conftest import fresh_database
from tests.ledger.conftest import make_attempt, request

pytestmark = pytest.mark.ledger

K1 = "k1:" + base64.b64encode(b"1" * 32).decode()
K2 = "k2:" + base64.b64encode(b"2" * 32).decode()
K7 = "k7:" + base64.b64encode(b"7" * 32).decode()
K1_OTHER = "k1:" + base64.b64encode(b"x" * 32).decode()
PHONE = "+447400000100"  # the ledger tests' request() default
EMAIL = "Rotating.Traveller@Example.org"
ITINERARY = {
    "flight": "LH-432",
    "origin": "Paris",
    "destination": "Boston",
    "new_departure": "16:05",
    "old_departure": "14:10",
    "trip_url": "https://trips.example/t-1",
    "first_name": "Ada Lovelace",
}
ROOT = Path(__file__).resolve().parents[2]
_names = itertools.count()


@pytest.fixture
def ledger(pg_url: str) -> Iterator[Engine]:
    """A ledger of its own (the session's is shared, under the test key t1)."""
    url = fresh_database(pg_url, f"herald_keys_{next(_names)}")
    migrate.upgrade(url)
    engine = create_engine(url)
    with sessionmaker(engine).begin() as session:
        seed_packaged(session, "default")
    yield engine
    engine.dispose()


def checked(engine: Engine, ring: str) -> FieldCipher:
    return keys.load_cipher(engine, ring)


def write_everything(engine: Engine, cipher: FieldCipher, n: int = 3) -> dict[str, str]:
    """Intents (phone, email, variables), attempts (destination, body, subject), a
    suppression and an inbound keyword, all under `cipher`; {business key: intent id}."""
    now = datetime.now(UTC)
    written = {}
    with sessionmaker(engine, expire_on_commit=False).begin() as session:
        for i in range(n):
            key = f"rotate:{i}"
            fields = intake.validate(
                session,
                request(
                    key,
                    email=EMAIL,
                    channels=("sms", "email"),
                    template_key="itinerary-change",
                    variables=ITINERARY,
                ),
                cipher,
                now=now,
                retention_days=30,
            )
            intent_id = repo.record_intent(session, fields).intent_id
            make_attempt(session, cipher, intent_id, key, destination=PHONE)
            make_attempt(
                session, cipher, intent_id, key, channel="email", destination=EMAIL.lower(),
                subject="Your seat",
            )  # fmt: skip
            written[key] = intent_id
        evidence.suppress(
            session,
            destination_hmac=cipher.lookup_hmac(PHONE),
            channel="sms",
            reason="opt_out",
            source="test",
            at=now,
        )
        session.add(
            InboundKeyword(
                provider="twilio",
                provider_id="SM-rotate",
                destination_hmac=cipher.lookup_hmac(PHONE),
                kind="opt_out",
                word="STOP",
                received_at=now,
                applied=True,
            )
        )
    return written


def values_under(engine: Engine, kid: str) -> dict[str, int]:
    """Every text column of every table whose values start `kid:`: registered or not."""
    found = {}
    with engine.connect() as conn:
        columns = conn.execute(
            text(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = 'public' AND data_type IN ('text', 'character varying')"
            )
        ).all()
        for table, column in columns:
            rows = conn.execute(
                text(f'SELECT count(*) FROM "{table}" WHERE "{column}" LIKE :prefix'),
                {"prefix": f"{kid}:%"},
            ).scalar_one()
            if rows:
                found[f"{table}.{column}"] = rows
    return found


# --- the check at start --------------------------------------------------------------------


def test_a_ring_without_the_ledgers_key_is_refused_naming_it(ledger):
    write_everything(ledger, checked(ledger, K1), n=1)
    with pytest.raises(KeyRingError, match="under data key 'k1', which HERALD_DATA_KEY lacks"):
        checked(ledger, K2)


def test_another_key_under_a_recorded_id_is_refused(ledger):
    checked(ledger, K1)
    with pytest.raises(KeyRingError, match="'k1' in HERALD_DATA_KEY is not the key the ledger"):
        checked(ledger, K1_OTHER)


def test_a_ring_key_the_ledger_never_met_is_recorded_and_then_required(ledger):
    checked(ledger, K1)
    found = keys.check_key_ring(ledger, FieldCipher(f"{K2},{K1}"))
    assert found.recorded == ["k2"] and found.derived_under == "k1"
    with pytest.raises(KeyRingError, match="'k2'"):
        checked(ledger, K1)


def test_a_diagnosis_checks_the_same_and_records_nothing(ledger):
    checked(ledger, K1)
    with pytest.raises(KeyRingError, match="'k1'"):
        keys.check_key_ring(ledger, FieldCipher(K2), record=False)
    found = keys.check_key_ring(ledger, FieldCipher(f"{K2},{K1}"), record=False)
    assert found.recorded == ["k2"]
    # Nothing was recorded: a ring of k1 alone still starts.
    checked(ledger, K1)


def test_the_migration_records_the_key_ids_already_in_use(pg_url):
    # A ledger from before 0016 holding ciphertexts under k7: the first ring without k7 is
    # refused, naming it, instead of failing the first activity that reads one.
    # The intent is recorded by today's code, then the ledger is taken back to 0015 (which
    # keeps intents and drops the key records): what a ledger from before 0016 holds.
    url = fresh_database(pg_url, "herald_keys_migration")
    migrate.upgrade(url)
    engine = create_engine(url)
    try:
        with sessionmaker(engine).begin() as session:
            seed_packaged(session, "default")
            fields = intake.validate(
                session, request("old:1"), FieldCipher(K7), now=datetime.now(UTC), retention_days=30
            )
            repo.record_intent(session, fields)
        migrate.downgrade(url, "0015")
        migrate.upgrade(url)
        with pytest.raises(KeyRingError, match="under data key 'k7'"):
            checked(engine, K1)
        checked(engine, f"{K1},{K7}")
    finally:
        engine.dispose()


def test_a_cipher_checked_against_the_ledger_keeps_the_lookups_already_written(ledger):
    # The ledger's lookup key is made once from the ring's last key, as lookups were
    # derived before it kept one: an HMAC written by an unchecked cipher still matches.
    assert checked(ledger, K1).lookup_hmac(PHONE) == FieldCipher(K1).lookup_hmac(PHONE)
    assert checked(ledger, f"{K2},{K1}").lookup_hmac(PHONE) == FieldCipher(K1).lookup_hmac(PHONE)


# --- rotation, retirement ------------------------------------------------------------------


def test_a_ledger_rotated_to_k2_reads_everything_once_k1_has_left(ledger):
    before = checked(ledger, K1)
    written = write_everything(ledger, before)
    claim = proof.ActingClaim("cancel", written["rotate:0"], "ana", "operator", "asked to")
    signed = proof.sign(before.action_key, claim, now=datetime.now(UTC))
    assert values_under(ledger, "k1")

    both = checked(ledger, f"{K2},{K1}")
    with pytest.raises(keys.StillInUse, match="still under data key 'k1'.*intent.sms_destination"):
        keys.retire(ledger, both, "k1")
    seen: list[tuple[int, int]] = []
    done = keys.rotate(ledger, both, batch=4, progress=lambda d, t: seen.append((d, t)))
    # Intents (phone, email, variables), SMS (destination, body) and email attempts (and
    # a subject), the two ledger secrets.
    assert done == 3 * 3 + 3 * (2 + 3) + 2
    assert seen[0] == (0, done) and seen[-1] == (done, done)
    with pytest.raises(keys.StillInUse, match="primary"):
        keys.retire(ledger, both, "k2")
    keys.retire(ledger, both, "k1")
    # Nothing in any column of any table is under k1 any more: a ciphertext column that
    # is missing from contact_data.ENCRYPTED_COLUMNS would still be.
    assert values_under(ledger, "k1") == {}

    with pytest.raises(KeyRingError, match="'k1' was retired"):
        checked(ledger, f"{K2},{K1}")
    after = checked(ledger, K2)
    now = datetime.now(UTC)
    with Session(ledger) as session:
        intent = session.get(Intent, written["rotate:0"])
        assert intent is not None and intent.sms_destination_ct is not None
        assert after.decrypt(intent.sms_destination_ct, context="rotate:0") == PHONE
        shown = timeline.timeline(session, "rotate:0", cipher=after)
        assert shown["attempts"][0]["destination_masked"].startswith("+44")
        # Search by phone number and by address, recipient lists, suppressions, keywords.
        by_phone = search.find(session, PHONE, country="GB", lookup=after.lookup_hmac)
        assert set(written.values()) <= {i.intent.id for i in by_phone.listed.items}
        by_email = search.find(session, EMAIL.upper(), country="GB", lookup=after.lookup_hmac)
        assert set(written.values()) <= {i.intent.id for i in by_email.listed.items}
        assert len(session.execute(select(Intent.id).where(
            listing.to_recipient(after.lookup_hmac(PHONE)))).all()) == 3  # fmt: skip
        assert repo.suppressions_for(session, after.lookup_hmac(PHONE), "sms")
        assert session.execute(
            select(InboundKeyword).where(
                InboundKeyword.destination_hmac == after.lookup_hmac(PHONE)
            )
        ).scalar_one()
        assert session.execute(
            select(Suppression.id).where(Suppression.destination_hmac == after.lookup_hmac(PHONE))
        ).first()
    # An operator's proof made before the rotation, checked by a worker holding only k2.
    assert proof.verify(after.action_key, claim, signed, now=now)
    status = {s.kid: s for s in keys.key_status(ledger, after)}
    assert status["k2"].primary and status["k2"].derivation and status["k2"].rows == done
    assert status["k1"].retired_at is not None and status["k1"].rows == 0
    assert not status["k1"].in_ring


def test_a_rotation_stopped_half_way_resumes_where_it_stopped(ledger):
    write_everything(ledger, checked(ledger, K1), n=2)
    both = checked(ledger, f"{K2},{K1}")
    with Session(ledger) as session:
        total = keys.pending_rotation(session, "k2")

    stopped_at: list[int] = []

    def crash(done: int, _total: int) -> None:
        if done >= 3:  # a batch or two in: the process dies
            stopped_at.append(done)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        keys.rotate(ledger, both, batch=3, progress=crash)
    (done,) = stopped_at
    with Session(ledger) as session:
        assert 0 < keys.pending_rotation(session, "k2") == total - done
    assert keys.rotate(ledger, both, batch=3) == total - done
    with Session(ledger) as session:
        assert keys.pending_rotation(session, "k2") == 0


def test_a_ciphertext_that_does_not_open_stops_the_rotation_naming_its_column(ledger):
    cipher = checked(ledger, K1)
    written = write_everything(ledger, cipher, n=1)
    with ledger.begin() as conn:
        conn.execute(
            text("UPDATE intent SET variables_ct = :ct WHERE id = :id"),
            {"ct": cipher.encrypt("{}", context="another-key"), "id": written["rotate:0"]},
        )
    with pytest.raises(KeyRingError, match="intent.variables_ct does not open under .*'k1'"):
        keys.rotate(ledger, checked(ledger, f"{K2},{K1}"))


# --- the registry --------------------------------------------------------------------------


def test_every_ciphertext_and_lookup_column_of_the_models_is_registered():
    registered = {(c.table, c.column) for c in contact_data.ENCRYPTED_COLUMNS}
    for table in Base.metadata.sorted_tables:
        for column in table.columns:
            if column.name.endswith("_ct"):
                assert (table.name, column.name) in registered, (
                    f"{table.name}.{column.name} holds ciphertexts: add it to "
                    "ledger.contact_data.ENCRYPTED_COLUMNS (with its associated data)"
                )
            if column.name.endswith("_hmac"):
                assert (table.name, column.name) in contact_data.LOOKUP_COLUMNS, (
                    f"{table.name}.{column.name}: add it to ledger.contact_data.LOOKUP_COLUMNS"
                )
    for spec in contact_data.ENCRYPTED_COLUMNS:
        table = Base.metadata.tables[spec.table]
        assert spec.column in table.c and spec.context_column in table.c, spec


ENCRYPTING_MODULES = {"ledger/intake.py", "activities/ledger.py", "ledger/keys.py"}
"""Where FieldCipher.encrypt is called, each writing only registered columns."""


def test_encrypt_is_called_only_where_the_registry_knows():
    # A new caller of encrypt() is a new ciphertext somewhere: register its column in
    # ledger.contact_data.ENCRYPTED_COLUMNS, then add the module here.
    callers = set()
    for path in ROOT.glob("**/*.py"):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith((".venv/", "tests/", "bench/")) or "/." in relative:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "encrypt"
                and relative != "ledger/crypto.py"
            ):
                callers.add(relative)
    assert callers == ENCRYPTING_MODULES


def test_the_purge_nulls_only_registered_columns():
    # ledger/retention.py purges contact data: what it nulls is what the rotation knows.
    source = (ROOT / "ledger/retention.py").read_text()
    purged = {name for name in _names_in(source) if name.endswith("_ct")}
    registered = {c.column for c in contact_data.ENCRYPTED_COLUMNS}
    assert purged and purged <= registered


def _names_in(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names
