"""`herald bench --rate 2 --duration 3` end to end, through the real executable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_an_open_loop_run_stops_by_itself_and_writes_its_figures(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "bench",
            "--rate",
            "2",
            "--duration",
            "3",
            "--warmup",
            "2",
            "--drain",
            "60",
            "--breakdown",
            "3",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "offered/s" in done.stdout and "where the time goes" in done.stdout
    [written] = list(tmp_path.glob("*-open-loop.json"))
    result = json.loads(written.read_text())
    [run] = result["runs"]
    assert run["offered_per_s"] == 2 and run["arrivals"] == 6
    assert run["recorded"] == run["submitted"] == run["delivered"] == 6
    assert run["still_open_after_drain"] == 0
    for figures in (run["intent_to_submitted_s"], run["intent_to_delivered_s"]):
        assert figures["n"] == 6 and 0 < figures["p50"] <= figures["p99"] <= figures["max"]
    assert run["intent_to_submitted_s"]["p50"] < run["intent_to_delivered_s"]["p50"]
    assert run["cpu_ms_per_intent"]["worker"] > 0
    assert isinstance(run["backlog"]["grew"], bool)
    steps = [row["step"] for row in run["breakdown"]]
    assert steps[0] == "intended -> recorded"
    assert any("submit_sms" in step for step in steps)
    # The ledger's decision time splits the first workflow task at `authorize`.
    assert "workflow task started -> authorize began (ledger)" in steps
    assert "authorize began (ledger) -> workflow task completed" in steps


def test_an_unbounded_rate_is_refused_in_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    done = subprocess.run(
        [sys.executable, "-m", "cli", "bench", "--rate", "1000", "--duration", "3600"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
