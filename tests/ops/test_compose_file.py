"""docker-compose.yml is a valid Compose file with the production-like topology.

Validated with `docker compose config` where Compose is installed, else against the
Compose specification's JSON schema as vendored by check-jsonschema; and structurally:
the services are there, workers scale, every service that runs has a healthcheck, and
every HERALD_* variable is a real setting.
"""

from __future__ import annotations

import os
import re
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
ONE_SHOTS = {"migrate", "temporal-schema", "temporal-admin-tools"}


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


HERALD_SERVICES = ("worker", "api", "migrate")


def test_herald_settings_come_from_the_environment_and_name_real_settings():
    services = load()["services"]
    fields = set(settings.Settings.model_fields)
    for name in HERALD_SERVICES:
        env = services[name]["environment"]
        assert env["HERALD_ENV"] == "production"
        herald_vars = {k for k in env if k.startswith("HERALD_")}
        unknown = {k for k in herald_vars if k.removeprefix("HERALD_").lower() not in fields}
        assert not unknown, f"{name}: not settings: {unknown}"


def test_secrets_are_files_named_after_their_settings_never_environment_variables():
    """Each secret is a compose secret (mounted at /run/secrets/<name>) whose name is the
    setting's as the settings read it from a secrets folder: `herald_<field>`."""
    compose = load()
    declared = compose["secrets"]
    fields = settings.Settings.model_fields
    for name in HERALD_SERVICES:
        service = compose["services"][name]
        mounted = set(service["secrets"])
        assert {s.lower() for s in REQUIRED_SECRETS} | {"herald_database_url"} <= mounted
        for secret in mounted:
            assert declared[secret] == {"file": f"./secrets/{secret}"}, secret
            assert secret.removeprefix("herald_") in fields, f"{secret} is not a setting"
            assert secret.upper() not in service["environment"], f"{name}: {secret} in env"
    assert "POSTGRES_PASSWORD" not in compose["services"]["ledger-db"]["environment"]
    assert compose["services"]["ledger-db"]["secrets"] == ["ledger_db_password"]


def test_the_secrets_folder_is_never_committed_nor_sent_to_the_build():
    assert "secrets/" in (ROOT / ".gitignore").read_text().splitlines()
    # The build context is an allow-list (.dockerignore starts with `*`) without it.
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore and "!secrets" not in ignore


def test_every_herald_command_it_runs_is_one_the_installed_cli_parses():
    from cli.main import parser

    for name, service in load()["services"].items():
        command = service.get("command")
        if not command or command[0] != "herald":
            continue
        args = parser().parse_args(command[1:])
        assert args.command == command[1], name


def test_the_worker_healthcheck_is_the_real_check(tmp_path):
    """Run as compose runs it (no worker here: unhealthy, in one line), so a flag the
    worker did not know would start a worker instead and fail this."""
    test = load()["services"]["worker"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"]
    done = subprocess.run(
        [sys.executable, *test[2:]],
        cwd=ROOT,
        env={**os.environ, "HERALD_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip().startswith("herald worker: unhealthy: the worker process")


def test_the_api_healthcheck_asks_both_listeners():
    api = load()["services"]["api"]
    test = api["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    compile(test[3], "healthcheck", "exec")
    port = api["command"][api["command"].index("--port") + 1]
    assert f"{port}" in test[3] and api["environment"]["HERALD_INGRESS_PORT"] in test[3]


def test_published_ports_bind_loopback_and_workers_publish_none():
    services = load()["services"]
    for name, service in services.items():
        for mapping in service.get("ports", []):
            assert mapping.startswith("127.0.0.1:"), (name, mapping)
    assert "ports" not in services["worker"]


def test_worker_metrics_are_on_inside_the_compose_network():
    worker = load()["services"]["worker"]
    env = worker["environment"]
    for setting in ("HERALD_WORKER_METRICS_ADDRESS", "HERALD_WORKER_HERALD_METRICS_ADDRESS"):
        host, _, port = env[setting].rpartition(":")
        # Not loopback: Prometheus scrapes from another container.
        assert host == "0.0.0.0", setting
        assert port in worker["expose"], setting


def alert_series(markdown: str) -> set[str]:
    """The `herald_*` series named in the `expr:` of the alert rules in a document."""
    names: set[str] = set()
    for block in re.findall(r"```yaml\n(.*?)```", markdown, re.DOTALL):
        for group in yaml.safe_load(block)["groups"]:
            for rule in group["rules"]:
                names |= set(re.findall(r"\bherald_\w+", rule["expr"]))
    return {re.sub(r"_(bucket|sum|count|total)$", "", n) for n in names}


def test_the_documented_alerts_name_series_the_compose_topology_serves():
    """The worker's series (ledger.metrics, recorded by the activities) exist only where
    the worker serves them, as compose now does; the API's are in api/metrics.py."""
    import worker  # noqa: F401 - every module that registers a series, as the worker runs
    from ledger.metrics import REGISTRY

    worker_series = {family.name for family in REGISTRY.collect()}
    api_source = (ROOT / "api" / "metrics.py").read_text()
    series = alert_series((ROOT / "docs" / "operations.md").read_text())
    assert {"herald_scheduled_to_submitted_seconds", "herald_fallbacks"} <= series
    for name in series:
        assert name in worker_series or f'"{name}' in api_source, name
    assert series & worker_series
    assert load()["services"]["worker"]["environment"]["HERALD_WORKER_HERALD_METRICS_ADDRESS"]


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


def image_version(image: str) -> tuple[int, ...]:
    return tuple(int(part) for part in image.rpartition(":")[2].split("."))


def test_temporal_runs_a_server_and_ui_that_support_worker_versioning_without_auto_setup():
    services = load()["services"]
    assert "auto-setup" not in COMPOSE.read_text()
    server = services["temporal"]["image"]
    assert server.startswith("temporalio/server:")
    assert image_version(server) >= (1, 29, 1)
    assert image_version(services["temporal-ui"]["image"]) >= (2, 36, 0)
    # The schema tool and the CLI come from the server's own release.
    for name in ("temporal-schema", "temporal-admin-tools"):
        assert services[name]["image"] == server.replace("/server:", "/admin-tools:"), name


def test_the_schema_is_set_up_by_its_own_step_before_the_server_starts():
    services = load()["services"]
    assert services["temporal"]["depends_on"]["temporal-schema"] == {
        "condition": "service_completed_successfully"
    }
    assert services["temporal-schema"]["depends_on"]["temporal-db"]["condition"] == (
        "service_healthy"
    )
    server_env = services["temporal"]["environment"]
    script = services["temporal-schema"]["command"][0]
    for database in (server_env["DBNAME"], server_env["VISIBILITY_DBNAME"]):
        assert f"{database}" in script
    # The server image only serves: nothing in it creates or upgrades a schema.
    assert "command" not in services["temporal"] and "entrypoint" not in services["temporal"]


def run_compose_script(service: str, fakes: dict[str, str], tmp_path: Path):
    """Run a one-shot's shell command as its container would (compose's `$$` -> `$`), with
    fake tools on PATH that append each call to calls.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for tool, body in fakes.items():
        fake = bin_dir / tool
        fake.write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\n{body}\n')
        fake.chmod(0o755)
    service_def = load()["services"][service]
    assert service_def["entrypoint"] == ["/bin/sh", "-c"]
    script = service_def["command"][0].replace("$$", "$")
    done = subprocess.run(
        ["/bin/sh", "-c", script],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return done, calls


def test_the_schema_step_creates_sets_up_and_upgrades_both_stores_and_tolerates_a_rerun(
    tmp_path,
):
    """The database `temporal` exists already (Postgres created it for the user), as both do
    on every later `up`: the step goes on; any other failure stops it."""
    already = (
        'case "$*" in *"--db temporal create-database"*) '
        "echo 'pq: database \"temporal\" already exists' >&2; exit 1;; esac"
    )
    done, calls = run_compose_script("temporal-schema", {"temporal-sql-tool": already}, tmp_path)
    assert done.returncode == 0, done.stderr
    steps = [
        (db, step)
        for call in calls
        for db in ("temporal_visibility", "temporal")
        if f"--db {db} " in call
        for step in ("create-database", "setup-schema", "update-schema")
        if step in call
    ]
    assert steps == [
        (db, step)
        for db in ("temporal", "temporal_visibility")
        for step in ("create-database", "setup-schema", "update-schema")
    ]
    assert all("--plugin postgres12 --ep temporal-db" in call for call in calls)
    assert "postgresql/v12/visibility/versioned" in calls[-1]


def test_the_schema_step_fails_on_any_other_error(tmp_path):
    broken = "echo 'pq: password authentication failed' >&2; exit 1"
    done, calls = run_compose_script("temporal-schema", {"temporal-sql-tool": broken}, tmp_path)
    assert done.returncode != 0
    assert "password authentication failed" in done.stderr
    assert len(calls) == 1


def test_the_admin_step_creates_the_namespace_and_search_attributes_once_the_server_serves(
    tmp_path,
):
    fake = (
        'case "$*" in "operator cluster health") echo SERVING;; '
        '"operator namespace describe"*) exit 1;; "operator search-attribute list") ;; esac'
    )
    done, calls = run_compose_script("temporal-admin-tools", {"temporal": fake}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "temporal operator namespace create --namespace default --retention 24h" in calls
    from activities.contracts import SEARCH_ATTRIBUTES

    created = {
        tuple(c.split("--name ")[1].replace(" --type", "").split())
        for c in calls
        if "search-attribute create" in c
    }
    assert created == set(SEARCH_ATTRIBUTES.items())


def test_the_worker_runs_versioned_with_a_deployment_and_a_build_id_set_per_deploy():
    env = load()["services"]["worker"]["environment"]
    assert env["HERALD_WORKER_DEPLOYMENT"] == "${HERALD_WORKER_DEPLOYMENT:-herald}"
    assert env["HERALD_WORKER_DEPLOYMENT"].endswith(
        f"-{settings.Settings.model_fields['worker_deployment'].default}}}"
    )
    # Required: a deploy without a build id stops at `docker compose up`, in one line.
    assert env["HERALD_BUILD_ID"].startswith("${HERALD_BUILD_ID:?")
    assert "HERALD_WORKER_VERSIONING" not in env or env["HERALD_WORKER_VERSIONING"] == "true"
