"""Settings: `env` is one of two words, and production's secrets are checked whenever a
Settings is built, so a caller that builds one directly (the bench, a test) cannot skip
the check that `settings.load()` used to make alone."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import settings
from settings import Settings

SECRETS = {
    "HERALD_SMS_AUTH_TOKEN": "sms-token",
    "HERALD_DATA_KEY": "k1:" + "A" * 43 + "=",
    "HERALD_OPERATOR_TOKEN": "break-glass",
    "HERALD_UNSUBSCRIBE_SECRET": "unsubscribe",
}
ADDRESSES = {
    "HERALD_DATABASE_URL": "postgresql://herald@ledger-db:5432/herald",
    "HERALD_TEMPORAL_ADDRESS": "temporal:7233",
    "HERALD_PUBLIC_BASE_URL": "https://herald.example.com",
    "HERALD_SMS_BASE_URL": "https://api.twilio.com",
    "HERALD_SMTP_HOST": "smtp.example.com",
}
"""What production needs beside its secrets with the packaged `default` policy (SMS through
`twilio`, email through `smtp`)."""
PRODUCTION = {"HERALD_ENV": "production", **SECRETS, **ADDRESSES}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    import os

    for name in list(os.environ):
        if name.startswith("HERALD_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_env_is_dev_or_production_and_nothing_else(clean_env):
    clean_env.setenv("HERALD_ENV", "prod")
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert settings.problem(refused.value) == "HERALD_ENV: Input should be 'dev' or 'production'"


def test_production_built_directly_refuses_naming_every_missing_secret(clean_env):
    clean_env.setenv("HERALD_ENV", "production")
    clean_env.setenv("HERALD_OPERATOR_TOKEN", "break-glass")
    with pytest.raises(ValidationError) as refused:
        Settings()  # as the bench builds it: no load(), no method to remember
    line = settings.problem(refused.value)
    assert line == (
        "HERALD_ENV=production needs HERALD_SMS_AUTH_TOKEN, HERALD_DATA_KEY, "
        "HERALD_UNSUBSCRIBE_SECRET, HERALD_DATABASE_URL, HERALD_TEMPORAL_ADDRESS, "
        "HERALD_PUBLIC_BASE_URL, HERALD_SMTP_HOST, HERALD_SMS_BASE_URL; refusing to start"
    )


def test_production_with_every_secret_and_address_builds(clean_env):
    for name, value in PRODUCTION.items():
        clean_env.setenv(name, value)
    cfg = Settings()
    assert cfg.env == "production"
    assert cfg.resolved_operator_token() == "break-glass"


def test_production_given_the_simulators_sms_token_is_refused(clean_env):
    for name, value in {**SECRETS, **ADDRESSES}.items():
        clean_env.setenv(name, value)
    clean_env.setenv("HERALD_SMS_AUTH_TOKEN", settings.SIMULATOR_AUTH_TOKEN)
    with pytest.raises(ValidationError, match="needs HERALD_SMS_AUTH_TOKEN;"):
        Settings(env="production")


def test_dev_needs_no_secret(clean_env):
    assert Settings().env == "dev"
    assert Settings().resolved_operator_token() is None


def test_the_consoles_settings_check_themselves(clean_env):
    cfg = Settings(default_country="fr", trusted_proxies=["10.0.0.0/8", "192.0.2.7"])
    assert cfg.default_country == "FR" and cfg.console_session_hours == 12
    for name, value, says in (
        ("HERALD_DEFAULT_COUNTRY", "XX", "not an ISO 3166 country code"),
        ("HERALD_TRUSTED_PROXIES", '["10.0.0.0/8", "proxy.example"]', "not an address"),
        ("HERALD_CONSOLE_SESSION_HOURS", "0", "greater than 0"),
    ):
        clean_env.setenv(name, value)
        with pytest.raises(ValidationError) as refused:
            Settings()
        assert settings.problem(refused.value).startswith(name) and says in settings.problem(
            refused.value
        ), settings.problem(refused.value)
        clean_env.delenv(name)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("HERALD_API_PORT", "99999", "HERALD_API_PORT: 99999 is not a port (1-65535)"),
        ("HERALD_POSTGRES_PORT", "0", "HERALD_POSTGRES_PORT: 0 is not a port (1-65535)"),
        ("HERALD_SMTP_PORT", "-25", "HERALD_SMTP_PORT: -25 is not a port (1-65535)"),
        (
            "HERALD_PROVIDERS",
            '{"relay-2": {"kind": "smtp", "host": "mx.example.com", "port": 70000}}',
            "HERALD_PROVIDERS relay-2.smtp.port: 70000 is not a port (1-65535)",
        ),
        (
            "HERALD_SMS_BASE_URL",
            "htp:/bad",
            "HERALD_SMS_BASE_URL: not an http(s) URL with a host (URL scheme should be "
            "'http' or 'https')",
        ),
        (
            "HERALD_PUBLIC_BASE_URL",
            "not a url",
            "HERALD_PUBLIC_BASE_URL: not an http(s) URL with a host (relative URL without a base)",
        ),
        (
            "HERALD_TEMPORAL_UI_URL",
            "http://",
            "HERALD_TEMPORAL_UI_URL: not an http(s) URL with a host (empty host)",
        ),
        ("HERALD_SENDGRID_BASE_URL", "ftp://mail.example.com", "HERALD_SENDGRID_BASE_URL: not an"),
        ("HERALD_TELNYX_BASE_URL", "api.telnyx.com", "HERALD_TELNYX_BASE_URL: not an http(s)"),
        (
            "HERALD_PROVIDERS",
            '{"twilio-eu": {"kind": "twilio", "base_url": "eu.example.net", '
            '"account_sid": "AC1", "auth_token": "t"}}',
            "HERALD_PROVIDERS twilio-eu.twilio.base_url: not an http(s) URL with a host",
        ),
        (
            "HERALD_TEMPORAL_ADDRESS",
            "not a host",
            "HERALD_TEMPORAL_ADDRESS: 'not a host' is not host:port (port 1-65535)",
        ),
        ("HERALD_TEMPORAL_ADDRESS", "temporal:99999", "is not host:port (port 1-65535)"),
        ("HERALD_TEMPORAL_ADDRESS", "::1:7233", "is not host:port"),
        ("HERALD_WORKER_METRICS_ADDRESS", "9464", "HERALD_WORKER_METRICS_ADDRESS: '9464' is not"),
        ("HERALD_WORKER_HERALD_METRICS_ADDRESS", "0.0.0.0", "METRICS_ADDRESS: '0.0.0.0' is not"),
        (
            "HERALD_DATABASE_URL",
            "postgresql://::::",
            "HERALD_DATABASE_URL: not a URL SQLAlchemy can parse (postgresql://user@host:port/db)",
        ),
        (
            "HERALD_DATABASE_URL",
            "postgresql://herald:pw@db:99999/herald",
            "HERALD_DATABASE_URL: 99999 is not a port (1-65535)",
        ),
        (
            "HERALD_POLICY_NAME",
            "nope",
            "HERALD_POLICY_NAME: no packaged policy named 'nope' (packaged: default, demo;",
        ),
        ("HERALD_POLICY_NAME", "/no/such/policy.toml", "cannot read the policy file"),
    ],
)
def test_a_bad_port_url_address_database_url_or_policy_is_one_line_naming_it(
    clean_env, name, value, says
):
    clean_env.setenv(name, value)
    with pytest.raises(ValidationError) as refused:
        Settings()
    line = settings.problem(refused.value)
    assert line.startswith(name) and says in line and "\n" not in line, line
    # Neither a URL's password nor its text is repeated (the user-info may be a secret).
    assert "pw@" not in line and ("URL" not in name or value not in line)


def test_good_addresses_urls_and_ports_are_kept_as_given(clean_env):
    cfg = Settings(
        temporal_address="[::1]:7233",
        worker_metrics_address="0.0.0.0:9464",
        worker_herald_metrics_address="",  # off, as `herald dev` passes it
        public_base_url="https://herald.example.com/base",
        database_url="postgresql:///herald",  # the local socket: no host, no port
        api_port=65535,
    )
    assert cfg.temporal_address == "[::1]:7233"
    assert cfg.worker_herald_metrics_address is None
    assert cfg.callback_base_url == "https://herald.example.com/base"


def test_a_misspelt_name_is_refused_in_production_naming_the_nearest_setting(clean_env):
    for name, value in PRODUCTION.items():
        clean_env.setenv(name, value)
    clean_env.setenv("HERALD_DATABSE_URL", "postgresql://herald@ledger-db/herald")
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert settings.problem(refused.value) == (
        "HERALD_DATABSE_URL is not a setting (did you mean HERALD_DATABASE_URL?); refusing to start"
    )


def test_a_misspelt_name_in_dev_is_one_warning_line_and_herald_s_own_tooling_is_allowed(
    clean_env, capsys
):
    for name in settings.NOT_SETTINGS:
        clean_env.setenv(name, "1")
    assert settings.load().env == "dev"
    assert capsys.readouterr().err == ""
    clean_env.setenv("HERALD_TEMPORAL_ADRESS", "temporal:7233")
    settings.load()
    settings.load()  # once per process, however often the settings are built
    assert capsys.readouterr().err.splitlines() == [
        "herald: warning: HERALD_TEMPORAL_ADRESS is not a setting (did you mean "
        "HERALD_TEMPORAL_ADDRESS?); ignored"
    ]


@pytest.mark.parametrize(
    ("name", "value", "needs"),
    [
        ("HERALD_PUBLIC_BASE_URL", None, "HERALD_PUBLIC_BASE_URL"),
        (
            "HERALD_PUBLIC_BASE_URL",
            "http://127.0.0.1:58080",
            "HERALD_PUBLIC_BASE_URL not on loopback",
        ),
        ("HERALD_SMS_BASE_URL", None, "HERALD_SMS_BASE_URL"),
        ("HERALD_SMS_BASE_URL", "http://localhost:58081", "HERALD_SMS_BASE_URL not on loopback"),
        ("HERALD_SMTP_HOST", None, "HERALD_SMTP_HOST"),
        ("HERALD_SMTP_HOST", "127.0.0.1", "HERALD_SMTP_HOST not on loopback"),
        ("HERALD_SMTP_HOST", "::1", "HERALD_SMTP_HOST not on loopback"),
        ("HERALD_DATABASE_URL", None, "HERALD_DATABASE_URL"),
        ("HERALD_TEMPORAL_ADDRESS", None, "HERALD_TEMPORAL_ADDRESS"),
    ],
)
def test_production_takes_no_dev_default_address(clean_env, name, value, needs):
    for key, given in PRODUCTION.items():
        clean_env.setenv(key, given)
    if value is None:
        clean_env.delenv(name)
    else:
        clean_env.setenv(name, value)
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert settings.problem(refused.value) == (
        f"HERALD_ENV=production needs {needs}; refusing to start"
    )


def test_production_asks_only_for_the_providers_a_message_may_go_through(clean_env):
    for key, given in PRODUCTION.items():
        clean_env.setenv(key, given)
    # Email through SendGrid: the SMTP host is no longer needed, SendGrid's URL is.
    clean_env.delenv("HERALD_SMTP_HOST")
    clean_env.setenv("HERALD_EMAIL_PROVIDER", "sendgrid")
    clean_env.setenv("HERALD_SENDGRID_API_KEY", "SG.real")
    clean_env.setenv("HERALD_SENDGRID_EVENT_PUBLIC_KEY", "MFkw...")
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert settings.problem(refused.value) == (
        "HERALD_ENV=production needs HERALD_SENDGRID_BASE_URL; refusing to start"
    )
    # An account of HERALD_PROVIDERS the route goes through is checked for loopback too.
    clean_env.setenv(
        "HERALD_PROVIDERS",
        '{"sendgrid": {"kind": "sendgrid", "base_url": "http://127.0.0.1:58083", '
        '"api_key": "SG.real"}}',
    )
    with pytest.raises(ValidationError, match="HERALD_PROVIDERS 'sendgrid' not on loopback"):
        Settings()
    clean_env.delenv("HERALD_PROVIDERS")
    clean_env.setenv("HERALD_SENDGRID_BASE_URL", "https://api.sendgrid.com")
    assert Settings().resolved_email_provider == "sendgrid"


def test_starttls_is_on_in_production_unless_turned_off_by_name(clean_env):
    assert Settings().provider_settings()["smtp"].starttls is False  # dev's sink
    for key, given in PRODUCTION.items():
        clean_env.setenv(key, given)
    assert Settings().provider_settings()["smtp"].starttls is True
    clean_env.setenv("HERALD_SMTP_STARTTLS", "false")
    assert Settings().provider_settings()["smtp"].starttls is False


def test_secrets_come_from_the_secrets_folder_and_the_environment_wins(clean_env, tmp_path):
    (tmp_path / "herald_data_key").write_text("k1:" + "B" * 43 + "=\n")
    (tmp_path / "HERALD_OPERATOR_TOKEN").write_text("from-a-file\n")
    for key, given in PRODUCTION.items():
        clean_env.setenv(key, given)
    clean_env.delenv("HERALD_DATA_KEY")
    clean_env.delenv("HERALD_OPERATOR_TOKEN")
    clean_env.setenv("HERALD_UNSUBSCRIBE_SECRET", "from-the-environment")
    (tmp_path / "herald_unsubscribe_secret").write_text("from-a-file")
    clean_env.setenv("HERALD_SECRETS_DIR", str(tmp_path))
    cfg = Settings()
    assert cfg.resolved_data_keys() == "k1:" + "B" * 43 + "="
    assert cfg.resolved_operator_token() == "from-a-file"
    assert cfg.resolved_unsubscribe_secret() == "from-the-environment"


def test_a_secrets_folder_that_is_not_one_is_one_line(clean_env, tmp_path):
    clean_env.setenv("HERALD_SECRETS_DIR", str(tmp_path / "absent"))
    with pytest.raises(ValueError) as refused:
        Settings()
    assert settings.problem(refused.value) == (
        f"HERALD_SECRETS_DIR: {tmp_path / 'absent'} is not a folder"
    )


def test_run_secrets_is_the_secrets_folder_when_it_exists(clean_env, tmp_path):
    (tmp_path / "herald_operator_token").write_text("mounted")
    clean_env.setattr(settings, "RUN_SECRETS", tmp_path)
    assert Settings().resolved_operator_token() == "mounted"
    clean_env.setattr(settings, "RUN_SECRETS", tmp_path / "absent")
    assert Settings().resolved_operator_token() is None


def test_the_readme_settings_table_names_every_setting_and_nothing_else():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Pointing it at real services", 1)[1].split("\n## ", 1)[0]
    named: set[str] = set()
    for row in section.splitlines():
        if row.startswith("| ") and not row.startswith("|---"):
            cells = re.split(r"(?<!\\)\|", row)  # `\|` inside a cell is not a border
            named |= set(re.findall(r"HERALD_[A-Z0-9_]+", cells[2]))
    settings_names = set(settings.setting_names())
    assert sorted(settings_names - named) == [], "settings without a README row"
    assert sorted(named - settings_names) == [], "README rows naming no setting"


def test_production_needs_the_url_of_a_provider_the_policy_routes_to(clean_env, tmp_path):
    import policies

    routed = tmp_path / "failover.toml"
    routed.write_text(
        policies.load_packaged("default").replace(
            "[rules]\n", '[providers]\nsms = ["twilio", "telnyx"]\n\n[rules]\n', 1
        )
    )
    for key, given in PRODUCTION.items():
        clean_env.setenv(key, given)
    assert Settings().used_provider_aliases() == {"twilio", "smtp"}
    clean_env.setenv("HERALD_POLICY_NAME", str(routed))
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert settings.problem(refused.value) == (
        "HERALD_ENV=production needs HERALD_TELNYX_BASE_URL; refusing to start"
    )
    clean_env.setenv("HERALD_TELNYX_BASE_URL", "https://api.telnyx.com")
    assert Settings().used_provider_aliases() == {"twilio", "telnyx", "smtp"}


def test_production_outside_a_git_checkout_needs_a_build_id(clean_env):
    """An image has no git: its default build id is the version alone, the same for every
    image, so production asks for HERALD_BUILD_ID rather than run two builds under one id."""
    for name, value in PRODUCTION.items():
        clean_env.setenv(name, value)
    clean_env.setattr(settings, "default_build_id", lambda: "0.1.0")
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert settings.problem(refused.value) == (
        "HERALD_ENV=production needs HERALD_BUILD_ID (no git commit to derive one from); "
        "refusing to start"
    )
    clean_env.setenv("HERALD_BUILD_ID", "2026-12-07.1")
    assert Settings().resolved_build_id() == "2026-12-07.1"
    clean_env.setenv("HERALD_WORKER_VERSIONING", "false")
    clean_env.delenv("HERALD_BUILD_ID")
    assert Settings().env == "production"
