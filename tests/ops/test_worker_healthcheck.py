"""`python -m worker --healthcheck`, the compose healthcheck, run as compose runs it: against
the stack's running worker it says healthy; with Temporal or the ledger out of reach, or no
worker running, it fails in one line naming what, within its bound."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import worker
from tests.conftest import until

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def healthcheck(env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "worker", "--healthcheck"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, time.monotonic() - began


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    said = (done.stdout + done.stderr).strip()
    assert len(said.splitlines()) == 1, said
    assert "Traceback" not in said
    return said


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never says a word (a hung server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield int(s.getsockname()[1])


async def worker_is_up(stack) -> None:  # type: ignore[no-untyped-def]
    """The stack's worker process touches its liveness file once its workers run."""

    async def touched() -> bool:
        return worker.healthy(worker.alive_file(stack.cfg))

    await until(touched, within=60, what="the stack's worker liveness file")


async def test_a_running_worker_with_temporal_and_the_ledger_is_healthy(stack):
    await worker_is_up(stack)
    done, _ = healthcheck(stack.env())
    assert done.returncode == 0, done.stderr
    assert one_line(done) == "herald worker: healthy"


async def test_a_worker_that_lost_temporal_is_unhealthy(stack, closed_port):
    await worker_is_up(stack)
    done, _ = healthcheck({**stack.env(), "HERALD_TEMPORAL_ADDRESS": f"127.0.0.1:{closed_port}"})
    assert done.returncode == 1
    said = one_line(done)
    assert said.startswith(f"herald worker: unhealthy: Temporal at 127.0.0.1:{closed_port}")


async def test_a_worker_that_lost_the_ledger_is_unhealthy(stack, closed_port):
    await worker_is_up(stack)
    url = f"postgresql+psycopg://herald:secret@127.0.0.1:{closed_port}/herald"
    done, _ = healthcheck({**stack.env(), "HERALD_DATABASE_URL": url})
    assert done.returncode == 1
    said = one_line(done)
    assert said.startswith("herald worker: unhealthy: the ledger database:"), said
    assert "secret" not in said


HANG = 60.0
"""Seconds after which a check that should have stopped at its 3 s bounds is a hang."""


async def test_a_temporal_that_never_answers_fails_within_the_bound(stack, silent_port):
    await worker_is_up(stack)
    address = f"127.0.0.1:{silent_port}"
    done, took = healthcheck({**stack.env(), "HERALD_TEMPORAL_ADDRESS": address})
    assert done.returncode == 1
    said = one_line(done)
    assert said.startswith(f"herald worker: unhealthy: Temporal at {address}:")
    # The bound fired (its words), and the check ended: a guard against a hang, generous
    # enough for a busy machine's Python start (a quiet one takes about 4.5 s in all).
    assert "within 3 s" in said or "timeout" in said.lower(), said
    assert took < HANG, took


async def test_a_ledger_that_never_answers_fails_within_the_bound(stack, silent_port):
    await worker_is_up(stack)
    url = f"postgresql+psycopg://herald@127.0.0.1:{silent_port}/herald"
    done, took = healthcheck({**stack.env(), "HERALD_DATABASE_URL": url})
    assert done.returncode == 1
    said = one_line(done)
    assert said.startswith("herald worker: unhealthy: the ledger database:")
    assert "within 3 s" in said or "timeout" in said.lower(), said
    assert took < HANG, took


def test_no_running_worker_is_unhealthy_even_with_both_reachable(stack, tmp_path):
    done, _ = healthcheck({**stack.env(), "HERALD_DATA_DIR": str(tmp_path)})
    assert done.returncode == 1
    assert "the worker process is not running here" in one_line(done)
