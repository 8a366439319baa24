"""docker-compose.yml is a valid Compose file with the production-like topology.

Validated with `docker compose config` where Compose is installed, else against the
Compose specification's JSON schema as vendored by check-jsonschema; and structurally:
the services are there, workers scale, every service that runs has a healthcheck, and
every HERALD_* variable is a real setting.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
REQUIRED_SECRETS = {
    "HERALD_DATA_KEY",
    "HERALD_OPERATOR_TOKEN",
    "HERALD_SMS_AUTH_TOKEN",
    "HERALD_UNSUBSCRIBE_SECRET",
}
ONE_SHOTS = {"migrate", "temporal-admin-tools"}


def load() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def placeholder_env() -> dict[str, str]:
    """A value for every ${VAR:?...} placeholder, as a .env would give."""
    example = ROOT / ".env.example"
    values = {}
    for line in example.read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            name, value = line.split("=", 1)
            values[name] = value
    return values


def compose_command() -> list[str] | None:
    for argv in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(argv[0]) is None:
            continue
        probe = subprocess.run([*argv, "version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return argv
    return None


def test_docker_compose_config_accepts_the_file_where_compose_is_installed(tmp_path):
    argv = compose_command()
    if argv is None:
        pytest.skip("docker compose is not installed here; the schema test covers the file")
    env_file = tmp_path / ".env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in placeholder_env().items()))
    done = subprocess.run(
        [*argv, "--env-file", str(env_file), "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr


def check_jsonschema(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.compose-spec",
            str(path),
        ],
        capture_output=True,
        text=True,
    )


def test_the_file_validates_against_the_compose_specification_schema():
    pytest.importorskip("check_jsonschema")
    done = check_jsonschema(COMPOSE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_schema_check_does_reject_a_broken_file(tmp_path):
    """The validation above is not vacuous: a misspelt service key fails it."""
    pytest.importorskip("check_jsonschema")
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(
        COMPOSE.read_text().replace("    stop_grace_period: 30s", "    stop_grace: 30s")
    )
    assert check_jsonschema(broken).returncode != 0


def test_the_topology_has_temporal_on_postgres_its_ui_the_ledger_workers_and_the_api():
    services = load()["services"]
    assert {"temporal-db", "temporal", "temporal-ui", "ledger-db", "worker", "api"} <= set(services)
    temporal = services["temporal"]
    assert temporal["environment"]["DB"].startswith("postgres")
    assert temporal["environment"]["POSTGRES_SEEDS"] == "temporal-db"
    assert services["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert services["worker"]["command"] == ["herald", "worker"]
    assert services["api"]["command"][:2] == ["herald", "api"]


def test_workers_can_be_scaled():
    worker = load()["services"]["worker"]
    assert "container_name" not in worker
    assert "ports" not in worker
    assert worker["stop_grace_period"]


def test_every_long_running_service_has_a_healthcheck():
    for name, service in load()["services"].items():
        if name in ONE_SHOTS:
            assert service["restart"] == "no"
            continue
        assert "healthcheck" in service, name


def test_herald_settings_come_from_the_environment_and_name_real_settings():
    services = load()["services"]
    fields = set(settings.Settings.model_fields)
    for name in ("worker", "api", "migrate"):
        env = services[name]["environment"]
        assert env["HERALD_ENV"] == "production"
        herald_vars = {k for k in env if k.startswith("HERALD_")}
        unknown = {k for k in herald_vars if k.removeprefix("HERALD_").lower() not in fields}
        assert not unknown, f"{name}: not settings: {unknown}"
        assert REQUIRED_SECRETS <= herald_vars
        for secret in REQUIRED_SECRETS:
            # Required from .env, never a value written into the file.
            assert env[secret].startswith("${" + secret + ":?"), secret


def test_the_env_example_names_every_required_placeholder():
    text = COMPOSE.read_text()
    import re

    required = set(re.findall(r"\$\{(\w+):\?", text))
    assert required <= set(placeholder_env())


def test_the_example_sender_settings_pass_the_start_up_check(monkeypatch):
    for name, value in placeholder_env().items():
        if name.startswith("HERALD_") and "SENDER" in name:
            monkeypatch.setenv(name, value)
    book = settings.Settings(env="dev").sender_book()
    assert book.resolve("sms", "herald-us-10dlc").startswith("MG")
