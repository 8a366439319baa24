from __future__ import annotations

import sys
import time
from pathlib import Path

from devstack import ChildProcess, free_port, no_orphans, port_in_use, processes_in_group

SPAWNER = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("ready", flush=True)
time.sleep(600)
"""

STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(600)
"""


def _wait_for(path: Path, text: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.02)
    raise AssertionError(f"{text!r} not in {path}")


def test_stop_kills_whole_group(tmp_path: Path) -> None:
    child = ChildProcess("spawner", [sys.executable, "-c", SPAWNER], log_path=tmp_path / "c.log")
    child.start()
    _wait_for(tmp_path / "c.log", "ready")
    pids = child.group_pids()
    assert child.is_alive() and len(pids) == 2 and child.pid in pids
    child.stop(timeout=5)
    assert not child.is_alive()
    assert no_orphans(pids)
    assert processes_in_group(pids[0]) == []


def test_sigkill_after_timeout(tmp_path: Path) -> None:
    child = ChildProcess("stubborn", [sys.executable, "-c", STUBBORN], log_path=tmp_path / "s.log")
    child.start()
    _wait_for(tmp_path / "s.log", "ready")
    t0 = time.monotonic()
    code = child.stop(timeout=0.5)
    assert code == -9
    assert time.monotonic() - t0 < 5
    assert no_orphans([child.pid])


def test_ports() -> None:
    port = free_port()
    assert not port_in_use("127.0.0.1", port)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert port_in_use("127.0.0.1", port)


def test_free_ports_come_from_below_the_kernels_ephemeral_range():
    # Ports the kernel hands to bind(0) and to outgoing connections come from the
    # ephemeral range; a port picked there could be taken before its server binds it.
    from devstack.ports import PICK_FLOOR, _ephemeral_range

    low, _ = _ephemeral_range()
    ports = {free_port() for _ in range(20)}
    assert all(PICK_FLOOR <= p < low for p in ports), sorted(ports)
    assert len(ports) > 1  # random, not one fixed port
