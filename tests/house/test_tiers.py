"""A test that needs Postgres is marked `ledger` by the fixtures it uses (tests/conftest.py's
collection hook), so `-m "not ledger"` never starts a database, whether or not its file
remembered a marker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import tiers_of

ROOT = Path(__file__).resolve().parents[2]


def test_the_tier_comes_from_the_fixture_closure():
    assert tiers_of(["db", "engine", "pg_url"]) == {"ledger"}
    assert tiers_of(["committed", "engine", "pg_url", "time_env"]) == {"ledger", "workflow"}
    assert tiers_of(["stack", "pg_url", "tmp_path_factory"]) == {"ledger", "e2e"}
    assert tiers_of(["tmp_path", "capsys"]) == set()


def _collected(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 5), done.stdout + done.stderr  # 5: everything deselected
    return {line.split("::")[1].split("[")[0] for line in done.stdout.splitlines() if "::" in line}


def test_files_without_a_hand_written_marker_are_deselected_by_not_ledger():
    # Neither file marks its Postgres tests `ledger` by hand.
    files = ["tests/api/test_principals_api.py", "tests/ops/test_schedules.py"]
    # Both files collected; of their tests, only the two that need no database are left.
    assert _collected("-m", "not ledger", *files) == {
        "test_docs_api_md_names_the_same_roles_for_every_guarded_route",
        "test_triggering_an_unknown_job_is_a_clear_usage_error",
    }
