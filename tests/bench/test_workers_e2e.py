"""`herald bench --workers 2` end to end, through the real executable."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}


def _processes_on(data_dir: str) -> list[int]:
    """Live processes whose settings point at the bench's data folder (its workers)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("HERALD_DATA_DIR") == data_dir and proc.status() != "zombie":
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def test_a_two_worker_run_reports_both_workers_and_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "bench",
            "--intents",
            "20",
            "--rounds",
            "1",
            "--warmup",
            "2",
            "--sample",
            "2",
            "--workers",
            "2",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "workers: 2 Herald worker process(es)" in done.stdout
    [written] = list(tmp_path.glob("*-throughput.json"))
    result = json.loads(written.read_text())
    assert result["workers"] == 2 and result["options"]["workers"] == 2
    herald = result["herald"]
    assert herald["attempt_states"] == {"delivered": 20}
    by_worker = herald["cpu_ms_per_intent_by_worker"]
    assert set(by_worker) == {"worker-1", "worker-2"}
    assert all(ms > 0 for ms in by_worker.values())  # both served
    assert herald["cpu_ms_per_intent"]["worker"] >= sum(by_worker.values()) - 0.2
    assert len(herald["worker_rss"]["peak_mib_by_worker"]) == 2
    # One stack, or more when a port was taken meanwhile and the bench started again on
    # other ports (bench.stack.start_bench): none of them may leave a process behind.
    data_dirs = re.findall(r"embedded stack in (\S+)", done.stderr)
    assert data_dirs, done.stderr[-3000:]
    for data_dir in data_dirs:
        assert _processes_on(str(Path(data_dir).resolve())) == []


def test_no_workers_is_refused_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli", "bench", "--workers", "0"],
        cwd=ROOT,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
