"""`herald bench --profile DIR` end to end, through the real executable: the flame graphs
py-spy writes of the worker and of the driver + ingress, after the measured rounds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.test_workers_e2e import ROOT, _clean_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_profiled_run_writes_both_flame_graphs_beside_its_figures(tmp_path: Path) -> None:
    graphs = tmp_path / "graphs"
    argv = [sys.executable, "-m", "cli", "bench", "--intents", "8", "--rounds", "1"]
    argv += ["--warmup", "2", "--sample", "2", "--out", str(tmp_path), "--profile", str(graphs)]
    done = subprocess.run(
        argv, cwd=ROOT, env=_clean_env(), capture_output=True, text=True, timeout=280
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "flame graphs (8 intents, not measured)" in done.stdout
    for name in ("worker.svg", "driver+ingress.svg"):
        svg = (graphs / name).read_text()
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg, name
    [written] = list(tmp_path.glob("*-throughput.json"))
    result = json.loads(written.read_text())
    assert result["profile"]["errors"] == []
    assert sorted(Path(p).name for p in result["profile"]["svg"]) == [
        "driver+ingress.svg",
        "worker.svg",
    ]
    # The measured figures cover the measured intents only, not the profiled round.
    assert result["herald"]["attempt_states"] == {"delivered": 8}


def test_profile_with_an_open_loop_is_refused_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli", "bench", "--rate", "2", "--profile", str(tmp_path)],
        cwd=ROOT,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == "herald bench: --profile applies to the throughput mode only\n"
