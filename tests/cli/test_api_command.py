"""`herald api` through the real console script."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from devstack import free_port
from tests.api.conftest import production_api_env

HERALD = str(Path(sys.executable).with_name("herald"))


def test_herald_api_help_names_its_options():
    done = subprocess.run([HERALD, "api", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--host" in done.stdout and "--port" in done.stdout and "uvicorn" in done.stdout


def test_herald_api_with_a_bad_port_is_a_clear_error():
    done = subprocess.run(
        [HERALD, "api", "--port", "eighty"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "invalid int value: 'eighty'" in done.stderr


@pytest.mark.ledger
@pytest.mark.workflow
def test_herald_api_serves_health_metrics_guards_operator_routes_and_logs_no_contact_data(
    pg_url, time_env, tmp_path
):
    port = free_port()
    env = production_api_env(pg_url, time_env, tmp_path)
    proc = subprocess.Popen(
        [HERALD, "api", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "herald api did not come up"
            time.sleep(0.2)
        assert "herald_ledger_up 1.0" in httpx.get(f"{base}/metrics").text
        assert httpx.get(f"{base}/v1/intents").status_code == 401
        authorized = httpx.get(
            f"{base}/v1/intents", headers={"Authorization": "Bearer cli-test-token"}
        )
        assert authorized.status_code == 200
        # Contact data and a token where a caller should never put them: the query and
        # the path. The access log keeps the path and the query's names, nothing else.
        bearer = {"Authorization": "Bearer cli-test-token"}
        for url in (
            f"{base}/v1/intents?recipient=ana%40example.com&access_token=cli-test-token",
            f"{base}/v1/intents?since=2026-01-01&to=%2B447400952999&phone=447400952111",
            f"{base}/healthz?email=bob@example.org",
        ):
            assert httpx.get(url, headers=bearer).status_code in (200, 422)
        missing = httpx.get(f"{base}/v1/intents/%2B447400952999", headers=bearer)
        assert missing.status_code == 404
        assert "447400952999" not in missing.text
        assert httpx.get(f"{base}/v1/intents/447400952222", headers=bearer).status_code == 404
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert proc.returncode == 0
    log = proc.stdout.read() if proc.stdout else ""
    assert "GET /v1/intents?recipient=&access_token= HTTP/1.1" in log
    assert "/healthz?email= HTTP/1.1" in log
    for secret in (
        "ana%40example.com",
        "ana@example.com",
        "bob@example.org",
        "cli-test-token",
        "447400952999",
        "447400952111",
        "447400952222",
    ):
        assert secret not in log, secret
