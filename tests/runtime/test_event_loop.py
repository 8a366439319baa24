"""Herald's processes (the worker, every `herald` command) run on uvloop (runtime/loop.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import asyncio
from runtime.loop import run

async def which():
    await asyncio.to_thread(lambda: None)  # the ledger's thread hop works on it
    return type(asyncio.get_running_loop()).__module__

print(run(which()))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop does not exist on Windows")
def test_run_uses_uvloop_and_returns_the_result() -> None:
    # A process of its own, as the worker and the CLI are: the test's loop stays out of it.
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("uvloop")


def test_the_worker_and_the_cli_start_through_it() -> None:
    import cli.main
    import worker
    from runtime.loop import run

    assert cli.main.run is run
    assert worker.run is run
