"""Run a command on a busy machine: `python -m bench.busy [--cores N] -- COMMAND ...`.

`make test-busy` runs the test suite this way, so a test that races the clock fails here
rather than on the next slower machine. Each hog is a process of its own spinning on one
core at the command's priority; they stop when the command ends, at `--max-seconds` (a
bound whatever happens), or when this process is stopped. Nothing touches the network.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import subprocess
import sys
import time


def _spin(until: float) -> None:
    """Keep one core busy until the monotonic clock reaches `until`."""
    n = 0
    while time.monotonic() < until:
        for _ in range(100_000):
            n += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.busy", description=__doc__)
    parser.add_argument("--cores", type=int, default=1, help="cores to keep busy (default 1)")
    parser.add_argument(
        "--max-seconds", type=float, default=1800.0, help="the hogs stop by then regardless"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("say the command to run after --")
    if args.cores < 0 or args.max_seconds <= 0:
        parser.error("--cores is 0 or more and --max-seconds more than 0")
    until = time.monotonic() + args.max_seconds
    hogs: list[multiprocessing.Process] = []
    for _ in range(args.cores):
        hog = multiprocessing.Process(target=_spin, args=(until,), daemon=True)
        hog.start()
        hogs.append(hog)
    print(
        f"busy: {args.cores} core(s) kept busy (pids {', '.join(str(h.pid) for h in hogs)}) "
        f"for at most {args.max_seconds:g} s while running: {' '.join(command)}",
        file=sys.stderr,
        flush=True,
    )
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 130
    finally:
        for hog in hogs:
            if hog.is_alive() and hog.pid is not None:
                os.kill(hog.pid, signal.SIGKILL)
            hog.join(timeout=5)


if __name__ == "__main__":
    sys.exit(main())
