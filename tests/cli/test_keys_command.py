"""`herald keys` through the real entry point, and a data key ring that is malformed or
cannot read the ledger: one line naming the key id, from every entry point."""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from devstack.ports import free_port
from domain.principals import Role
from ledger import intake, migrate, principals
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.templates import seed_packaged
from settings import Settings
from tests.cli.conftest import Ledger, Run, assert_one_line_error, run_herald
from tests.conftest import fresh_database
from tests.ledger.conftest import request

pytestmark = pytest.mark.ledger

KEY = "class-opening:c-9081:m-1842"
SEND = ["--key", KEY, "--recipient", "m-1842", "--template", "class-opening"]
SEND += ["--phone", "+447400000100"]
_names = itertools.count()


@pytest.fixture
def keyed(pg_url: str, tmp_path: Path) -> Iterator[Ledger]:
    """A ledger and data folder of their own (each test changes the ring), with two intents
    written under the folder's key `k1`, as `herald migrate` and an app would leave them."""
    url = fresh_database(pg_url, f"herald_cli_keys_{next(_names)}")
    migrate.upgrade(url)
    engine = create_engine(url)
    sessions = sessionmaker(engine, expire_on_commit=False)
    data_dir = tmp_path / "data"
    ring = Settings(data_dir=data_dir, env="dev").resolved_data_keys(create=True)
    cipher = FieldCipher(ring)
    with sessions.begin() as session:
        seed_packaged(session, "default")
        issued = principals.create(
            session, "cli-admin", Role.ADMIN, by=principals.BOOTSTRAP_ACTOR, at=datetime.now(UTC)
        )
        for i in range(2):
            fields = intake.validate(
                session, request(f"keys:{i}"), cipher, now=datetime.now(UTC), retention_days=30
            )
            repo.record_intent(session, fields)
    (data_dir / "operator.token").write_text(issued.token)
    yield Ledger(url, sessions, data_dir)
    engine.dispose()


def herald(ledger: Ledger, *args: str, ring: str | None = None, temporal: str | None = None) -> Run:
    settings = {"HERALD_DATA_KEY": ring} if ring is not None else {}
    if temporal is not None:
        settings["HERALD_TEMPORAL_ADDRESS"] = temporal
    return run_herald(*args, database_url=ledger.url, data_dir=ledger.data_dir, settings=settings)


def reachable(time_env) -> str:  # type: ignore[no-untyped-def]
    """A Temporal that answers: the worker, the API and `send` connect to it first, and
    check the data key ring against the ledger after."""
    return str(time_env.client.service_client.config.target_host)


def folder_ring(ledger: Ledger) -> str:
    return (ledger.data_dir / "data.key").read_text().strip()


def test_a_rotation_from_the_command_line_lets_the_old_key_leave(keyed):
    old = folder_ring(keyed)
    status = herald(keyed, "keys", "status", "--json").json()
    assert [(s["kid"], s["primary"], s["derivation"], s["rows"]) for s in status] == [
        ("k1", True, True, 2 * 2 + 2)  # two intents (destination, variables), two secrets
    ]
    made = herald(keyed, "keys", "new", "k2")
    assert made.returncode == 0 and made.stdout.startswith("k2:")
    new = made.stdout.strip()
    assert len(base64.b64decode(new.partition(":")[2])) == 32

    refused = herald(keyed, "keys", "retire", "k1", ring=f"{new},{old}")
    line = assert_one_line_error(refused, "keys")
    assert "6 ciphertexts are still under data key 'k1'" in line and "herald keys rotate" in line

    rotated = herald(keyed, "keys", "rotate", "--batch", "4", "--json", ring=f"{new},{old}")
    assert rotated.json() == {"primary": "k2", "reencrypted": 6, "left": {}}
    # Not a terminal: the progress is one line at the end, on stderr.
    assert rotated.stderr.strip().splitlines() == [
        "re-encrypting under k2 [" + "#" * 30 + "] 6/6 (100%)"
    ]
    assert herald(keyed, "keys", "retire", "k1", ring=f"{new},{old}").returncode == 0

    after = herald(keyed, "keys", "status", "--json", ring=new).json()
    by_kid = {s["kid"]: s for s in after}
    assert by_kid["k2"]["primary"] and by_kid["k2"]["derivation"] and by_kid["k2"]["rows"] == 6
    assert not by_kid["k1"]["in_ring"] and by_kid["k1"]["retired_at"] and not by_kid["k1"]["rows"]
    shown = herald(keyed, "keys", "status", ring=new)
    assert shown.returncode == 0 and "LOOKUP/PROOF KEYS" in shown.stdout

    again = herald(keyed, "keys", "status", ring=f"{new},{old}")
    assert "data key 'k1' was retired" in assert_one_line_error(again, "keys")


@pytest.mark.parametrize(
    "args",
    [["keys", "status"], ["send", *SEND], ["worker"], ["api", "--port", str(free_port())]],
    ids=lambda args: args[0],
)
@pytest.mark.workflow
def test_a_ring_without_the_ledgers_key_is_refused_in_one_line_naming_it(keyed, time_env, args):  # type: ignore[no-untyped-def]
    herald(keyed, "keys", "status")  # a first start records k1
    other = "k7:" + base64.b64encode(b"7" * 32).decode()
    done = herald(keyed, *args, ring=other, temporal=reachable(time_env))
    line = assert_one_line_error(done, args[0])
    assert "under data key 'k1', which HERALD_DATA_KEY lacks" in line


@pytest.mark.parametrize(
    "args",
    [["keys", "status"], ["send", *SEND], ["worker"], ["api", "--port", str(free_port())]],
    ids=lambda args: args[0],
)
@pytest.mark.workflow
def test_a_malformed_ring_is_one_line_naming_the_key(keyed, time_env, args):  # type: ignore[no-untyped-def]
    # What an engineer met as `binascii.Error: Incorrect padding` from each of these.
    torn = folder_ring(keyed)[:-2]
    done = herald(keyed, *args, ring=torn, temporal=reachable(time_env))
    line = assert_one_line_error(done, args[0])
    assert "data key 'k1' is not valid base64" in line
