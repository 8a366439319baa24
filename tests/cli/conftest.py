"""The `herald` CLI through its real entry point, against a fresh database of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session, sessionmaker

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Ledger:
    url: str
    sessions: sessionmaker[Session]
    data_dir: Path


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        assert self.returncode == 0, self.stderr
        return json.loads(self.stdout)


@pytest.fixture(scope="module")
def cli_ledger(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    from domain.principals import Role
    from ledger import migrate, principals
    from ledger.templates import seed_packaged
    from tests.conftest import fresh_database

    url = fresh_database(pg_url, "herald_cli")
    migrate.upgrade(url)
    engine = create_engine(url)
    sessions = sessionmaker(engine, expire_on_commit=False)
    with sessions.begin() as session:
        seed_packaged(session, "default")
        # The CLI acts as a principal: an admin whose token is where `herald dev` puts it.
        issued = principals.create(
            session, "cli-admin", Role.ADMIN, by=principals.BOOTSTRAP_ACTOR, at=datetime.now(UTC)
        )
    data_dir = tmp_path_factory.mktemp("herald-cli")
    (data_dir / "operator.token").write_text(issued.token)
    yield Ledger(url, sessions, data_dir)
    engine.dispose()


def run_herald(
    *args: str, database_url: str, data_dir: Path, settings: dict[str, str] | None = None
) -> Run:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env.update(HERALD_DATABASE_URL=database_url, HERALD_DATA_DIR=str(data_dir))
    env.update(settings or {})
    done = subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Run(done.returncode, done.stdout, done.stderr)


HERALD = Path(sys.executable).with_name("herald")
"""The console script a user runs (`.venv/bin/herald`), not `python -m cli`."""


def run_installed_herald(
    *args: str, settings: dict[str, str], cwd: Path, timeout: float = 60
) -> Run:
    """`herald ARGS` as a user's shell runs it: the installed executable, in `cwd`, with no
    HERALD_* variable of this test process, only `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env.update(settings)
    done = subprocess.run(
        [str(HERALD), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    return Run(done.returncode, done.stdout, done.stderr)


def assert_one_line_error(done: Run, command: str) -> str:
    """Exit non-zero with exactly one line on stderr, `herald COMMAND: ...` (no traceback)."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0, (done.stdout, done.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"herald {command}: "), done.stderr
    return lines[0]


@pytest.fixture
def herald(cli_ledger: Ledger) -> Callable[..., Run]:
    def run(*args: str) -> Run:
        return run_herald(*args, database_url=cli_ledger.url, data_dir=cli_ledger.data_dir)

    return run
