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
        "HERALD_UNSUBSCRIBE_SECRET; refusing to start"
    )


def test_production_with_every_secret_builds(clean_env):
    clean_env.setenv("HERALD_ENV", "production")
    for name, value in SECRETS.items():
        clean_env.setenv(name, value)
    cfg = Settings()
    assert cfg.env == "production"
    assert cfg.resolved_operator_token() == "break-glass"


def test_production_given_the_simulators_sms_token_is_refused(clean_env):
    for name, value in SECRETS.items():
        clean_env.setenv(name, value)
    clean_env.setenv("HERALD_SMS_AUTH_TOKEN", settings.SIMULATOR_AUTH_TOKEN)
    with pytest.raises(ValidationError, match="needs HERALD_SMS_AUTH_TOKEN;"):
        Settings(env="production")


def test_dev_needs_no_secret(clean_env):
    assert Settings().env == "dev"
    assert Settings().resolved_operator_token() is None
