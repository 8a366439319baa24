"""`python -m bench.async_ledger` (issue 42's measurement of an async ledger path) runs
on its own throwaway Postgres and prints a figure for every mode it was asked for."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.async_ledger", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_prints_client_and_postgres_cpu_for_each_mode() -> None:
    done = _bench("--transactions", "30", "--concurrency", "2", "--rounds", "1", "--reads", "1")
    assert done.returncode == 0, done.stderr
    assert "30 transactions (select + 1 reads + insert + update), 2 in flight" in done.stdout
    for mode in ("thread", "async-run_sync", "async-native"):
        line = re.search(rf"^{mode}\s+(\d+)\s+(\d+)\s+([\d.]+)$", done.stdout, re.MULTILINE)
        assert line, (mode, done.stdout)
        assert int(line[1]) > 0  # the client did work for each transaction


def test_an_unknown_mode_is_one_line_naming_it() -> None:
    done = _bench("--modes", "thread,greenlets")
    assert done.returncode == 2
    assert "unknown mode 'greenlets'" in done.stderr
    assert "Traceback" not in done.stderr
