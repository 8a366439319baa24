"""`herald bench --profile DIR`: flame graphs of Herald's worker and of the driver + ingress.

After the measured rounds (so the sampler's cost never enters the figures), one more round
of Herald intents runs with py-spy (a dev dependency, installed as a wheel) sampling each
worker process and this process (the driver, which also serves the ingress). py-spy writes
an SVG flame graph per process when it is interrupted at the end of the round.
`--nonblocking` samples without pausing the process, so the profiled round runs at about
its usual speed. `--gil` samples only the thread holding the GIL: py-spy's idle detection
counted threads waiting on Postgres (psycopg's wait) and the event loop's epoll as busy
(half the samples of a first worker graph), while the GIL holder is the one doing Python
work; native work with the GIL released (the Temporal core in Rust) is not in the graph.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

SAMPLES_PER_SECOND = 250
STOP_TIMEOUT_S = 60.0


def py_spy() -> str:
    """The py-spy executable beside this interpreter (the virtual environment's), else on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    if beside.exists():
        return str(beside)
    found = shutil.which("py-spy")
    if found is None:
        raise RuntimeError("--profile needs py-spy (pip install -e '.[dev]' installs it)")
    return found


@dataclass
class Profiler:
    """py-spy recorders, one per (name, pid), writing `<folder>/<name>.svg`."""

    folder: Path
    targets: Sequence[tuple[str, int]]
    _running: list[tuple[Path, subprocess.Popen[bytes]]] = field(default_factory=list)

    def __enter__(self) -> Profiler:
        self.folder.mkdir(parents=True, exist_ok=True)
        exe = py_spy()
        for name, pid in self.targets:
            svg = self.folder / f"{name}.svg"
            cmd = [exe, "record", "--pid", str(pid), "--rate", str(SAMPLES_PER_SECOND)]
            cmd += ["--nonblocking", "--gil", "--format", "flamegraph", "--output", str(svg)]
            proc = subprocess.Popen(
                cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
            )
            self._running.append((svg, proc))
        return self

    def __exit__(self, *exc: object) -> None:
        for _, proc in self._running:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # py-spy writes the graph on Ctrl-C
        for _, proc in self._running:
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def written(self) -> list[str]:
        """The SVGs that exist now (a recorder that failed is named in `errors`)."""
        return [str(svg) for svg, _ in self._running if svg.exists()]

    def errors(self) -> list[str]:
        out = []
        for svg, proc in self._running:
            if not svg.exists():
                err = (proc.stderr.read() if proc.stderr else b"").decode(errors="replace")
                out.append(f"{svg.name}: {err.strip().splitlines()[-1:] or 'no output'}")
        return out
