"""An operational failure (nothing running, a wrong URL or address, an unknown key) is one
line on stderr and a non-zero exit from the installed `herald`, whichever command hit it;
never a Python traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack import free_port
from tests.cli.conftest import Ledger, assert_one_line_error, run_installed_herald

KEY = "class-opening:c-9081:m-1842"
SEND = ["--key", KEY, "--recipient", "m-1842", "--template", "class-opening"]
SEND += ["--phone", "+447400000100"]
OPERATOR = ["--reason", "seat filled"]


@pytest.mark.parametrize(
    "args",
    [
        ["show", KEY],
        ["list", "--json"],
        ["send", *SEND],
        ["cancel", KEY, *OPERATOR],
        ["approve-resend", KEY, *OPERATOR],
        ["consent", "m-1842", "--channel", "sms"],
        ["reconcile", "--json"],
        ["migrate"],
        ["worker"],
        ["deploy", "status"],
    ],
    ids=lambda args: args[0],
)
def test_every_command_says_in_one_line_that_the_stack_is_down(
    args: list[str], tmp_path: Path
) -> None:
    # A data folder no `herald dev` runs on; nothing listens where the defaults point.
    down = {
        "HERALD_DATA_DIR": str(tmp_path / "data"),
        "HERALD_POSTGRES_PORT": str(free_port()),
        "HERALD_TEMPORAL_PORT": str(free_port()),
    }
    done = run_installed_herald(*args, settings=down, cwd=tmp_path)
    line = assert_one_line_error(done, args[0])
    assert "herald dev" in line  # the hint at what to start


@pytest.mark.parametrize(
    "args",
    [["show", KEY], ["send", *SEND], ["demo", "class-opening"]],
    ids=lambda args: args[0],
)
def test_a_wrong_database_url_or_temporal_address_is_one_line(
    args: list[str], tmp_path: Path
) -> None:
    # A libpq-style URL (as `herald dev` publishes it) at a closed port; `demo` sets up
    # its own stack on these and must fail at the migration, not with a traceback.
    wrong = {
        "HERALD_DATA_DIR": str(tmp_path / "data"),
        "HERALD_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{free_port()}/herald",
        "HERALD_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
    }
    done = run_installed_herald(*args, settings=wrong, cwd=tmp_path, timeout=90)
    line = assert_one_line_error(done, args[0])
    assert "cannot" in line and "127.0.0.1" in line


@pytest.mark.parametrize("url", ["not a url", "mysql://herald@127.0.0.1/herald"])
def test_a_database_url_that_is_not_postgres_is_one_line(tmp_path: Path, url: str) -> None:
    bad = {"HERALD_DATA_DIR": str(tmp_path / "data"), "HERALD_DATABASE_URL": url}
    done = run_installed_herald("list", settings=bad, cwd=tmp_path)
    line = assert_one_line_error(done, "list")
    assert "HERALD_DATABASE_URL" in line and "must be a PostgreSQL URL" in line


def test_a_malformed_setting_is_named_in_one_line(tmp_path: Path) -> None:
    bad = {"HERALD_DATA_DIR": str(tmp_path / "data"), "HERALD_SMS_MAX_PER_SECOND": "fast"}
    done = run_installed_herald("list", settings=bad, cwd=tmp_path)
    line = assert_one_line_error(done, "list")
    assert "HERALD_SMS_MAX_PER_SECOND: Input should be a valid number" in line
    assert "fast" not in line  # pydantic's text repeats the value, which may be a secret


@pytest.mark.parametrize("args", [["worker"], ["send", *SEND]], ids=lambda args: args[0])
def test_temporal_tls_settings_that_cannot_be_used_are_one_line(
    args: list[str], tmp_path: Path
) -> None:
    elsewhere = {
        "HERALD_DATA_DIR": str(tmp_path / "data"),
        "HERALD_DATABASE_URL": f"postgresql://herald@127.0.0.1:{free_port()}/herald",
        "HERALD_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
    }
    missing = tmp_path / "worker.pem"
    unreadable = {
        "HERALD_TEMPORAL_TLS_CERT": str(missing),
        "HERALD_TEMPORAL_TLS_KEY": str(tmp_path / "worker.key"),
    }
    line = assert_one_line_error(
        run_installed_herald(*args, settings={**elsewhere, **unreadable}, cwd=tmp_path), args[0]
    )
    assert line.endswith(
        f"HERALD_TEMPORAL_TLS_CERT={missing}: cannot read it (No such file or directory)"
    )
    # Nothing listens there: over TLS the cause is given, not the dev-server hint.
    done = run_installed_herald(
        *args, settings={**elsewhere, "HERALD_TEMPORAL_TLS": "true"}, cwd=tmp_path
    )
    line = assert_one_line_error(done, args[0])
    assert f"Temporal at {elsewhere['HERALD_TEMPORAL_ADDRESS']} over TLS: " in line, line


@pytest.mark.ledger
def test_show_of_an_unknown_key_is_one_line(cli_ledger: Ledger, tmp_path: Path) -> None:
    settings = {"HERALD_DATABASE_URL": cli_ledger.url, "HERALD_DATA_DIR": str(tmp_path)}
    done = run_installed_herald("show", "no-such:key-1", settings=settings, cwd=tmp_path)
    line = assert_one_line_error(done, "show")
    assert "no intent with id or business key 'no-such:key-1'" in line


@pytest.mark.parametrize(
    "args",
    [
        ["suppression", "add", "+447400000100", "--channel", "sms"],
        ["suppression", "list", "+447400000100"],
        ["send", *SEND],
        ["migrate"],
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_a_writing_command_in_a_folder_without_a_stack_stops_and_creates_no_key(
    args: list[str], tmp_path: Path
) -> None:
    # The wrong folder: no `herald dev` runs here and no database is configured. Going on
    # would make a fresh data.key and write under it where the real stack never looks.
    data = tmp_path / "data"
    settings = {
        "HERALD_DATA_DIR": str(data),
        "HERALD_POSTGRES_PORT": str(free_port()),
        "HERALD_TEMPORAL_PORT": str(free_port()),
    }
    done = run_installed_herald(*args, settings=settings, cwd=tmp_path)
    line = assert_one_line_error(done, args[0])
    assert f"no running `herald dev` found in {data.resolve()}" in line
    assert "HERALD_DATA_DIR" in line
    assert not (data / "data.key").exists()


def test_with_a_database_but_no_data_key_a_command_names_the_key_and_creates_none(
    cli_ledger: Ledger, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    settings = {
        "HERALD_DATA_DIR": str(data),
        "HERALD_DATABASE_URL": cli_ledger.url,
        # An admin's token, so the data key is what is missing, not the principal.
        "HERALD_TOKEN": (cli_ledger.data_dir / "operator.token").read_text(),
    }
    args = ["suppression", "add", "+447400000100", "--channel", "sms"]
    done = run_installed_herald(*args, settings=settings, cwd=tmp_path)
    line = assert_one_line_error(done, "suppression")
    assert f"no data key in {data.resolve()}" in line and "herald migrate" in line
    assert not (data / "data.key").exists()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ("prod", "HERALD_ENV: Input should be 'dev' or 'production'"),
        ("production", "HERALD_ENV=production needs HERALD_SMS_AUTH_TOKEN, HERALD_DATA_KEY"),
    ],
)
def test_a_wrong_or_unprovisioned_env_is_one_line(tmp_path: Path, env: str, expected: str) -> None:
    bad = {"HERALD_DATA_DIR": str(tmp_path / "data"), "HERALD_ENV": env}
    done = run_installed_herald("list", settings=bad, cwd=tmp_path)
    line = assert_one_line_error(done, "list")
    assert line.startswith("herald list: settings: ") and expected in line


def test_the_worker_module_run_without_productions_secrets_is_one_line(tmp_path: Path) -> None:
    # The container's healthcheck and `python -m worker` build the settings themselves.
    import os
    import subprocess
    import sys

    from tests.cli.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env.update(HERALD_ENV="production", HERALD_DATA_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "worker"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "herald worker: settings: HERALD_ENV=production needs HERALD_SMS_AUTH_TOKEN, "
        "HERALD_DATA_KEY, HERALD_OPERATOR_TOKEN, HERALD_UNSUBSCRIBE_SECRET, "
        "HERALD_DATABASE_URL, HERALD_TEMPORAL_ADDRESS, HERALD_PUBLIC_BASE_URL, "
        "HERALD_SMTP_HOST, HERALD_SMS_BASE_URL; refusing to start"
    ]


def test_herald_dev_on_a_taken_postgres_port_names_it_and_leaves_no_database(
    tmp_path: Path,
) -> None:
    import socket

    from devstack import EmbeddedPostgres

    data = tmp_path / "data"
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        settings = {"HERALD_DATA_DIR": str(data), "HERALD_POSTGRES_PORT": str(port)}
        done = run_installed_herald("dev", settings=settings, cwd=tmp_path, timeout=120)
    line = assert_one_line_error(done, "dev")
    assert line == (
        f"herald dev: 127.0.0.1:{port} is already in use "
        "(another `herald dev`? HERALD_POSTGRES_PORT moves it)"
    )
    assert not (EmbeddedPostgres(data, port=port).pgdata / "PG_VERSION").exists()


@pytest.mark.parametrize(
    "args",
    [["show", KEY], ["list"], ["template", "show", "class-opening"], ["principals", "list"]],
    ids=lambda args: " ".join(args[:2]),
)
def test_a_reading_command_in_a_folder_without_a_stack_reads_no_stranger_database(
    args: list[str], pg_url: str, tmp_path: Path
) -> None:
    from sqlalchemy.engine import make_url

    # A Postgres with a `herald` database answers on the port the defaults point at (the
    # test session's): reading it would print some other stack's intents as if ours.
    data = tmp_path / "data"
    settings = {
        "HERALD_DATA_DIR": str(data),
        "HERALD_POSTGRES_PORT": str(make_url(pg_url).port),
    }
    done = run_installed_herald(*args, settings=settings, cwd=tmp_path)
    line = assert_one_line_error(done, args[0])
    assert f"no running `herald dev` found in {data.resolve()}" in line
    assert not data.exists() or not any(data.iterdir())


@pytest.mark.parametrize("args", [["show", KEY], ["send", *SEND]], ids=lambda args: args[0])
def test_in_the_folder_of_a_stopped_stack_the_hint_is_to_start_it(
    args: list[str], tmp_path: Path
) -> None:
    from settings import Settings

    # What a stopped `herald dev` leaves: its data folder, key and lock, no dev.json.
    data = tmp_path / ".herald"
    Settings(data_dir=data).resolved_data_keys(create=True)
    (data / "dev.lock").touch()
    settings = {
        "HERALD_DATA_DIR": str(data),
        "HERALD_POSTGRES_PORT": str(free_port()),
        "HERALD_TEMPORAL_PORT": str(free_port()),
    }
    done = run_installed_herald(*args, settings=settings, cwd=tmp_path)
    line = assert_one_line_error(done, args[0])
    assert f"`herald dev` is not running on {data.resolve()}: start it" in line
    assert "run this in the folder" not in line


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ("nope", "--policy: no packaged policy named 'nope' (packaged: default, demo;"),
        ("absent.toml", "--policy: cannot read the policy file absent.toml: No such file"),
        ("bad.toml", "--policy: policy is not valid TOML: "),
    ],
    ids=["unknown-name", "missing-file", "not-toml"],
)
def test_herald_dev_with_a_policy_it_cannot_use_is_one_line(
    policy: str, says: str, tmp_path: Path
) -> None:
    (tmp_path / "bad.toml").write_text("version = \n")
    done = run_installed_herald(
        "dev", "--policy", policy, settings={"HERALD_DATA_DIR": str(tmp_path / "d")}, cwd=tmp_path
    )
    assert says in assert_one_line_error(done, "dev")
    assert not (tmp_path / "d" / "dev.json").exists()  # nothing was started


@pytest.mark.parametrize(
    ("args", "setting", "says"),
    [
        (["list"], {"HERALD_API_PORT": "99999"}, "HERALD_API_PORT: 99999 is not a port (1-65535)"),
        (["api", "--port", "99999"], {}, "--port: 99999 is not a port (1-65535)"),
        (
            ["worker"],
            {"HERALD_SMS_BASE_URL": "htp:/bad"},
            "HERALD_SMS_BASE_URL: not an http(s) URL with a host",
        ),
        (
            ["list"],
            {"HERALD_PUBLIC_BASE_URL": "not a url"},
            "HERALD_PUBLIC_BASE_URL: not an http(s) URL with a host",
        ),
        (
            ["list"],
            {"HERALD_DATABASE_URL": "postgresql://::::"},
            "HERALD_DATABASE_URL: not a URL SQLAlchemy can parse",
        ),
        (
            ["send", *SEND],
            {"HERALD_TEMPORAL_ADDRESS": "not a host"},
            "HERALD_TEMPORAL_ADDRESS: 'not a host' is not host:port",
        ),
        (
            ["migrate"],
            {"HERALD_POLICY_NAME": "nope"},
            "HERALD_POLICY_NAME: no packaged policy named 'nope'",
        ),
    ],
    ids=["port", "api-port", "sms-url", "public-url", "database-url", "temporal-address", "policy"],
)
def test_a_setting_that_cannot_be_right_is_one_line_naming_it(
    args: list[str], setting: dict[str, str], says: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    done = run_installed_herald(
        *args, settings={"HERALD_DATA_DIR": str(data), **setting}, cwd=tmp_path
    )
    line = assert_one_line_error(done, args[0])
    assert says in line, line
    assert not data.exists()  # refused before anything was written (a key, a log)


PRODUCTION = {
    "HERALD_ENV": "production",
    "HERALD_SMS_AUTH_TOKEN": "real-token",
    "HERALD_DATA_KEY": "k1:" + "A" * 43 + "=",
    "HERALD_OPERATOR_TOKEN": "break-glass",
    "HERALD_UNSUBSCRIBE_SECRET": "unsubscribe",
}
"""Production's secrets, and none of its addresses."""


def test_production_on_dev_defaults_is_one_line_naming_every_address_it_needs(
    tmp_path: Path,
) -> None:
    settings = {"HERALD_DATA_DIR": str(tmp_path / "data"), **PRODUCTION}
    line = assert_one_line_error(
        run_installed_herald("worker", settings=settings, cwd=tmp_path), "worker"
    )
    assert line == (
        "herald worker: settings: HERALD_ENV=production needs HERALD_DATABASE_URL, "
        "HERALD_TEMPORAL_ADDRESS, HERALD_PUBLIC_BASE_URL, HERALD_SMTP_HOST, "
        "HERALD_SMS_BASE_URL; refusing to start"
    )
    # Set, but to the dev stack's loopback ports: refused as well.
    loopback = {
        "HERALD_DATABASE_URL": "postgresql://herald@db.example.com/herald",
        "HERALD_TEMPORAL_ADDRESS": "temporal.example.com:7233",
        "HERALD_PUBLIC_BASE_URL": "http://127.0.0.1:58080",
        "HERALD_SMTP_HOST": "localhost",
        "HERALD_SMS_BASE_URL": "https://sms.example.com",
    }
    done = run_installed_herald("worker", settings={**settings, **loopback}, cwd=tmp_path)
    assert assert_one_line_error(done, "worker") == (
        "herald worker: settings: HERALD_ENV=production needs HERALD_PUBLIC_BASE_URL not on "
        "loopback, HERALD_SMTP_HOST not on loopback; refusing to start"
    )


def test_a_misspelt_setting_is_refused_in_production_and_warned_of_in_dev(tmp_path: Path) -> None:
    misspelt = {
        "HERALD_DATA_DIR": str(tmp_path / "data"),
        "HERALD_DATABSE_URL": "postgresql://herald@db.example.com/herald",
    }
    done = run_installed_herald("list", settings={**misspelt, **PRODUCTION}, cwd=tmp_path)
    assert assert_one_line_error(done, "list") == (
        "herald list: settings: HERALD_DATABSE_URL is not a setting (did you mean "
        "HERALD_DATABASE_URL?); refusing to start"
    )
    # In dev: one warning line, then the command goes on without it (and, with no
    # database set and no stack here, stops in one line of its own).
    done = run_installed_herald("list", settings=misspelt, cwd=tmp_path)
    warning, refusal = done.stderr.strip().splitlines()
    assert warning == (
        "herald: warning: HERALD_DATABSE_URL is not a setting (did you mean "
        "HERALD_DATABASE_URL?); ignored"
    )
    assert done.returncode == 2 and refusal.startswith("herald list: no running `herald dev`")


@pytest.mark.parametrize("args", [["send", *SEND], ["worker"]], ids=lambda args: args[0])
def test_a_temporal_address_that_does_not_resolve_is_one_line(
    args: list[str], tmp_path: Path
) -> None:
    nowhere = {
        "HERALD_DATA_DIR": str(tmp_path / "data"),
        "HERALD_DATABASE_URL": f"postgresql://herald@127.0.0.1:{free_port()}/herald",
        "HERALD_TEMPORAL_ADDRESS": "temporal.invalid:7233",  # RFC 2606: never resolves
    }
    done = run_installed_herald(*args, settings=nowhere, cwd=tmp_path)
    assert assert_one_line_error(done, args[0]) == (
        f"herald {args[0]}: HERALD_TEMPORAL_ADDRESS=temporal.invalid:7233: the host "
        "temporal.invalid does not resolve"
    )


def test_migrate_against_a_database_that_does_not_answer_writes_no_key(tmp_path: Path) -> None:
    data = tmp_path / "data"
    closed = {
        "HERALD_DATA_DIR": str(data),
        "HERALD_DATABASE_URL": f"postgresql://herald@127.0.0.1:{free_port()}/herald",
    }
    line = assert_one_line_error(
        run_installed_herald("migrate", settings=closed, cwd=tmp_path), "migrate"
    )
    assert "cannot use the ledger database" in line
    assert not (data / "data.key").exists()


@pytest.mark.e2e
def test_a_temporal_namespace_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    # The time-skipping test server answers for any namespace; the dev server does not.
    from devstack import TemporalDevServer

    server = TemporalDevServer(None, port=free_port(), ui_port=None)
    server.start()
    try:
        elsewhere = {
            "HERALD_DATA_DIR": str(tmp_path / "data"),
            "HERALD_DATABASE_URL": f"postgresql://herald@127.0.0.1:{free_port()}/herald",
            "HERALD_TEMPORAL_ADDRESS": server.address,
            "HERALD_TEMPORAL_NAMESPACE": "no-such-namespace",
        }
        for args in (["send", *SEND], ["worker"]):
            done = run_installed_herald(*args, settings=elsewhere, cwd=tmp_path)
            assert assert_one_line_error(done, args[0]) == (
                f"herald {args[0]}: HERALD_TEMPORAL_NAMESPACE=no-such-namespace: no such "
                f"namespace at {server.address}"
            )
    finally:
        server.stop()
