"""Child processes of the dev supervisor: own process group, log file, clean stop."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

import psutil

__all__ = ["ChildProcess", "alive", "no_orphans", "processes_in_group"]


def alive(pid: int) -> bool:
    """True if ``pid`` is a live process (a zombie counts as gone).

    PID 1 in containers often does not reap orphans, so a stopped postmaster can
    linger as a zombie; it holds no ports, files or memory.
    """
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def no_orphans(pids: Iterable[int]) -> bool:
    """True if none of ``pids`` is still alive (zombies count as gone)."""
    return not any(alive(pid) for pid in pids)


def processes_in_group(pgid: int) -> list[int]:
    """Live pids whose process group is ``pgid`` (zombies excluded)."""
    found: list[int] = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid and alive(pid):
                found.append(pid)
        except (ProcessLookupError, PermissionError):
            continue
    return found


class ChildProcess:
    """One supervised child in its own process group (session), logging to a file.

    ``stop()`` sends SIGTERM to the whole group, waits ``timeout`` seconds, then sends
    SIGKILL to whatever is left of the group.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str | os.PathLike[str]],
        *,
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = [os.fspath(a) for a in argv]
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        if self.is_alive():
            return
        self._close_log()
        stdout: int | IO[bytes]
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "ab", buffering=0)
            stdout = self._log
        else:
            stdout = subprocess.DEVNULL
        self._proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,  # own session => own process group (pgid == pid)
            close_fds=True,
        )

    def stop(self, timeout: float = 10.0) -> int | None:
        """Stop the whole group; return the leader's exit code (None if never started)."""
        proc = self._proc
        if proc is None:
            return None
        pgid = proc.pid
        self._signal_group(pgid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._signal_group(pgid, signal.SIGKILL)
            proc.wait(timeout=10)
        # Sweep stragglers that ignored SIGTERM or were forked late.
        deadline = time.monotonic() + timeout
        while processes_in_group(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if processes_in_group(pgid):
            self._signal_group(pgid, signal.SIGKILL)
            psutil.wait_procs(
                [psutil.Process(p) for p in processes_in_group(pgid) if alive(p)], timeout=5
            )
        self._close_log()
        return proc.returncode

    def kill(self) -> None:
        """SIGKILL the whole group at once (crash simulation)."""
        if self._proc is None:
            return
        self._signal_group(self._proc.pid, signal.SIGKILL)
        self._proc.wait(timeout=10)
        self._close_log()

    # -- state -----------------------------------------------------------------------

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def pgid(self) -> int | None:
        return self.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def group_pids(self) -> list[int]:
        """Live members of this child's process group (the leader and its children)."""
        return processes_in_group(self._proc.pid) if self._proc is not None else []

    def log_tail(self, max_bytes: int = 4000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            return fh.read().decode("utf-8", "replace")

    # -- helpers ---------------------------------------------------------------------

    @staticmethod
    def _signal_group(pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __repr__(self) -> str:
        return f"ChildProcess({self.name!r}, pid={self.pid}, alive={self.is_alive()})"
