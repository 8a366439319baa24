"""A test that needs Postgres is marked `ledger` by the fixtures it uses (tests/conftest.py's
collection hook), so `-m "not ledger"` never starts a database, whether or not its file
remembered a marker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import costliest_files_first, tiers_of

ROOT = Path(__file__).resolve().parents[2]


def test_the_tier_comes_from_the_fixture_closure():
    assert tiers_of(["db", "engine", "pg_url"]) == {"ledger"}
    assert tiers_of(["committed", "engine", "pg_url", "time_env"]) == {"ledger", "workflow"}
    assert tiers_of(["stack", "pg_url", "tmp_path_factory"]) == {"ledger", "e2e"}
    assert tiers_of(["tmp_path", "capsys"]) == set()


class _Item:
    """What costliest_files_first reads of a pytest item: its node id and its markers."""

    def __init__(self, nodeid: str, *markers: str) -> None:
        self.nodeid = nodeid
        self.markers = [getattr(pytest.mark, name).mark for name in markers]

    def iter_markers(self):  # type: ignore[no-untyped-def]
        return iter(self.markers)


def test_a_run_hands_out_the_stack_files_first_each_file_whole_and_in_order():
    # xdist's own order (most tests first) left a one-test stack story for the run's end.
    items = [
        _Item("tests/domain/test_a.py::t1"),
        _Item("tests/domain/test_a.py::t2"),
        _Item("tests/ledger/test_b.py::t1", "ledger"),
        _Item("tests/e2e/test_c.py::t1", "e2e"),
        _Item("tests/e2e/test_c.py::t2", "e2e"),
        _Item("tests/faults/test_d.py::t1", "slow", "e2e"),
        _Item("tests/cli/test_e.py::t1"),
        _Item("tests/cli/test_e.py::t2", "workflow", "ledger"),  # the file's costliest counts
    ]
    costliest_files_first(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "tests/faults/test_d.py::t1",
        "tests/e2e/test_c.py::t1",
        "tests/e2e/test_c.py::t2",
        "tests/cli/test_e.py::t1",
        "tests/cli/test_e.py::t2",
        "tests/ledger/test_b.py::t1",
        "tests/domain/test_a.py::t1",
        "tests/domain/test_a.py::t2",
    ]


def test_the_make_targets_keep_that_order():
    # xdist reorders files by their number of tests unless told not to.
    assert "--dist loadfile --no-loadscope-reorder" in (ROOT / "Makefile").read_text()


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
