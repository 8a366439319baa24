"""`herald api` through the real console script."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from devstack import free_port
from tests.conftest import TEST_KEYRING

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
def test_herald_api_serves_health_metrics_and_guards_operator_routes(pg_url, time_env, tmp_path):
    port = free_port()
    env = {
        **os.environ,
        "HERALD_ENV": "production",
        "HERALD_DATA_DIR": str(tmp_path),
        "HERALD_DATABASE_URL": pg_url,
        "HERALD_TEMPORAL_ADDRESS": time_env.client.service_client.config.target_host,
        "HERALD_OPERATOR_TOKEN": "cli-test-token",
        "HERALD_SMS_AUTH_TOKEN": "cli-test-sms-token",
        "HERALD_UNSUBSCRIBE_SECRET": "cli-test-unsubscribe",
        "HERALD_DATA_KEY": TEST_KEYRING,
    }
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
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert proc.returncode == 0
