"""One settings object for every Herald process, read from `HERALD_*` environment variables.

Every value has a working embedded default so `herald dev` needs no configuration; production
points the same code at a Temporal cluster, a managed Postgres, a real SMS provider and an
SMTP relay by setting the variables documented in the README.
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from domain.circuit import BreakerSettings
from domain.senders import DEV_EMAIL_SENDER, DEV_SMS_SENDER, SenderBook

if TYPE_CHECKING:
    from domain.policy import Policy

SIMULATOR_AUTH_TOKEN = "simulator-auth-token"
SIMULATOR_SENDGRID_KEY = "SG.simulator-api-key"
SIMULATOR_TELNYX_API_KEY = "simulator-telnyx-api-key"


class TwilioProvider(BaseModel):
    """A Twilio-compatible SMS account (transports.twilio)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["twilio"] = "twilio"
    base_url: str
    """The REST API's base URL, e.g. `https://api.twilio.com`."""
    account_sid: str
    auth_token: SecretStr


class SmtpProvider(BaseModel):
    """An SMTP relay (transports.email)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["smtp"] = "smtp"
    host: str
    port: int = 587
    starttls: bool = True
    username: str | None = None
    password: SecretStr | None = None


class SendGridProvider(BaseModel):
    """A SendGrid-compatible email API with a signed Event Webhook (transports.sendgrid)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["sendgrid"] = "sendgrid"
    base_url: str = "https://api.sendgrid.com"
    api_key: SecretStr


class TelnyxProvider(BaseModel):
    """A Telnyx Messaging v2 account (transports.telnyx)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["telnyx"] = "telnyx"
    base_url: str
    """`https://api.telnyx.com`, or the Telnyx simulator's URL."""
    api_key: SecretStr
    messaging_profile_id: str | None = None
    from_number: str | None = None
    """This account's sender; unset, the sender resolved for the policy's alias."""


AnyProvider = TwilioProvider | TelnyxProvider | SmtpProvider | SendGridProvider
ProviderSettings = Annotated[AnyProvider, Field(discriminator="kind")]
"""One provider account's settings; `kind` says which adapter (domain.providers.KINDS)."""

BUILT_IN_PROVIDERS = ("twilio", "telnyx", "smtp", "sendgrid")
"""The aliases the flat HERALD_SMS_*, HERALD_TELNYX_* and HERALD_SMTP_* settings configure
(`twilio` and `smtp` are the registry's default providers, domain.channels; `telnyx` is
there for a policy that routes to it: `herald dev` runs its simulator), and
HERALD_SENDGRID_* the `sendgrid` email alias (`herald dev`'s default email provider)."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HERALD_", extra="ignore")

    env: Literal["dev", "production"] = "dev"
    """`dev` (embedded defaults, generated secrets) or `production` (every secret required,
    checked whenever a Settings is built: see :meth:`_production_has_its_secrets`)."""
    data_dir: Path = Path(".herald")
    """Everything the embedded stack keeps: Temporal SQLite, Postgres data, keys, mail."""

    database_url: str | None = None
    """Ledger Postgres (SQLAlchemy URL). Unset: the embedded Postgres under `data_dir`."""

    @field_validator("database_url")
    @classmethod
    def _postgres_only(cls, url: str | None) -> str | None:
        scheme = (url or "postgresql://").partition("://")[0]
        if scheme not in ("postgresql", "postgres", "postgresql+psycopg"):
            raise ValueError(
                f"must be a PostgreSQL URL (postgresql://user@host:port/db), not {scheme!r}"
            )
        return url

    postgres_port: int = 55432

    temporal_address: str | None = None
    """Temporal frontend `host:port`. Unset: the dev server started by `herald dev`."""
    temporal_namespace: str = "default"
    temporal_tls: bool = False
    """Speak TLS to Temporal, trusting the system's roots (Temporal Cloud with an API key).
    Any of the three files below turns TLS on by itself."""
    temporal_tls_cert: Path | None = None
    """HERALD_TEMPORAL_TLS_CERT: the client certificate (PEM) for mTLS (Temporal Cloud's
    certificate auth, a self-hosted frontend that requires client certificates)."""
    temporal_tls_key: Path | None = None
    """HERALD_TEMPORAL_TLS_KEY: its private key (PEM); required with the certificate."""
    temporal_tls_ca: Path | None = None
    """HERALD_TEMPORAL_TLS_CA: the CA (PEM) that signed the frontend's certificate, where
    it is not one the system trusts."""
    temporal_tls_server_name: str | None = None
    """The name the frontend's certificate is checked against, where it is not the
    address's host."""
    temporal_api_key: SecretStr | None = None
    """HERALD_TEMPORAL_API_KEY: sent as a bearer token on every call (Temporal Cloud's API
    keys); turns TLS on."""
    temporal_port: int = 57233
    temporal_ui_port: int = 58233
    temporal_ui_url: str | None = None
    """The Temporal Web UI's base URL, for the console's links to a workflow (`herald dev`
    uses its own UI's)."""
    task_queue: str = "herald"
    sms_max_per_second: float = 10.0
    """SMS send and poll run on `<task_queue>-sms`, rate limited by the server for the
    whole fleet at this many activities per second."""
    sms_max_concurrent: int = 20
    provider_max_per_second: dict[str, float] = {}
    """HERALD_PROVIDER_MAX_PER_SECOND, a JSON object: SMS provider alias -> activities per
    second on its own queue (`<task_queue>-sms-<alias>`, used where the policy routes SMS
    to more than one provider); an alias it does not name gets `sms_max_per_second`."""

    worker_metrics_address: str | None = None
    """`host:port` where each worker serves the Temporal SDK's Prometheus metrics."""
    worker_herald_metrics_address: str | None = None
    """`host:port` where each worker serves Herald's own event-time metrics (ledger.metrics:
    scheduled -> submitted, fallbacks, duplicates suppressed, ...)."""

    api_host: str = "127.0.0.1"
    api_port: int = 58080
    ingress_port: int | None = None
    """HERALD_INGRESS_PORT: `herald api` also serves the public ingress here (the provider
    webhooks and the unsubscribe link alone), the one port a proxy exposes to the internet.
    Unset: none (`herald dev` serves everything on one origin)."""
    public_base_url: str | None = None
    """The URL the SMS provider calls (signature checks need it exactly, behind proxies too):
    the public ingress's origin. Unset: the API's own URL, which serves the provider routes
    too (`herald dev`, a local `herald api`)."""
    trusted_proxies: list[str] = []
    """HERALD_TRUSTED_PROXIES, a JSON list of addresses or networks (`["10.0.0.0/8"]`) whose
    X-Forwarded-For names the client. Empty (the default): the client is the socket peer,
    for the access log and the console's sign-in throttle alike."""

    @field_validator("trusted_proxies")
    @classmethod
    def _addresses_or_networks(cls, proxies: list[str]) -> list[str]:
        import ipaddress

        for proxy in proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise ValueError(f"{proxy!r} is not an address or a network") from None
        return proxies

    console_session_hours: float = Field(default=12.0, gt=0, le=24 * 30)
    """A console session ends this long after sign-in, however busy (and after 30 minutes
    without a person's request)."""
    default_country: str = "GB"
    """HERALD_DEFAULT_COUNTRY: the ISO 3166 country the console's search reads a phone
    number in national form for (`07400 000001`), unless the search names another."""

    @field_validator("default_country")
    @classmethod
    def _a_country_with_numbers(cls, country: str) -> str:
        import phonenumbers

        code = country.strip().upper()
        if code not in phonenumbers.SUPPORTED_REGIONS:
            raise ValueError(f"{country!r} is not an ISO 3166 country code with phone numbers")
        return code

    operator_token: SecretStr | None = None
    """HERALD_OPERATOR_TOKEN: a break-glass admin credential, for the first `herald
    principals add` in production and for when every admin's token is lost. Required
    outside dev; unset in dev, where `herald dev` makes a principal for the local user."""
    token: SecretStr | None = None
    """HERALD_TOKEN: the token the CLI acts with; unset, `<data_dir>/operator.token`."""

    sms_base_url: str | None = None
    """Twilio-compatible API base. Unset: the carrier simulator."""
    sms_account_sid: str = "AC00000000000000000000000000000000"
    sms_auth_token: SecretStr = SecretStr(SIMULATOR_AUTH_TOKEN)
    sms_sender: str = DEV_SMS_SENDER
    """The SMS sender for every policy alias `sms_senders` does not name: an E.164 number,
    an alphanumeric sender id or a Messaging Service SID (`MG` + 32 hex)."""
    sms_senders: dict[str, str] = {}
    """HERALD_SMS_SENDERS, a JSON object: policy sender alias -> real sender, e.g.
    `{"herald-us-10dlc": "MG...", "Herald": "Herald", "herald-za": "+27..."}`."""
    simulator_port: int = 58081

    email_provider: str | None = None
    """The provider alias email goes through where the policy names none for email
    (`[providers]`): `smtp` (an SMTP relay: acceptance is the last word), `sendgrid` (a
    SendGrid-compatible HTTP API whose Event Webhook reports delivered, bounces and
    complaints), or an alias of HERALD_PROVIDERS. Unset: `sendgrid` in dev (its
    simulator), `smtp` elsewhere."""
    sendgrid_base_url: str | None = None
    """SendGrid-compatible API base. Unset: the SendGrid simulator `herald dev` starts."""
    sendgrid_api_key: SecretStr = SecretStr(SIMULATOR_SENDGRID_KEY)
    sendgrid_event_public_key: str | None = None
    """The Event Webhook's verification key as SendGrid shows it (base64 DER). Unset in
    dev: the key the simulator of this data folder signs with."""
    sendgrid_event_tolerance_seconds: int = 26 * 3600
    """How old an event batch's signed timestamp may be: SendGrid retries for up to 24
    hours (api.email_events); deduplication by event id makes a replay harmless."""
    email_simulator_port: int = 58083
    telnyx_base_url: str | None = None
    """Telnyx Messaging v2 API base (`https://api.telnyx.com`). Unset: `herald dev`'s
    Telnyx simulator."""
    telnyx_api_key: SecretStr = SecretStr(SIMULATOR_TELNYX_API_KEY)
    telnyx_public_key: str | None = None
    """HERALD_TELNYX_PUBLIC_KEY: the account's Ed25519 public key (base64 of 32 bytes),
    which Telnyx's webhooks are verified with. Unset, `/v1/webhooks/telnyx` refuses every
    event; `herald dev` sets its own simulator's (a key pair made per stack)."""
    telnyx_messaging_profile_id: str | None = None
    """Sent with every Telnyx message (needed for an alphanumeric sender or a number pool)."""
    telnyx_from_number: str | None = None
    """HERALD_TELNYX_FROM_NUMBER: the number the Telnyx account sends from. Unset, Telnyx
    is given the sender resolved for the policy's alias (HERALD_SMS_SENDERS), which must
    then be one Telnyx accepts (an E.164 number on the account, or an alphanumeric id
    with a messaging profile); a Messaging Service SID is Twilio's alone."""
    telnyx_simulator_port: int = 58082

    circuit_failure_threshold: int = 5
    """A provider's circuit opens after this many consecutive failures (a provider-side
    refusal, a refused connection, a 5xx, a timeout) within `circuit_window_seconds`."""
    circuit_window_seconds: float = 60.0
    circuit_cool_down_seconds: float = 30.0
    """How long an open circuit refuses at once before one probe may try (half-open)."""

    def breaker_settings(self) -> BreakerSettings:
        return BreakerSettings(
            failure_threshold=self.circuit_failure_threshold,
            window=timedelta(seconds=self.circuit_window_seconds),
            cool_down=timedelta(seconds=self.circuit_cool_down_seconds),
        )

    smtp_host: str = "127.0.0.1"
    smtp_port: int = 58025
    smtp_starttls: bool = False
    smtp_username: str | None = None
    smtp_password: SecretStr | None = None
    email_sender: str = DEV_EMAIL_SENDER
    """The From for a policy email sender that is an alias (not an address) with no entry
    in `email_senders`."""
    email_senders: dict[str, str] = {}
    """HERALD_EMAIL_SENDERS, a JSON object: policy email sender (alias or From) -> From."""
    providers: dict[str, ProviderSettings] = {}
    """HERALD_PROVIDERS, a JSON object: provider alias -> its settings, e.g.
    `{"twilio-eu": {"kind": "twilio", "base_url": "https://...", "account_sid": "AC...",
    "auth_token": "..."}}`. The policy routes each channel and region to aliases; the
    aliases `twilio` and `smtp` are configured by the HERALD_SMS_* and HERALD_SMTP_*
    settings unless this object names them too."""
    dkim_domain: str | None = None
    """DKIM signing domain; with a selector and a key file, every email is signed."""
    dkim_selector: str | None = None
    dkim_private_key_file: Path | None = None

    unsubscribe_secret: SecretStr | None = None
    """Signs one-click unsubscribe links; separate from the data keys so rotating those
    does not break links already sent."""
    data_key: SecretStr | None = None
    """Base64 AES-256 key (or `kid:base64,kid:base64` for rotation; first encrypts)."""
    pii_retention_days: int = 30
    policy_name: str = "default"
    """The policy activated at migration time: a packaged one (`demo` compresses
    durations) or the path of a policy file in the packaged format (policies/)."""

    @cached_property
    def data_path(self) -> Path:
        return self.data_dir.expanduser().resolve()

    @property
    def api_url(self) -> str:
        return f"http://{self.api_host}:{self.api_port}"

    @property
    def callback_base_url(self) -> str:
        return (self.public_base_url or self.api_url).rstrip("/")

    @property
    def temporal_target(self) -> str:
        return self.temporal_address or f"127.0.0.1:{self.temporal_port}"

    @property
    def resolved_email_provider(self) -> str:
        if self.email_provider:
            return self.email_provider
        return "sendgrid" if self.env == "dev" else "smtp"

    @property
    def sendgrid_api_url(self) -> str:
        return self.sendgrid_base_url or f"http://127.0.0.1:{self.email_simulator_port}"

    @property
    def sendgrid_event_key_file(self) -> Path:
        """Dev only: the simulator's event signing key (private, 0600) and, beside it with
        `.pub`, its public half for the API."""
        return self.data_path / "sendgrid-events.key"

    def resolved_sendgrid_event_public_key(self) -> str | None:
        """HERALD_SENDGRID_EVENT_PUBLIC_KEY, else (in dev) the simulator's public key."""
        if self.sendgrid_event_public_key:
            return self.sendgrid_event_public_key
        public = self.sendgrid_event_key_file.with_suffix(".pub")
        if self.env == "dev" and public.exists():
            return public.read_text().strip()
        return None

    @property
    def sms_api_url(self) -> str:
        return self.sms_base_url or f"http://127.0.0.1:{self.simulator_port}"

    @property
    def telnyx_api_url(self) -> str:
        return self.telnyx_base_url or f"http://127.0.0.1:{self.telnyx_simulator_port}"

    def resolved_database_url(self) -> str:
        """A SQLAlchemy URL on psycopg 3 (the driver Herald installs). A plain libpq URL,
        `postgresql://...` as `herald dev` publishes it or `postgres://...`, gets the
        driver named, since SQLAlchemy 2.0 would otherwise look for psycopg2."""
        url = self.database_url or f"postgresql://postgres@127.0.0.1:{self.postgres_port}/herald"
        scheme, sep, rest = url.partition("://")
        if sep and scheme in ("postgresql", "postgres"):
            return f"postgresql+psycopg://{rest}"
        return url

    def resolved_data_keys(self, *, create: bool = False) -> str:
        """The data key ring: HERALD_DATA_KEY, else (in dev) the data folder's `data.key`.

        Only `herald dev` and `herald migrate` pass `create=True` (the key is generated
        once, 0600). Anything else run where no key exists is in the wrong folder: a key
        made there would encrypt and hash under a key the real stack never sees.
        """
        if self.data_key is not None:
            return self.data_key.get_secret_value()
        if self.env == "production":
            raise RuntimeError("HERALD_DATA_KEY is required outside dev; refusing to start")
        path = self.data_path / "data.key"
        if not create and not path.exists():
            raise MissingDataKey(
                f"no data key in {self.data_path} (`herald dev` and `herald migrate` create "
                "it): run this where `herald dev` runs, set HERALD_DATA_DIR to its data "
                "folder, or set HERALD_DATA_KEY"
            )
        return _dev_secret(path, lambda: "k1:" + _b64(secrets.token_bytes(32)))

    def resolved_unsubscribe_secret(self) -> str:
        if self.unsubscribe_secret is not None:
            return self.unsubscribe_secret.get_secret_value()
        if self.env == "production":
            raise RuntimeError(
                "HERALD_UNSUBSCRIBE_SECRET is required outside dev; refusing to start"
            )
        return _dev_secret(self.data_path / "unsubscribe.secret", lambda: secrets.token_urlsafe(32))

    @model_validator(mode="after")
    def _temporal_tls_is_whole(self) -> Settings:
        """A client certificate comes with its key, and a key with its certificate."""
        if (self.temporal_tls_cert is None) != (self.temporal_tls_key is None):
            given, needs = (
                ("HERALD_TEMPORAL_TLS_CERT", "HERALD_TEMPORAL_TLS_KEY")
                if self.temporal_tls_key is None
                else ("HERALD_TEMPORAL_TLS_KEY", "HERALD_TEMPORAL_TLS_CERT")
            )
            raise ValueError(f"{given} is set without {needs}: mTLS needs both")
        return self

    @model_validator(mode="after")
    def _production_has_its_secrets(self) -> Settings:
        """In production every secret is set explicitly, checked when the settings are
        built, so no caller can forget it (the bench and the tests build Settings()
        directly): the simulator's defaults would let anyone who read this file sign
        receipts, and a generated key would encrypt where no other process looks."""
        if self.env == "dev":
            return self
        missing = [
            name
            for name, unset in (
                (
                    "HERALD_SMS_AUTH_TOKEN",
                    self.sms_auth_token.get_secret_value() == SIMULATOR_AUTH_TOKEN,
                ),
                ("HERALD_DATA_KEY", self.data_key is None),
                ("HERALD_OPERATOR_TOKEN", self.operator_token is None),
                ("HERALD_UNSUBSCRIBE_SECRET", self.unsubscribe_secret is None),
            )
            if unset
        ]
        missing += [
            f"HERALD_PROVIDERS {alias!r} auth_token (not the simulator's)"
            for alias, provider in self.providers.items()
            if isinstance(provider, TwilioProvider)
            and provider.auth_token.get_secret_value() == SIMULATOR_AUTH_TOKEN
        ]
        missing += self._sendgrid_problems()
        if missing:
            raise ValueError(f"HERALD_ENV=production needs {', '.join(missing)}; refusing to start")
        for alias, provider in self.providers.items():
            if (
                isinstance(provider, TwilioProvider)
                and provider.auth_token.get_secret_value() == SIMULATOR_AUTH_TOKEN
            ):
                raise ValueError(
                    f"HERALD_PROVIDERS {alias!r}: the simulator's auth token outside dev; "
                    "refusing to start"
                )
        return self

    def _sendgrid_problems(self) -> list[str]:
        """What a SendGrid account email may go through (HERALD_EMAIL_PROVIDER, or a route of
        the packaged policy) lacks in production: a real API key, and the Event Webhook's
        public key (without it every event is refused, and bounces and complaints never
        suppress)."""
        from domain.channels import EMAIL

        used = {self.resolved_email_provider}
        packaged = self.named_policy()
        if packaged is not None:
            for (_, channel), aliases in packaged.providers.items():
                if channel == EMAIL.name:
                    used |= set(aliases)
        problems: list[str] = []
        for alias, provider in self.provider_settings().items():
            if alias not in used or not isinstance(provider, SendGridProvider):
                continue
            if provider.api_key.get_secret_value() == SIMULATOR_SENDGRID_KEY:
                problems.append(f"a SendGrid API key for email provider {alias!r}")
            if not self.sendgrid_event_public_key:
                problems.append(
                    f"HERALD_SENDGRID_EVENT_PUBLIC_KEY (email provider {alias!r} is SendGrid)"
                )
        return problems

    def named_policy(self) -> Policy | None:
        """The policy `policy_name` names (packaged, or a policy file), parsed; None when
        it names none (a policy loaded by other means: nothing to check against)."""
        import policies
        from domain.policy import load_policy

        try:
            _, document = policies.load(self.policy_name)
        except FileNotFoundError:
            return None
        return load_policy(document)

    def provider_settings(self) -> dict[str, AnyProvider]:
        """Every configured provider account by alias: `twilio` and `smtp` from the flat
        settings, then HERALD_PROVIDERS (which may replace them)."""
        built_in: dict[str, AnyProvider] = {
            "twilio": TwilioProvider(
                base_url=self.sms_api_url,
                account_sid=self.sms_account_sid,
                auth_token=self.sms_auth_token,
            ),
            "telnyx": TelnyxProvider(
                base_url=self.telnyx_api_url,
                api_key=self.telnyx_api_key,
                messaging_profile_id=self.telnyx_messaging_profile_id,
                from_number=self.telnyx_from_number,
            ),
            "smtp": SmtpProvider(
                host=self.smtp_host,
                port=self.smtp_port,
                starttls=self.smtp_starttls,
                username=self.smtp_username,
                password=self.smtp_password,
            ),
            "sendgrid": SendGridProvider(
                base_url=self.sendgrid_api_url, api_key=self.sendgrid_api_key
            ),
        }
        return {**built_in, **self.providers}

    def check_providers(self) -> None:
        """Every provider alias the packaged policy `policy_name` routes to is configured
        with an adapter for its channel. Raises RuntimeError with one line naming the
        alias; the worker calls it before it starts."""
        from domain.providers import ProviderError, check_routes

        packaged = self.named_policy()
        if packaged is None:
            return  # a policy loaded by other means; nothing named to check
        configured = {alias: p.kind for alias, p in self.provider_settings().items()}
        try:
            check_routes(packaged.providers, configured)
        except ProviderError as err:
            raise RuntimeError(f"provider settings: {err}") from None

    def sender_book(self) -> SenderBook:
        """The real sender of every policy alias, checked against the packaged policy
        `policy_name`. Raises RuntimeError with one line naming the bad alias; the worker
        and the API call it before they start."""
        from domain.senders import SenderError

        try:
            book = SenderBook.build(
                sms_default=self.sms_sender,
                sms=self.sms_senders,
                email_default=self.email_sender,
                email=self.email_senders,
            )
            packaged = self.named_policy()  # None: loaded by other means, nothing to check
            if packaged is not None:
                book.check(packaged)
        except SenderError as err:
            raise RuntimeError(f"sender settings: {err}") from None
        return book

    def resolved_operator_token(self) -> str | None:
        """The break-glass token; None in dev when unset (principals do the work there)."""
        if self.operator_token is not None:
            return self.operator_token.get_secret_value()
        if self.env == "production":
            raise RuntimeError("HERALD_OPERATOR_TOKEN is required outside dev; refusing to start")
        return None

    @property
    def token_file(self) -> Path:
        """Where `herald dev` writes its local admin's token, and where the CLI reads one."""
        return self.data_path / "operator.token"

    def cli_token(self) -> str | None:
        """The token the CLI acts with: HERALD_TOKEN, else the data folder's token file."""
        if self.token is not None:
            return self.token.get_secret_value()
        try:
            return self.token_file.read_text().strip() or None
        except FileNotFoundError:
            return None


class MissingDataKey(RuntimeError):
    """No data key where one was expected; the message is one line saying where to look."""


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def _dev_secret(path: Path, make) -> str:  # type: ignore[no-untyped-def]
    """Read a generated dev secret, creating it 0600 on first use (race-safe via O_EXCL)."""
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as handle:
        value = make()
        handle.write(value)
    return value


def write_secret_file(path: Path, value: str) -> None:
    """Write `value` to `path`, readable by its owner only, replacing what was there."""
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value)
    os.replace(partial, path)


def load() -> Settings:
    """The settings from the environment (production's secrets checked as they are built)."""
    return Settings()


def problem(err: Exception) -> str:
    """One line for a settings error: each bad HERALD_* variable and what is wrong with it
    (pydantic's own text spans lines and repeats the value, which may be a secret)."""
    if not isinstance(err, ValidationError):
        lines = str(err).strip().splitlines()
        return lines[0] if lines else type(err).__name__
    lines = []
    for e in err.errors(include_url=False, include_input=False):
        message = e["msg"].removeprefix("Value error, ")
        where = "_".join(str(part) for part in e["loc"]).upper()
        # A check of the whole object (production's secrets) names its variables itself.
        lines.append(f"HERALD_{where}: {message}" if where else message)
    return "; ".join(lines)
