"""One settings object for every Herald process, read from `HERALD_*` environment variables.

Every value has a working embedded default so `herald dev` needs no configuration; production
points the same code at a Temporal cluster, a managed Postgres, a real SMS provider and an
SMTP relay by setting the variables documented in the README (or files in the secrets
folder, :func:`secrets_folder`).

Every value is checked as the settings are built, wherever they are built (the CLI, the
worker, the API, the bench, a test), and :func:`problem` makes a refusal one line naming
the variable: ports, URLs, `host:port` addresses, the database URL, the policy name, and
HERALD_* names that are no setting. Production takes no dev default
(:meth:`Settings._production_takes_no_dev_default`).

The settings are grouped by section, one base class each (the embedded stack, Temporal and
the workers, the ledger and its keys, the API and the console, the SMS and email providers,
more provider accounts and the circuit, the policy and retention), each with its own checks
and the values derived from it; `Settings` combines them and keeps only what spans
sections. A new setting goes in its section, and in the README's table.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from datetime import timedelta
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
)

from domain.circuit import BreakerSettings
from domain.senders import DEV_EMAIL_SENDER, DEV_SMS_SENDER, SenderBook

if TYPE_CHECKING:
    from domain.policy import Policy

SIMULATOR_AUTH_TOKEN = "simulator-auth-token"
SIMULATOR_SENDGRID_KEY = "SG.simulator-api-key"
SIMULATOR_TELNYX_API_KEY = "simulator-telnyx-api-key"


def check_port(port: int) -> int:
    """A TCP port a server can listen on or a client reach: 1 to 65535. Not every library
    refuses another number (`herald api --port 99999` logged :99999 and listened on a
    port the kernel picked)."""
    if not 1 <= port <= 65535:
        raise ValueError(f"{port} is not a port (1-65535)")
    return port


def check_port_or_any(port: int) -> int:
    """A port, or 0: any free one, for a server `herald dev` binds itself and records (its
    simulators and SMTP sink; the tests and the bench start stacks side by side so)."""
    return port if port == 0 else check_port(port)


def check_http_url(url: str) -> str:
    """An http(s) URL with a host, parsed by pydantic's own URL type; kept as written."""
    from pydantic import HttpUrl, TypeAdapter

    try:
        TypeAdapter(HttpUrl).validate_python(url)
    except ValidationError as err:
        why = err.errors(include_url=False)[0]["msg"].removeprefix("Input should be a valid URL, ")
        # Not repeating the URL: its user-info part may be a credential.
        raise ValueError(f"not an http(s) URL with a host ({why})") from None
    return url


def check_host_port(address: str) -> str:
    """`host:port` (an IPv6 host in brackets, `[::1]:7233`), the port in range."""
    host, sep, port = address.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if (
        not sep
        or not host
        or not port.isdigit()
        or any(c.isspace() or c in "/@" for c in host)
        or (":" in host and not bracketed)
        or not 1 <= int(port) <= 65535
    ):
        raise ValueError(f"{address!r} is not host:port (port 1-65535)")
    return address


def is_loopback(host: str | None) -> bool:
    """True for a host that names this machine (`localhost`, 127.0.0.0/8, ::1, 0.0.0.0):
    in production no other process, and no provider calling back, could mean it."""
    import ipaddress

    if not host:
        return True
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def _url_host(url: str) -> str | None:
    from urllib.parse import urlsplit

    return urlsplit(url).hostname


def _blank_is_unset(value: object) -> object:
    return None if value == "" else value


Port = Annotated[int, AfterValidator(check_port)]
"""A TCP port, 1-65535."""
BindPort = Annotated[int, AfterValidator(check_port_or_any)]
"""A port of a server `herald dev` starts, or 0 for any free one."""
HttpUrlText = Annotated[str, AfterValidator(check_http_url)]
"""An http(s) URL with a host, kept as the string given."""
Address = Annotated[str, AfterValidator(check_host_port)]
"""`host:port`."""
OptionalAddress = Annotated[Address | None, BeforeValidator(_blank_is_unset)]
"""`host:port`, or unset (empty counts as unset: `herald dev` passes an address that is
off as "")."""


class TwilioProvider(BaseModel):
    """A Twilio-compatible SMS account (transports.twilio)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["twilio"] = "twilio"
    base_url: HttpUrlText
    """The REST API's base URL, e.g. `https://api.twilio.com`."""
    account_sid: str
    auth_token: SecretStr


class SmtpProvider(BaseModel):
    """An SMTP relay (transports.smtp)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["smtp"] = "smtp"
    host: str
    port: Port = 587
    starttls: bool = True
    username: str | None = None
    password: SecretStr | None = None


class SendGridProvider(BaseModel):
    """A SendGrid-compatible email API with a signed Event Webhook (transports.sendgrid)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["sendgrid"] = "sendgrid"
    base_url: HttpUrlText = "https://api.sendgrid.com"
    api_key: SecretStr


class TelnyxProvider(BaseModel):
    """A Telnyx Messaging v2 account (transports.telnyx)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["telnyx"] = "telnyx"
    base_url: HttpUrlText
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


class EmbeddedStack(BaseSettings):
    """Dev or production, and what the embedded stack `herald dev` starts keeps and listens
    on: its folder and its servers' ports. Every section builds on it (a default address is
    one of these ports; a generated secret lives in the folder)."""

    env: Literal["dev", "production"] = "dev"
    """`dev` (embedded defaults, generated secrets) or `production` (every secret required,
    checked whenever a Settings is built: see :meth:`_production_takes_no_dev_default`)."""
    data_dir: Path = Path(".herald")
    """Everything the embedded stack keeps: Temporal SQLite, Postgres data, keys, mail."""

    secrets_dir: Path | None = None
    """HERALD_SECRETS_DIR: a folder of files, one per setting, named as the variable
    (`herald_data_key` or `HERALD_DATA_KEY`) and holding its value, as Docker and
    Kubernetes mount secrets. Unset: `/run/secrets` when it exists. A variable in the
    environment wins over a file (pydantic-settings' secrets_dir). Read from the
    environment before the other settings (:func:`secrets_folder`), so only the
    variable names a folder: `Settings(secrets_dir=...)` reads nothing."""

    # The servers `herald dev` starts (devstack/ports.py); elsewhere each is replaced by
    # its address: HERALD_TEMPORAL_ADDRESS, HERALD_DATABASE_URL, HERALD_*_BASE_URL.
    temporal_port: Port = 57233
    temporal_ui_port: Port = 58233
    postgres_port: Port = 55432
    simulator_port: BindPort = 58081
    email_simulator_port: BindPort = 58083
    telnyx_simulator_port: BindPort = 58082

    @cached_property
    def data_path(self) -> Path:
        return self.data_dir.expanduser().resolve()


class TemporalAndWorkers(EmbeddedStack):
    """The Temporal cluster, the workers that join it (Worker Versioning) and the task
    queues' rates."""

    temporal_address: Address | None = None
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

    temporal_ui_url: HttpUrlText | None = None
    """The Temporal Web UI's base URL, for the console's links to a workflow (`herald dev`
    uses its own UI's)."""

    task_queue: str = "herald"
    worker_deployment: str = "herald"
    """The Worker Deployment every Herald worker joins (Worker Versioning,
    docs/operations.md, "Deploying a new build")."""
    build_id: str | None = None
    """HERALD_BUILD_ID: this worker's build in the deployment. Unset: the package version
    plus the source's git commit where one is known (`0.1.0+g3506597`), else the version
    alone (:meth:`resolved_build_id`). An image sets it at build time."""
    worker_versioning: bool = True
    """Run versioned workers (a deployment name and a build id; NotificationWorkflow
    pinned to the build that started it). False only for a Temporal server without Worker
    Versioning (before 1.29.1)."""
    sms_max_per_second: float = 10.0
    """SMS send and poll run on `<task_queue>-sms`, rate limited by the server for the
    whole fleet at this many activities per second."""
    sms_max_concurrent: int = 20
    provider_max_per_second: dict[str, float] = {}
    """HERALD_PROVIDER_MAX_PER_SECOND, a JSON object: SMS provider alias -> activities per
    second on its own queue (`<task_queue>-sms-<alias>`, used where the policy routes SMS
    to more than one provider); an alias it does not name gets `sms_max_per_second`."""

    worker_metrics_address: OptionalAddress = None
    """`host:port` where each worker serves the Temporal SDK's Prometheus metrics."""
    worker_herald_metrics_address: OptionalAddress = None
    """`host:port` where each worker serves Herald's own event-time metrics (ledger.metrics:
    scheduled -> submitted, fallbacks, duplicates suppressed, ...)."""

    @property
    def temporal_target(self) -> str:
        return self.temporal_address or f"127.0.0.1:{self.temporal_port}"

    def resolved_build_id(self) -> str:
        """HERALD_BUILD_ID, else `<package version>+<git commit>` (the version alone where
        the source is no git checkout, or git is missing). Two workers of different code
        must not share a build id: a checkout with uncommitted changes needs one set."""
        if self.build_id:
            return self.build_id
        return default_build_id()

    @model_validator(mode="after")
    def _temporal_tls_is_whole(self) -> TemporalAndWorkers:
        """A client certificate comes with its key, and a key with its certificate."""
        if (self.temporal_tls_cert is None) != (self.temporal_tls_key is None):
            given, needs = (
                ("HERALD_TEMPORAL_TLS_CERT", "HERALD_TEMPORAL_TLS_KEY")
                if self.temporal_tls_key is None
                else ("HERALD_TEMPORAL_TLS_KEY", "HERALD_TEMPORAL_TLS_CERT")
            )
            raise ValueError(f"{given} is set without {needs}: mTLS needs both")
        return self


class LedgerAndKeys(EmbeddedStack):
    """The ledger's Postgres, the keys that encrypt and sign what it keeps, the business
    keys' namespace and where attachments live."""

    database_url: str | None = None
    """Ledger Postgres (SQLAlchemy URL). Unset: the embedded Postgres under `data_dir`."""

    @field_validator("database_url")
    @classmethod
    def _postgres_only(cls, url: str | None) -> str | None:
        if url is None:
            return None
        scheme = url.partition("://")[0]
        if scheme not in ("postgresql", "postgres", "postgresql+psycopg"):
            raise ValueError(
                f"must be a PostgreSQL URL (postgresql://user@host:port/db), not {scheme!r}"
            )
        from sqlalchemy.engine import make_url

        try:
            port = make_url(url).port
        except Exception:  # noqa: BLE001 - SQLAlchemy's parser raises more than one kind
            # Its message would repeat part of the URL, which may hold the password.
            raise ValueError(
                "not a URL SQLAlchemy can parse (postgresql://user@host:port/db)"
            ) from None
        if port is not None:
            check_port(port)
        return url

    data_key: SecretStr | None = None
    """Base64 AES-256 key (or `kid:base64,kid:base64` for rotation; first encrypts)."""

    unsubscribe_secret: SecretStr | None = None
    """Signs one-click unsubscribe links; separate from the data keys so rotating those
    does not break links already sent."""

    key_namespace: str = "starter"
    """The namespace of the business keys a Python app records in-process through the
    starter client (domain.keys.DEFAULT_NAMESPACE by default; docs/api.md, "How keys are
    scoped"). A principal's requests use the principal's own namespace instead."""

    @field_validator("key_namespace")
    @classmethod
    def _a_namespace(cls, namespace: str) -> str:
        from domain import key_privacy, keys

        try:
            keys.validate_namespace(namespace)
            key_privacy.refuse_contact_data_in_namespace(namespace)
        except keys.InvalidKey as err:
            raise ValueError(str(err)) from None
        return namespace

    artifact_store: Literal["folder", "postgres"] = "folder"
    """HERALD_ARTIFACT_STORE: where attachment bytes live (ledger/artifacts.py): `folder`,
    `<data_dir>/artifacts` (one host's: only the processes that share it reach it), or
    `postgres`, the ledger's `artifact_content` table, which every worker reaches."""
    attachment_max_bytes: int = Field(default=10 * 1024 * 1024, ge=1, le=64 * 1024 * 1024)
    """HERALD_ATTACHMENT_MAX_BYTES: the largest attachment `POST /v1/attachments` takes
    (413 beyond it, naming the limit)."""

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


class ApiAndConsole(EmbeddedStack):
    """`herald api`: where it listens, the public origin providers call back, the console's
    sessions and search, and the credentials operators and the CLI act with."""

    api_host: str = "127.0.0.1"
    api_port: Port = 58080
    ingress_port: Port | None = None
    """HERALD_INGRESS_PORT: `herald api` also serves the public ingress here (the provider
    webhooks and the unsubscribe link alone), the one port a proxy exposes to the internet.
    Unset: none (`herald dev` serves everything on one origin)."""
    public_base_url: HttpUrlText | None = None
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

    @property
    def api_url(self) -> str:
        return f"http://{self.api_host}:{self.api_port}"

    @property
    def callback_base_url(self) -> str:
        return (self.public_base_url or self.api_url).rstrip("/")

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


class SmsProviders(EmbeddedStack):
    """The built-in SMS accounts: Twilio-compatible (alias `twilio`) and Telnyx (alias
    `telnyx`), their senders, and the simulators `herald dev` points them at when unset."""

    sms_base_url: HttpUrlText | None = None
    """Twilio-compatible API base. Unset: the carrier simulator."""
    sms_account_sid: str = "AC00000000000000000000000000000000"
    sms_auth_token: SecretStr = SecretStr(SIMULATOR_AUTH_TOKEN)
    sms_sender: str = DEV_SMS_SENDER
    """The SMS sender for every policy alias `sms_senders` does not name: an E.164 number,
    an alphanumeric sender id or a Messaging Service SID (`MG` + 32 hex)."""
    sms_senders: dict[str, str] = {}
    """HERALD_SMS_SENDERS, a JSON object: policy sender alias -> real sender, e.g.
    `{"herald-us-10dlc": "MG...", "Herald": "Herald", "herald-za": "+27..."}`."""

    telnyx_base_url: HttpUrlText | None = None
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

    @property
    def sms_api_url(self) -> str:
        return self.sms_base_url or f"http://127.0.0.1:{self.simulator_port}"

    @property
    def telnyx_api_url(self) -> str:
        return self.telnyx_base_url or f"http://127.0.0.1:{self.telnyx_simulator_port}"


class EmailProviders(EmbeddedStack):
    """The built-in email accounts: SendGrid-compatible (alias `sendgrid`) and an SMTP relay
    (alias `smtp`), the senders' From and DKIM signing."""

    email_provider: str | None = None
    """The provider alias email goes through where the policy names none for email
    (`[providers]`): `smtp` (an SMTP relay: acceptance is the last word), `sendgrid` (a
    SendGrid-compatible HTTP API whose Event Webhook reports delivered, bounces and
    complaints), or an alias of HERALD_PROVIDERS. Unset: `sendgrid` in dev (its
    simulator), `smtp` elsewhere."""
    sendgrid_base_url: HttpUrlText | None = None
    """SendGrid-compatible API base. Unset: the SendGrid simulator `herald dev` starts."""
    sendgrid_api_key: SecretStr = SecretStr(SIMULATOR_SENDGRID_KEY)
    sendgrid_event_public_key: str | None = None
    """The Event Webhook's verification key as SendGrid shows it (base64 DER). Unset in
    dev: the key the simulator of this data folder signs with."""
    sendgrid_event_tolerance_seconds: int = 26 * 3600
    """How old an event batch's signed timestamp may be: SendGrid retries for up to 24
    hours (api.ingress.sendgrid); deduplication by event id makes a replay harmless."""

    smtp_host: str = "127.0.0.1"
    """The SMTP relay (alias `smtp`). Unset: `herald dev`'s SMTP sink; required outside dev
    where email goes through SMTP."""
    smtp_port: BindPort = 58025
    smtp_starttls: bool | None = None
    """HERALD_SMTP_STARTTLS. Unset: on in production, off in dev (the sink speaks plain
    SMTP); production turns it off only when this says `false`."""
    smtp_username: str | None = None
    smtp_password: SecretStr | None = None
    email_sender: str = DEV_EMAIL_SENDER
    """The From for a policy email sender that is an alias (not an address) with no entry
    in `email_senders`."""
    email_senders: dict[str, str] = {}
    """HERALD_EMAIL_SENDERS, a JSON object: policy email sender (alias or From) -> From."""

    dkim_domain: str | None = None
    """DKIM signing domain; with a selector and a key file, every email is signed."""
    dkim_selector: str | None = None
    dkim_private_key_file: Path | None = None

    @property
    def resolved_email_provider(self) -> str:
        if self.email_provider:
            return self.email_provider
        return "sendgrid" if self.env == "dev" else "smtp"

    @property
    def resolved_smtp_starttls(self) -> bool:
        """HERALD_SMTP_STARTTLS, else on in production (off in dev, for the sink)."""
        if self.smtp_starttls is not None:
            return self.smtp_starttls
        return self.env == "production"

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


class ProviderAccounts(EmbeddedStack):
    """More provider accounts than the built-in ones (HERALD_PROVIDERS), and the circuit
    every provider's calls go through."""

    providers: dict[str, ProviderSettings] = {}
    """HERALD_PROVIDERS, a JSON object: provider alias -> its settings, e.g.
    `{"twilio-eu": {"kind": "twilio", "base_url": "https://...", "account_sid": "AC...",
    "auth_token": "..."}}`. The policy routes each channel and region to aliases; the
    aliases `twilio` and `smtp` are configured by the HERALD_SMS_* and HERALD_SMTP_*
    settings unless this object names them too."""

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


class PolicyAndRetention(EmbeddedStack):
    """The policy activated at migration time and how long readable contact data is kept."""

    policy_name: str = "default"
    """The policy activated at migration time: a packaged one (`demo` compresses
    durations) or the path of a policy file in the packaged format (policies/). Checked
    when the settings are built, so `herald migrate`, the worker and the API all refuse a
    name that is neither."""

    @field_validator("policy_name")
    @classmethod
    def _a_policy_that_loads(cls, spec: str) -> str:
        import policies
        from domain.policy import PolicyError, load_policy

        try:
            _, document = policies.load(spec)
            load_policy(document)
        except (FileNotFoundError, PolicyError) as err:
            raise ValueError(str(err).strip().splitlines()[0]) from None
        return spec

    pii_retention_days: int = 30

    def named_policy(self) -> Policy:
        """The policy `policy_name` names (packaged, or a policy file), parsed (the name
        was checked when the settings were built)."""
        import policies
        from domain.policy import load_policy

        _, document = policies.load(self.policy_name)
        return load_policy(document)


class Settings(
    # Last to first: pydantic reads the fields of the last base first, so a line naming
    # several bad variables (:func:`problem`) names them in the order of the sections above.
    PolicyAndRetention,
    ProviderAccounts,
    EmailProviders,
    SmsProviders,
    ApiAndConsole,
    LedgerAndKeys,
    TemporalAndWorkers,
):
    """Every setting, one section per base class above; here only what spans sections:
    where the values come from, the checks production makes of them all, and the provider
    accounts, senders and routes built from several sections."""

    model_config = SettingsConfigDict(env_prefix="HERALD_", extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the environment, then the secrets folder's files (secrets_dir)."""
        folder = secrets_folder()
        files = () if folder is None else (SecretsSettingsSource(settings_cls, secrets_dir=folder),)
        return (init_settings, env_settings, dotenv_settings, *files)

    @model_validator(mode="after")
    def _production_takes_no_dev_default(self) -> Settings:
        """In production every secret and every address is set explicitly, checked when the
        settings are built, so no caller can forget it (the bench and the tests build
        Settings() directly): the simulator's defaults would let anyone who read this file
        sign receipts, a generated key would encrypt where no other process looks, and an
        address left at its default would send to a simulator's loopback port, with
        callbacks to loopback that no provider can reach. All of it is named at once."""
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
                # Outside a git checkout (an image) the default is the version alone, the
                # same for every image of it: two builds under one id would be one version
                # to Temporal, and a pinned run would replay on code it did not start on.
                (
                    "HERALD_BUILD_ID (no git commit to derive one from)",
                    self.worker_versioning and not self.build_id and "+" not in default_build_id(),
                ),
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
        missing += self._dev_addresses()
        if unknown := unknown_names(os.environ):
            # Refused before what is missing: a misspelt name is often why something is.
            raise ValueError("; ".join(map(not_a_setting, unknown)) + "; refusing to start")
        if missing:
            raise ValueError(f"HERALD_ENV=production needs {', '.join(missing)}; refusing to start")
        return self

    def _dev_addresses(self) -> list[str]:
        """The addresses production must be given rather than take from dev: the ledger,
        Temporal, the public URL providers call back, and the URL or host of every provider
        a message may go through (used_provider_aliases). A loopback one is refused too,
        except for the ledger and Temporal (a sidecar proxy on 127.0.0.1 is a real
        deployment)."""
        problems = [
            name
            for name, value in (
                ("HERALD_DATABASE_URL", self.database_url),
                ("HERALD_TEMPORAL_ADDRESS", self.temporal_address),
            )
            if value is None
        ]

        def elsewhere(name: str, url: str | None) -> None:
            if url is None:
                problems.append(name)
            elif is_loopback(_url_host(url)):
                problems.append(f"{name} not on loopback")

        elsewhere("HERALD_PUBLIC_BASE_URL", self.public_base_url)
        flat = {
            "twilio": ("HERALD_SMS_BASE_URL", self.sms_base_url),
            "telnyx": ("HERALD_TELNYX_BASE_URL", self.telnyx_base_url),
            "sendgrid": ("HERALD_SENDGRID_BASE_URL", self.sendgrid_base_url),
        }
        for alias in sorted(self.used_provider_aliases()):
            provider = self.providers.get(alias)
            if provider is not None:
                host = provider.host if isinstance(provider, SmtpProvider) else None
                if is_loopback(host or _url_host(getattr(provider, "base_url", ""))):
                    problems.append(f"HERALD_PROVIDERS {alias!r} not on loopback")
            elif alias == "smtp":
                given = "smtp_host" in self.model_fields_set
                elsewhere("HERALD_SMTP_HOST", f"smtp://{self.smtp_host}" if given else None)
            elif alias in flat:
                elsewhere(*flat[alias])
        return problems

    def used_provider_aliases(self) -> set[str]:
        """Every provider alias a message may go through under the packaged policy
        `policy_name`: its routes, and the channels' defaults where it names none
        (HERALD_EMAIL_PROVIDER for email)."""
        from domain.channels import EMAIL

        policy = self.named_policy()
        defaults = {EMAIL.name: (self.resolved_email_provider,)}
        return {
            alias
            for region, channel in policy.providers
            for alias in policy.providers_for(region, channel, defaults=defaults)
        }

    def _sendgrid_problems(self) -> list[str]:
        """What a SendGrid account email may go through lacks in production: a real API
        key, and the Event Webhook's public key (without it every event is refused, and
        bounces and complaints never suppress)."""
        used = self.used_provider_aliases()
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
                starttls=self.resolved_smtp_starttls,
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
            book.check(self.named_policy())
        except SenderError as err:
            raise RuntimeError(f"sender settings: {err}") from None
        return book


NOT_SETTINGS = frozenset(
    {
        "HERALD_DB_PASSWORD",  # docker-compose.yml's ledger Postgres password (.env)
        "HERALD_TEST_DATABASE_URL",  # tests/conftest.py: a Postgres of your own for the tests
        "HERALD_RECORD_HISTORIES",  # tests/workflows: record the replay tests' histories
        "HERALD_CONSOLE_SCREENSHOTS",  # tests/console: write docs/console's screenshots
    }
)
"""HERALD_* names Herald's own tooling reads that are not settings; allowed beside them."""

RUN_SECRETS = Path("/run/secrets")
"""Where Docker and Kubernetes mount secrets: the secrets folder when it exists and
HERALD_SECRETS_DIR is unset."""


def setting_names() -> list[str]:
    """Every setting's variable, `HERALD_` and the field's name in capitals."""
    return [f"HERALD_{name.upper()}" for name in Settings.model_fields]


def unknown_names(environ: Mapping[str, str]) -> list[str]:
    """The HERALD_* variables in `environ` that are neither a setting nor one of Herald's
    tooling (NOT_SETTINGS): a misspelt name would otherwise be ignored in silence."""
    known = {*setting_names(), *NOT_SETTINGS}
    return sorted(
        name for name in environ if name.upper().startswith("HERALD_") and name.upper() not in known
    )


def not_a_setting(name: str) -> str:
    """`HERALD_DATABSE_URL is not a setting (did you mean HERALD_DATABASE_URL?)`."""
    import difflib

    close = difflib.get_close_matches(name.upper(), setting_names(), n=1)
    return f"{name} is not a setting" + (f" (did you mean {close[0]}?)" if close else "")


def secrets_folder() -> Path | None:
    """HERALD_SECRETS_DIR, else /run/secrets when it exists, else None (no files)."""
    given = os.environ.get("HERALD_SECRETS_DIR")
    if not given:
        return RUN_SECRETS if RUN_SECRETS.is_dir() else None
    folder = Path(given).expanduser()
    if not folder.is_dir():
        raise ValueError(f"HERALD_SECRETS_DIR: {given} is not a folder")
    return folder


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


_warned: set[str] = set()


def load() -> Settings:
    """The settings from the environment (checked as they are built). In dev, a HERALD_*
    variable that is no setting is a warning line on stderr, once per process (production
    refuses it as the settings are built)."""
    import sys

    cfg = Settings()
    for name in unknown_names(os.environ):
        if name not in _warned:
            _warned.add(name)
            print(f"herald: warning: {not_a_setting(name)}; ignored", file=sys.stderr)
    return cfg


@cache
def default_build_id() -> str:
    """The package version plus the short commit of the source this module was loaded
    from, when that is a git checkout (`0.1.0+g3506597`); the version alone otherwise.
    Asked once per process: the source does not change under a running worker."""
    import subprocess
    from importlib import metadata

    try:
        version = metadata.version("herald")
    except metadata.PackageNotFoundError:
        version = "0"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short=7", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return version
    # `+g<commit>` as git describe writes it: a `+` before bare digits would read as a
    # phone number to the log redaction (runtime.logs), which masks it.
    return f"{version}+g{commit}" if commit else version


def problem(err: Exception) -> str:
    """One line for a settings error: each bad HERALD_* variable and what is wrong with it
    (pydantic's own text spans lines and repeats the value, which may be a secret)."""
    if not isinstance(err, ValidationError):
        lines = str(err).strip().splitlines()
        return lines[0] if lines else type(err).__name__
    lines = []
    for e in err.errors(include_url=False, include_input=False):
        message = e["msg"].removeprefix("Value error, ")
        field, *inside = [str(part) for part in e["loc"]] or [""]
        # A check of the whole object (production's secrets) names its variables itself.
        where = f"HERALD_{field.upper()}" + (f" {'.'.join(inside)}" if inside else "")
        lines.append(f"{where}: {message}" if field else message)
    return "; ".join(lines)
