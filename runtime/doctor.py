"""What a deployment lacks, from its settings alone: the checks `herald doctor` prints.

Each check is one line, `ok` or `FAIL`, with what it looked at and why it failed; each is
bounded by CHECK_TIMEOUT_SECONDS, so a service that does not answer is a failure, not a
hang. Nothing is written and nothing is sent: the ledger is read, Temporal is described,
each provider account gets its cheapest authenticated read (`check_account` on the
adapters, transports/accounts.py). A check that needs another that failed (the
migrations need the ledger) says so instead of failing again with the same cause.

Here rather than in cli/ so that the API or the worker can run the same checks (at
start, or behind a health endpoint) without the command.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

import settings as settings_module
from activities.contracts import SEARCH_ATTRIBUTES
from ledger.crypto import FieldCipher, KeyRingError
from transports.errors import AccountCheckFailed

CHECK_TIMEOUT_SECONDS = 5.0
"""The longest any one check waits for a service (connect and answer)."""

SERVED_ROOTS = ("/v1", "/console", "/docs", "/redoc", "/healthz", "/readyz", "/metrics")
"""Herald's own routes: the public base URL is their origin (the providers' callback URLs
are the base URL + `/v1/...`), so its path must not already hold one of them."""


class CheckFailed(Exception):
    """A check's failure: the message is the one line printed after `FAIL <what>:`."""


@dataclass(frozen=True)
class Finding:
    what: str
    """What was checked: `settings`, `ledger`, `provider twilio`, ..."""
    ok: bool
    detail: str
    """Why it is fine (what was seen), or why not; one line, no secret."""

    def line(self) -> str:
        return f"{'ok' if self.ok else 'FAIL':<4} {self.what}: {self.detail}"


def _one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def where_is_the_ledger(cfg: settings_module.Settings) -> str:
    """The ledger's URL with its password hidden (it is printed)."""
    try:
        return make_url(cfg.resolved_database_url()).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - the URL itself is what failed to parse
        return "(unparsable HERALD_DATABASE_URL)"


# --- the checks ------------------------------------------------------------------------


def check_settings(cfg: settings_module.Settings) -> str:
    """Everything a process checks before it starts, beyond what building the settings
    already checked: the provider routes and senders of the policy, and the key ring."""
    try:
        cfg.check_providers()
        cfg.sender_book()
        FieldCipher(cfg.resolved_data_keys())
    except (RuntimeError, KeyRingError) as err:
        raise CheckFailed(_one_line(err)) from err
    return f"HERALD_ENV={cfg.env}, policy {cfg.policy_name}"


def ledger_engine_for_checks(cfg: settings_module.Settings) -> Engine:
    """An engine whose connect and every statement give up within the check timeout."""
    seconds = max(1, int(CHECK_TIMEOUT_SECONDS))
    return create_engine(
        cfg.resolved_database_url(),
        pool_pre_ping=False,
        connect_args={
            "connect_timeout": seconds,
            "options": f"-c statement_timeout={seconds * 1000}",
        },
    )


def check_ledger(engine: Engine, where: str) -> str:
    from sqlalchemy import exc as sa_exc

    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except sa_exc.DBAPIError as err:
        raise CheckFailed(f"cannot use {where}: {_one_line(err.orig or err)}") from err
    return f"{where} answers"


def check_migrations(engine: Engine, url: str) -> str:
    """The ledger's Alembic revision is the packaged head (ledger/migrate.py)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from ledger.migrate import alembic_config

    heads = set(ScriptDirectory.from_config(alembic_config(url)).get_heads())
    with engine.connect() as conn:
        current = set(MigrationContext.configure(conn).get_current_heads())
    if current == heads:
        return f"at head {', '.join(sorted(heads))}"
    at = ", ".join(sorted(current)) or "no revision (an empty database)"
    raise CheckFailed(f"at {at}, the code needs {', '.join(sorted(heads))}: run `herald migrate`")


def check_data_key(engine: Engine, cfg: settings_module.Settings) -> str:
    """The ring reads the ledger: the check every process makes at start
    (ledger.keys.check_key_ring), run without recording anything."""
    from ledger.keys import check_key_ring

    cipher = FieldCipher(cfg.resolved_data_keys())
    try:
        found = check_key_ring(engine, cipher, record=False)
    except KeyRingError as err:
        raise CheckFailed(str(err)) from err
    kids = ", ".join(cipher.kids)
    return f"the ring reads the ledger ({kids}); lookups and proofs under {found.derived_under}"


def check_policy(engine: Engine) -> str:
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT version, name FROM policy_version WHERE active ORDER BY version LIMIT 1")
        ).first()
    if row is None:
        raise CheckFailed("no active policy recorded: run `herald migrate` (it activates one)")
    return f"{row.version} active ({row.name})"


async def connect_temporal(cfg: settings_module.Settings) -> Any:
    from starter.temporal import TemporalSettingError, connect

    try:
        return await connect(cfg)
    except TemporalSettingError as err:  # a namespace the server lacks, a TLS file
        raise CheckFailed(str(err)) from err
    except RuntimeError as err:
        # The SDK's text nests the transport's errors ("tonic::transport::Error(...)").
        why = "connection refused" if "connection refused" in str(err).lower() else _one_line(err)
        raise CheckFailed(f"cannot connect to {cfg.temporal_target}: {why}") from err


async def check_namespace(client: Any, cfg: settings_module.Settings) -> str:
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.service import RPCError, RPCStatusCode

    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=cfg.temporal_namespace),
            timeout=timedelta(seconds=CHECK_TIMEOUT_SECONDS),
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise CheckFailed(
                f"namespace {cfg.temporal_namespace!r} does not exist at {cfg.temporal_target} "
                "(HERALD_TEMPORAL_NAMESPACE)"
            ) from err
        raise CheckFailed(f"{cfg.temporal_target} answered {err.status.name}") from err
    return f"namespace {cfg.temporal_namespace!r} at {cfg.temporal_target}"


INDEXED_TYPES = {
    "Keyword": "INDEXED_VALUE_TYPE_KEYWORD",
    "KeywordList": "INDEXED_VALUE_TYPE_KEYWORD_LIST",
}


async def check_search_attributes(client: Any, cfg: settings_module.Settings) -> str:
    """Herald's search attributes are registered, each with its type: without one, every
    workflow task fails in a loop (docs/operations.md)."""
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=cfg.temporal_namespace),
        timeout=timedelta(seconds=CHECK_TIMEOUT_SECONDS),
    )
    custom = dict(listed.custom_attributes)
    missing = [name for name in SEARCH_ATTRIBUTES if name not in custom]
    wrong = [
        f"{name} is {IndexedValueType.Name(custom[name]).removeprefix('INDEXED_VALUE_TYPE_')}"
        for name, kind in SEARCH_ATTRIBUTES.items()
        if name in custom and IndexedValueType.Name(custom[name]) != INDEXED_TYPES[kind]
    ]
    if missing or wrong:
        said = [f"missing {', '.join(missing)}"] if missing else []
        raise CheckFailed("; ".join(said + wrong) + " (docs/operations.md names them)")
    return f"all {len(SEARCH_ATTRIBUTES)} registered with their types"


def providers_in_use(
    cfg: settings_module.Settings, also: frozenset[str] = frozenset()
) -> list[str]:
    """The provider aliases something may send through: each channel's default (the
    email provider setting for email), every alias the policy routes to, every account of
    HERALD_PROVIDERS, and `also` (the simulators a running `herald dev` started)."""
    from domain import channels

    used = {channels.SMS.default_providers[0], cfg.resolved_email_provider, *cfg.providers, *also}
    policy = cfg.named_policy()
    if policy is not None:
        for aliases in policy.providers.values():
            used |= set(aliases)
    configured = cfg.provider_settings()
    return [alias for alias in configured if alias in used]


async def check_provider(cfg: settings_module.Settings, alias: str) -> str:
    """The account's cheapest authenticated read (never a send)."""
    from transports.sendgrid import SendGridEmail
    from transports.smtp import SmtpEmail
    from transports.telnyx import TelnyxSms
    from transports.twilio import TwilioSms

    provider = cfg.provider_settings()[alias]
    kind = "" if provider.kind == alias else f"({provider.kind}) "
    account: Any
    if isinstance(provider, settings_module.TwilioProvider):
        account = TwilioSms(
            base_url=provider.base_url,
            account_sid=provider.account_sid,
            auth_token=provider.auth_token.get_secret_value(),
        )
    elif isinstance(provider, settings_module.TelnyxProvider):
        account = TelnyxSms(base_url=provider.base_url, api_key=provider.api_key.get_secret_value())
    elif isinstance(provider, settings_module.SendGridProvider):
        account = SendGridEmail(
            api_key=provider.api_key.get_secret_value(), base_url=provider.base_url
        )
    else:
        password = provider.password.get_secret_value() if provider.password else None
        smtp = SmtpEmail(
            host=provider.host,
            port=provider.port,
            starttls=provider.starttls,
            username=provider.username,
            password=password,
        )
        try:
            return kind + await smtp.check_account(timeout=CHECK_TIMEOUT_SECONDS)
        except AccountCheckFailed as err:
            raise CheckFailed(f"{kind}{err}") from err
    async with account:
        try:
            return kind + await account.check_account(timeout=CHECK_TIMEOUT_SECONDS)
        except AccountCheckFailed as err:
            raise CheckFailed(f"{kind}{err}") from err


def check_callback_url(url: str, *, env: str) -> str:
    """The URL providers call back (`Settings.callback_base_url`: HERALD_PUBLIC_BASE_URL,
    else the API's address): an origin Herald's routes hang from; outside dev, https and
    not a loopback address."""
    parts = urlsplit(url)
    problems = []
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CheckFailed(f"{url!r} is not an http(s) URL with a host (HERALD_PUBLIC_BASE_URL)")
    if parts.query or parts.fragment or parts.username or parts.password:
        problems.append("it carries a query, a fragment or credentials")
    segments = "/" + parts.path.strip("/") + "/"
    served = [root for root in SERVED_ROOTS if f"{root}/" in segments]
    if served:
        problems.append(f"its path {parts.path!r} holds Herald's {served[0]} (give the origin)")
    if env != "dev":
        if parts.scheme != "https":
            problems.append("providers must call https outside dev")
        if _is_loopback(parts.hostname):
            problems.append(f"{parts.hostname} is loopback: no provider can reach it")
    if problems:
        raise CheckFailed(f"{url}: {'; '.join(problems)} (HERALD_PUBLIC_BASE_URL)")
    return f"{url} (receipts at {url}/v1/receipts/sms)"


def _is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain") or host.lower().endswith(
        ".localhost"
    ):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


# --- running them ----------------------------------------------------------------------


async def _bounded(what: str, run: Callable[[], Awaitable[str]]) -> Finding:
    try:
        detail = await asyncio.wait_for(run(), timeout=CHECK_TIMEOUT_SECONDS * 2)
    except CheckFailed as err:
        return Finding(what, False, str(err))
    except TimeoutError:
        return Finding(what, False, f"no answer within {CHECK_TIMEOUT_SECONDS * 2:g} s")
    except Exception as err:  # noqa: BLE001 - a check that broke is a failure, said in one line
        return Finding(what, False, f"{type(err).__name__}: {_one_line(err)}")
    return Finding(what, True, detail)


def _thread(work: Callable[[], str]) -> Callable[[], Awaitable[str]]:
    return lambda: asyncio.to_thread(work)


def _not_checked(whats: tuple[str, ...], why: str) -> list[Finding]:
    return [Finding(what, False, f"not checked: {why}") for what in whats]


async def _ledger_checks(cfg: settings_module.Settings) -> list[Finding]:
    """Reachable, then migrated, then what only a migrated ledger can say."""
    where = where_is_the_ledger(cfg)
    try:
        engine = ledger_engine_for_checks(cfg)
    except Exception as err:  # noqa: BLE001 - its message may hold the URL's password
        return [
            Finding("ledger", False, f"HERALD_DATABASE_URL is not usable ({type(err).__name__})"),
            *_not_checked(("migrations", "data key", "policy"), "the ledger is not reachable"),
        ]
    try:
        ledger = await _bounded("ledger", _thread(lambda: check_ledger(engine, where)))
        if not ledger.ok:
            return [
                ledger,
                *_not_checked(("migrations", "data key", "policy"), "the ledger is not reachable"),
            ]
        url = cfg.resolved_database_url()
        migrated = await _bounded("migrations", _thread(lambda: check_migrations(engine, url)))
        if not migrated.ok:
            return [
                ledger,
                migrated,
                *_not_checked(("data key", "policy"), "the ledger is not migrated"),
            ]
        return [
            ledger,
            migrated,
            await _bounded("data key", _thread(lambda: check_data_key(engine, cfg))),
            await _bounded("policy", _thread(lambda: check_policy(engine))),
        ]
    finally:
        engine.dispose()


async def _temporal_checks(cfg: settings_module.Settings) -> list[Finding]:
    client: Any = None

    async def namespace() -> str:
        nonlocal client
        client = await connect_temporal(cfg)
        return await check_namespace(client, cfg)

    found = await _bounded("temporal", namespace)
    if not found.ok:
        return [found, *_not_checked(("search attributes",), "the namespace is not usable")]
    return [
        found,
        await _bounded("search attributes", lambda: check_search_attributes(client, cfg)),
    ]


async def _provider_checks(cfg: settings_module.Settings, also: frozenset[str]) -> list[Finding]:
    try:
        aliases = providers_in_use(cfg, also)
    except Exception as err:  # noqa: BLE001 - a policy that does not load; settings name it
        return [Finding("providers", False, f"not checked: {type(err).__name__}: {_one_line(err)}")]
    return [
        await _bounded(f"provider {alias}", functools.partial(check_provider, cfg, alias))
        for alias in aliases
    ]


async def run_checks(
    cfg: settings_module.Settings, *, also_providers: frozenset[str] = frozenset()
) -> list[Finding]:
    """Every check, in the order a deployment needs them; one Finding each."""
    url_check = functools.partial(check_callback_url, cfg.callback_base_url, env=cfg.env)
    return [
        await _bounded("settings", _thread(lambda: check_settings(cfg))),
        *await _ledger_checks(cfg),
        *await _temporal_checks(cfg),
        *await _provider_checks(cfg, also_providers),
        await _bounded("callback URL", _thread(url_check)),
    ]
