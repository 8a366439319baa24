"""`herald worker` and `herald api` refuse sender settings no provider would take, before
connecting to anything: one line on stderr naming the alias, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    base.update(
        HERALD_DATA_DIR=str(tmp_path),
        # Nothing listens here: a command that got past the check would fail differently.
        HERALD_DATABASE_URL="postgresql+psycopg://nobody@127.0.0.1:9/none",
        HERALD_TEMPORAL_ADDRESS="127.0.0.1:9",
        **env,
    )
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("command", [["worker"], ["api", "--port", "9"], ["dev", "--headless"]])
@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("HERALD_SMS_SENDERS", '{"herald-us-10dlc": "herald-us-10dlc"}', "'herald-us-10dlc'"),
        ("HERALD_SMS_SENDERS", '{"herald-us-10dlc": "Herald"}', "'herald-us-10dlc'"),
        ("HERALD_SMS_SENDER", "not a sender!", "HERALD_SMS_SENDER"),
    ],
)
def test_a_bad_sender_setting_stops_start_up_in_one_line_naming_it(
    tmp_path: Path, command: list[str], variable: str, value: str, named: str
) -> None:
    done = _run(*command, tmp_path=tmp_path, **{variable: value})
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, done.stderr
    assert named in line and "sender" in line
