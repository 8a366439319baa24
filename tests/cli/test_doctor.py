"""`herald doctor`, the installed executable in its own process, against one `herald dev`
stack for the whole module: every line ok on the stack as it runs, and one FAIL line
naming the cause for each thing a deployment can get wrong, set by a single setting."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from devstack import free_port
from settings import Settings
from tests.cli.conftest import Run
from tests.cli.test_second_terminal import VARIABLES, Stack, running_dev

pytestmark = pytest.mark.e2e

CHECKS = [
    "settings",
    "ledger",
    "migrations",
    "data key",
    "policy",
    "temporal",
    "search attributes",
    "provider twilio",
    "provider telnyx",
    "provider smtp",
    "provider sendgrid",
    "callback URL",
]
"""Every line `herald doctor` prints on a `herald dev` stack (each simulator it runs)."""


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_dev(tmp_path_factory.mktemp("doctor"), "default") as stack:
        # One intent, so the data key is checked against a stored ciphertext.
        sent = stack.herald(
            "send",
            "--key",
            "class-opening:c-1:m-doctor",
            "--recipient",
            "m-doctor",
            "--template",
            "class-opening",
            "--phone",
            "+447400000100",
            "--vars",
            json.dumps(VARIABLES),
        )
        assert sent.returncode == 0, sent.stderr
        yield stack


def doctor(stack: Stack, **settings: str) -> tuple[Run, dict[str, str]]:
    """`herald doctor` in the stack's folder with these settings beside its data folder;
    the run and its lines by check (`ok ...` / `FAIL ...`)."""
    from tests.cli.conftest import run_installed_herald

    done = run_installed_herald(
        "doctor",
        settings={"HERALD_DATA_DIR": str(stack.data), **settings},
        cwd=stack.home,
        timeout=90,
    )
    assert "Traceback" not in done.stdout + done.stderr
    lines = {}
    for line in done.stdout.strip().splitlines():
        verdict, _, rest = line.partition(" ")
        what, _, detail = rest.strip().partition(": ")
        lines[what] = f"{verdict} {detail}"
    # Every check, or only the first when the settings themselves do not build.
    assert list(lines) in (CHECKS, ["settings"]), done.stdout
    return done, lines


def failed(done: Run, lines: dict[str, str], what: str) -> str:
    """The run failed on `what`, said in one line on stderr; the FAIL line's reason."""
    assert done.returncode == 1, (done.stdout, done.stderr)
    (summary,) = done.stderr.strip().splitlines()
    assert summary.startswith("herald doctor: ") and what in summary, done.stderr
    verdict, _, reason = lines[what].partition(" ")
    assert verdict == "FAIL", lines[what]
    return reason


def test_a_dev_stack_passes_every_check(dev: Stack) -> None:
    done, lines = doctor(dev)
    assert list(lines) == CHECKS
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(line.startswith("ok ") for line in lines.values()), done.stdout
    assert done.stderr == ""
    assert "reads the ledger (k1)" in lines["data key"]  # the check every process makes
    assert "all 6 registered" in lines["search attributes"]


def test_a_wrong_sms_auth_token_is_named(dev: Stack) -> None:
    done, lines = doctor(dev, HERALD_SMS_AUTH_TOKEN="not-the-token")
    reason = failed(done, lines, "provider twilio")
    assert "credentials refused" in reason and "HTTP 401, code 20003" in reason
    assert "not-the-token" not in done.stdout + done.stderr
    assert all(v.startswith("ok") for k, v in lines.items() if k != "provider twilio")


def test_postgres_unreachable_is_named(dev: Stack) -> None:
    port = free_port()
    done, lines = doctor(dev, HERALD_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{port}/herald")
    reason = failed(done, lines, "ledger")
    assert f"127.0.0.1:{port}" in reason and "refused" in reason.lower()
    assert lines["migrations"] == "FAIL not checked: the ledger is not reachable"
    assert lines["temporal"].startswith("ok ")


def test_a_namespace_that_does_not_exist_is_named(dev: Stack) -> None:
    done, lines = doctor(dev, HERALD_TEMPORAL_NAMESPACE="no-such-namespace")
    reason = failed(done, lines, "temporal")
    assert "HERALD_TEMPORAL_NAMESPACE=no-such-namespace: no such namespace" in reason
    assert lines["ledger"].startswith("ok ")


def test_a_database_not_migrated_is_named(dev: Stack) -> None:
    url = Settings(database_url=dev.addresses["postgres"]).resolved_database_url()
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("CREATE DATABASE doctor_fresh"))
    engine.dispose()
    fresh = dev.addresses["postgres"].rsplit("/", 1)[0] + "/doctor_fresh"
    done, lines = doctor(dev, HERALD_DATABASE_URL=fresh)
    reason = failed(done, lines, "migrations")
    assert reason.startswith("at no revision (an empty database)")
    assert reason.endswith("run `herald migrate`")
    assert lines["ledger"].startswith("ok ")


def test_a_data_key_that_does_not_decrypt_the_ledger_is_named(dev: Stack) -> None:
    other = "k1:" + base64.b64encode(os.urandom(32)).decode()
    done, lines = doctor(dev, HERALD_DATA_KEY=other)
    reason = failed(done, lines, "data key")
    assert "data key 'k1'" in reason and "not the key the ledger knows" in reason
    assert other.partition(":")[2] not in done.stdout + done.stderr


def test_a_loopback_http_callback_url_in_production_is_named(dev: Stack) -> None:
    production = {
        "HERALD_ENV": "production",
        "HERALD_DATA_KEY": (dev.data / "data.key").read_text().strip(),
        "HERALD_OPERATOR_TOKEN": "break-glass-for-the-test",
        "HERALD_SMS_AUTH_TOKEN": "a-production-token",
        "HERALD_UNSUBSCRIBE_SECRET": "unsubscribe-secret-for-the-test",
        "HERALD_PUBLIC_BASE_URL": "http://127.0.0.1:8000",
    }
    done, lines = doctor(dev, **production)
    if list(lines) == ["settings"]:
        # Production's settings may refuse a loopback URL as they are built (settings.py's
        # own validation): then the doctor's first line names it.
        assert "HERALD_PUBLIC_BASE_URL" in failed(done, lines, "settings")
    else:
        reason = failed(done, lines, "callback URL")
        assert "https outside dev" in reason and "127.0.0.1 is loopback" in reason
    # The same URL is fine in dev, where providers are the local simulators.
    _, dev_lines = doctor(dev, HERALD_PUBLIC_BASE_URL="http://127.0.0.1:8000")
    assert dev_lines["callback URL"].startswith("ok ")


def test_settings_that_do_not_build_are_the_first_and_only_failure(tmp_path: Path) -> None:
    from tests.cli.conftest import run_installed_herald

    done = run_installed_herald(
        "doctor",
        settings={"HERALD_ENV": "production", "HERALD_DATA_DIR": str(tmp_path)},
        cwd=tmp_path,
    )
    (line,) = done.stdout.strip().splitlines()
    assert line.startswith("FAIL settings: HERALD_ENV=production needs HERALD_SMS_AUTH_TOKEN")
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1
