"""Providers as data: settings hold accounts under aliases, the policy routes each channel
and region to an ordered list of aliases, and a route to an alias the settings lack (or
to another channel's account) is refused before a worker starts."""

from __future__ import annotations

import pytest

import policies
from activities import ProviderTransports
from domain import policy, providers
from domain.channels import UnknownChannel
from settings import Settings, SmtpProvider, TwilioProvider

DEFAULT = policies.load_packaged("default")


def with_routes(table: str) -> policy.Policy:
    return policy.load_policy(DEFAULT.replace("[rules]\n", f"{table}\n[rules]\n", 1))


def test_the_packaged_policies_route_to_twilio_and_smtp_everywhere() -> None:
    for name in policies.packaged_names():
        pol = policy.load_policy(policies.load_packaged(name))
        assert set(pol.providers.values()) == {("twilio",), ("smtp",)}
        assert pol.providers_for("EU", "sms") == ("twilio",)
        assert pol.providers_for("US", "email") == ("smtp",)


def test_a_region_refines_the_routes_of_every_region_channel_by_channel() -> None:
    pol = with_routes(
        '[providers]\nsms = ["twilio-us", "twilio"]\n\n'
        '[regions.EU.providers]\nsms = ["twilio-eu"]\n'
    )
    assert pol.providers_for("US", "sms") == ("twilio-us", "twilio")
    assert pol.providers_for("EU", "sms") == ("twilio-eu",)
    assert pol.providers_for("EU", "email") == ("smtp",)
    with pytest.raises(UnknownChannel):
        pol.providers_for("EU", "fax")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[providers]\nfax = ["x"]\n', "providers.fax: not a channel"),
        ("[providers]\nsms = []\n", "providers.sms: must be a non-empty list"),
        ('[providers]\nsms = "twilio"\n', "providers.sms: must be a non-empty list"),
        ('[providers]\nsms = ["Twilio US"]\n', "providers.sms: must be a non-empty list"),
        ('[providers]\nsms = ["a", "a"]\n', "providers.sms: names a provider twice"),
        ('[regions.EU.providers]\nemail = ["x", "x"]\n', "regions.EU.providers.email: names"),
    ],
)
def test_a_malformed_route_is_refused_naming_where(table: str, message: str) -> None:
    with pytest.raises(policy.PolicyError, match=message):
        with_routes(table)


def test_routes_to_configured_accounts_of_the_right_kind_pass() -> None:
    pol = with_routes('[providers]\nsms = ["twilio-eu", "twilio"]\n')
    providers.check_routes(
        pol.providers, {"twilio": "twilio", "twilio-eu": "twilio", "smtp": "smtp"}
    )


def test_a_route_to_an_alias_the_settings_lack_is_refused_naming_it() -> None:
    pol = with_routes('[regions.EU.providers]\nsms = ["twilio-eu"]\n')
    with pytest.raises(providers.ProviderError, match="'twilio-eu' \\(region EU, sms\\)"):
        providers.check_routes(pol.providers, {"twilio": "twilio", "smtp": "smtp"})


def test_a_route_to_another_channels_account_is_refused() -> None:
    pol = with_routes('[providers]\nemail = ["twilio"]\n')
    with pytest.raises(providers.ProviderError, match="sends sms, not email"):
        providers.check_routes(pol.providers, {"twilio": "twilio", "smtp": "smtp"})


def test_the_built_in_aliases_come_from_the_flat_settings_and_json_adds_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HERALD_SMS_BASE_URL", "https://sms.example.net")
    monkeypatch.setenv(
        "HERALD_PROVIDERS",
        '{"twilio-eu": {"kind": "twilio", "base_url": "https://eu.example.net", '
        '"account_sid": "AC1", "auth_token": "s3cr3t-eu"}, '
        '"relay-2": {"kind": "smtp", "host": "mx"}}',
    )
    configured = Settings().provider_settings()
    assert sorted(configured) == ["relay-2", "sendgrid", "smtp", "telnyx", "twilio", "twilio-eu"]
    twilio = configured["twilio"]
    assert isinstance(twilio, TwilioProvider) and twilio.base_url == "https://sms.example.net"
    assert isinstance(configured["relay-2"], SmtpProvider)
    assert "s3cr3t-eu" not in repr(configured["twilio-eu"])  # the token is a SecretStr


def test_a_provider_of_an_unknown_kind_is_a_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERALD_PROVIDERS", '{"x": {"kind": "carrier-pigeon"}}')
    with pytest.raises(ValueError, match="kind"):
        Settings()


def test_the_worker_refuses_a_packaged_policy_routed_to_an_alias_the_settings_lack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = Settings()
    cfg.check_providers()  # the packaged default routes to twilio and smtp: configured
    monkeypatch.setattr(
        "policies.load_packaged",
        lambda name: DEFAULT.replace("[rules]\n", '[providers]\nsms = ["nope"]\n[rules]\n', 1),
    )
    with pytest.raises(RuntimeError, match="provider settings: provider alias 'nope'"):
        cfg.check_providers()


def test_transports_are_picked_by_the_alias_an_attempt_recorded() -> None:
    transports = ProviderTransports("default", {"twilio": "default", "eu": "eu"})
    assert transports.for_alias("eu") == "eu"
    assert transports.for_alias(None) == "default"  # prepared before providers were kept
    assert ProviderTransports("only").for_alias("eu") == "only"  # built with one transport
    with pytest.raises(Exception, match="not configured"):
        transports.for_alias("gone")


def test_sendgrid_is_a_built_in_email_alias_and_json_may_add_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from settings import SendGridProvider

    monkeypatch.setenv("HERALD_SENDGRID_API_KEY", "SG.flat")
    monkeypatch.setenv(
        "HERALD_PROVIDERS",
        '{"sendgrid-eu": {"kind": "sendgrid", "api_key": "SG.eu-key", '
        '"base_url": "https://api.eu.sendgrid.com"}}',
    )
    configured = Settings().provider_settings()
    flat, eu = configured["sendgrid"], configured["sendgrid-eu"]
    assert isinstance(flat, SendGridProvider) and flat.api_key.get_secret_value() == "SG.flat"
    assert isinstance(eu, SendGridProvider) and eu.base_url == "https://api.eu.sendgrid.com"
    assert "SG.eu-key" not in repr(eu)


def test_email_goes_through_the_settings_default_only_where_the_policy_names_none() -> None:
    from domain.policy import load_policy
    from policies import load_packaged

    packaged = load_policy(load_packaged("default"))
    defaults = {"email": ("sendgrid",)}
    assert packaged.providers_for("EU", "email", defaults=defaults) == ("sendgrid",)
    assert packaged.providers_for("EU", "email") == ("smtp",)
    assert packaged.providers_for("EU", "sms", defaults=defaults) == ("twilio",)
    named = load_policy(load_packaged("default") + '\n[providers]\nemail = ["smtp"]\n')
    assert named.providers_for("EU", "email", defaults=defaults) == ("smtp",)


def test_telnyx_is_a_built_in_sms_alias_without_a_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    from settings import TelnyxProvider

    monkeypatch.setenv("HERALD_TELNYX_BASE_URL", "https://api.telnyx.example")
    monkeypatch.setenv(
        "HERALD_PROVIDERS",
        '{"telnyx-eu": {"kind": "telnyx", "base_url": "https://eu.example", "api_key": "k-eu"}}',
    )
    configured = Settings().provider_settings()
    telnyx = configured["telnyx"]
    assert isinstance(telnyx, TelnyxProvider) and telnyx.base_url == "https://api.telnyx.example"
    assert isinstance(configured["telnyx-eu"], TelnyxProvider)
    assert "k-eu" not in repr(configured["telnyx-eu"])
    assert providers.kind("telnyx").channel == "sms" and not providers.kind("telnyx").lookup


def test_the_policy_says_per_category_whether_another_provider_may_take_over() -> None:
    pol = policy.load_policy(
        DEFAULT.replace(
            "[rules.promotional]\n", "[rules.promotional]\nfailover = false\n", 1
        ).replace("[rules]\n", '[providers]\nsms = ["twilio", "telnyx"]\n\n[rules]\n', 1)
    )
    assert pol.providers_for("US", "sms") == ("twilio", "telnyx")
    assert pol.rule_for("US", "sms", "transactional").failover is True  # the default
    assert pol.rule_for("US", "sms", "promotional").failover is False
    with pytest.raises(policy.PolicyError, match="failover"):
        policy.load_policy(DEFAULT.replace("[rules]\n", '[rules]\nfailover = "yes"\n', 1))


async def test_the_worker_builds_one_transport_per_alias_by_its_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import httpx

    from domain import channels
    from transports.sendgrid import SendGridEmail
    from transports.smtp import SmtpEmail
    from transports.telnyx import TelnyxSms
    from transports.twilio import TwilioSms
    from worker import _default_transport, provider_transports

    monkeypatch.setenv(
        "HERALD_PROVIDERS",
        '{"twilio-eu": {"kind": "twilio", "base_url": "https://eu.example.net", '
        '"account_sid": "AC1", "auth_token": "x"}, "relay-2": {"kind": "smtp", "host": "mx"}}',
    )
    async with httpx.AsyncClient() as http:
        sms, email = provider_transports(Settings(), http)
        assert sorted(sms) == ["telnyx", "twilio", "twilio-eu"]
        assert isinstance(sms["telnyx"], TelnyxSms)
        assert all(isinstance(sms[a], TwilioSms) for a in ("twilio", "twilio-eu"))
        assert sorted(email) == ["relay-2", "sendgrid", "smtp"]
        assert all(isinstance(email[a], SmtpEmail) for a in ("relay-2", "smtp"))
        assert isinstance(email["sendgrid"], SendGridEmail)
        assert _default_transport(sms, channels.SMS) is sms["twilio"]
        with pytest.raises(RuntimeError, match="default sms provider 'twilio'"):
            _default_transport(email, channels.SMS)


PRODUCTION_ADDRESSES = {
    "HERALD_DATABASE_URL": "postgresql://herald@ledger-db:5432/herald",
    "HERALD_TEMPORAL_ADDRESS": "temporal:7233",
    "HERALD_PUBLIC_BASE_URL": "https://herald.example.com",
    "HERALD_SMS_BASE_URL": "https://api.twilio.com",
    "HERALD_SMTP_HOST": "smtp.example.com",
}
"""Production takes no dev default address (settings._dev_addresses)."""


def test_outside_dev_a_sendgrid_route_needs_a_real_key_and_the_event_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    production = {
        "HERALD_ENV": "production",
        "HERALD_SMS_AUTH_TOKEN": "real-token",
        "HERALD_DATA_KEY": "k1:" + "A" * 43 + "=",
        "HERALD_OPERATOR_TOKEN": "op",
        "HERALD_UNSUBSCRIBE_SECRET": "u",
        **PRODUCTION_ADDRESSES,
        "HERALD_SENDGRID_BASE_URL": "https://api.sendgrid.com",
    }
    for name, value in production.items():
        monkeypatch.setenv(name, value)
    Settings()  # smtp by default outside dev: nothing more to ask
    monkeypatch.setenv("HERALD_EMAIL_PROVIDER", "sendgrid")
    with pytest.raises(ValueError, match="a SendGrid API key for email provider 'sendgrid'"):
        Settings()
    monkeypatch.setenv("HERALD_SENDGRID_API_KEY", "SG.real")
    with pytest.raises(ValueError, match="HERALD_SENDGRID_EVENT_PUBLIC_KEY"):
        Settings()
    monkeypatch.setenv("HERALD_SENDGRID_EVENT_PUBLIC_KEY", "MFkw...")
    Settings()


def test_production_refuses_a_provider_account_on_the_simulators_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in (
        ("HERALD_ENV", "production"),
        ("HERALD_SMS_AUTH_TOKEN", "real-token"),
        ("HERALD_DATA_KEY", "k1:" + "A" * 43 + "="),
        ("HERALD_OPERATOR_TOKEN", "op"),
        ("HERALD_UNSUBSCRIBE_SECRET", "u"),
        *PRODUCTION_ADDRESSES.items(),
    ):
        monkeypatch.setenv(name, value)
    Settings()  # every secret set: accepted
    monkeypatch.setenv(
        "HERALD_PROVIDERS",
        '{"twilio-eu": {"kind": "twilio", "base_url": "https://eu.example.net", '
        '"account_sid": "AC1", "auth_token": "simulator-auth-token"}}',
    )
    with pytest.raises(ValueError, match="HERALD_PROVIDERS 'twilio-eu'"):
        Settings()
