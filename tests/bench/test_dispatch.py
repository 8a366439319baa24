"""`python -m bench.dispatch`: Temporal's own dispatch time, measured and printed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_the_dispatch_floor_is_printed_for_each_workflow_task() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.dispatch", "--rate", "4", "--count", "8", "--warmup", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = re.findall(
        r"task (\d) \(([^)]*)\): median ([\d.]+)\s+p90 ([\d.]+)\s+n (\d+)", done.stdout
    )
    # Three activities: the first task, then one after each activity.
    assert [(n, where.split(",")[0]) for n, where, *_ in rows] == [
        ("1", "normal queue"),
        ("2", "sticky queue"),
        ("3", "sticky queue"),
        ("4", "sticky queue"),
    ]
    for *_, median, p90, count in rows:
        assert count == "6" and 0 <= float(median) <= float(p90) < 5000


def test_a_count_no_larger_than_the_warmup_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.dispatch", "--count", "3", "--warmup", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--warmup < --count" in done.stderr
