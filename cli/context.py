"""How a `herald` command reaches the stack and whom it acts as: the addresses of a
running `herald dev`, the ledger's sessions, the Temporal client, and the principal its
token names. Below `cli.main` and every command module, which all import it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import settings as settings_module

if TYPE_CHECKING:
    from domain.principals import Principal


class CliError(Exception):
    """A problem the user can fix; printed without a traceback."""


def no_stack_found(cfg: settings_module.Settings) -> CliError:
    """A ledger command with neither a running `herald dev` nor a configured database: a
    write would go where the stack never looks (under a key it does not have), and a read
    would answer from whatever Postgres listens on the default port."""
    if (cfg.data_path / "dev.lock").exists() or (cfg.data_path / "data.key").exists():
        # The right folder (a stack lived here), with the stack stopped.
        return CliError(
            f"`herald dev` is not running on {cfg.data_path}: start it (`herald dev`, in "
            "another terminal) and run this again, or set HERALD_DATABASE_URL"
        )
    return CliError(
        f"no running `herald dev` found in {cfg.data_path} and HERALD_DATABASE_URL is not "
        "set: run this in the folder where `herald dev` runs, or point at it with "
        "HERALD_DATA_DIR=<its data folder>"
    )


def running_dev_stack(cfg: settings_module.Settings) -> Any:
    """The `herald dev` running on this data folder (devstack.stack.Running), else None."""
    if not (cfg.data_path / "dev.json").exists():
        # Only then import devstack: it takes a second (Temporal, the API), and the
        # production image has none (the `dev-stack` extra).
        return None
    from devstack.stack import read_running

    return read_running(cfg)


def adopt_dev_stack(cfg: settings_module.Settings) -> bool:
    """Use the addresses of a `herald dev` running on this data folder for whatever settings
    leave unset; False when none runs there."""
    running = running_dev_stack(cfg)
    if running is None:
        return False
    cfg.temporal_address = cfg.temporal_address or running.temporal
    cfg.database_url = cfg.database_url or running.postgres
    return True


def adopt_running(cfg: settings_module.Settings) -> None:
    """`adopt_dev_stack`; with neither a running stack nor a configured database, stop
    (reading commands too: the default port may be another stack's Postgres, or some other
    program's)."""
    if not adopt_dev_stack(cfg) and cfg.database_url is None:
        raise no_stack_found(cfg)


def ledger_sessions(cfg: settings_module.Settings):  # type: ignore[no-untyped-def]
    """Ledger-only commands need no Temporal connection."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    adopt_running(cfg)
    return sessionmaker(
        create_engine(cfg.resolved_database_url(), pool_pre_ping=True), expire_on_commit=False
    )


async def herald_client(cfg: settings_module.Settings):  # type: ignore[no-untyped-def]
    from starter.client import HeraldClient

    adopt_running(cfg)
    try:
        return await HeraldClient.connect(cfg)
    except RuntimeError as err:
        if "connect" not in str(err).lower():
            raise
        raise CliError(temporal_unreachable(cfg, err)) from err


def temporal_unreachable(cfg: settings_module.Settings, err: BaseException) -> str:
    """What to say when the Temporal client could not connect. Plain, the address is down
    (start `herald dev`, or set the address); over TLS it may have been reached and the
    handshake refused, so the client's own reason is the line to read."""
    from starter.temporal import connect_options

    host = cfg.temporal_target.rpartition(":")[0].strip("[]")
    if not _resolves(host):
        return f"HERALD_TEMPORAL_ADDRESS={cfg.temporal_target}: the host {host} does not resolve"
    if connect_options(cfg)["tls"]:
        return f"cannot connect to Temporal at {cfg.temporal_target} over TLS: {err}"
    return (
        f"cannot reach Temporal at {cfg.temporal_target} (is `herald dev` "
        "running, or HERALD_TEMPORAL_ADDRESS set?)"
    )


def _resolves(host: str) -> bool:
    import socket

    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return True


def acting(cfg: settings_module.Settings, access: Any) -> Principal:
    """The principal this command acts as: the token in HERALD_TOKEN or the data folder's
    token file, checked like the API checks it (HERALD_OPERATOR_TOKEN is break-glass
    admin). What it does is recorded under that name and role, never under a flag."""
    from domain.principals import BREAK_GLASS_NAME, Principal, Role, least_role_for, roles_for
    from ledger import principals

    # The wrong folder (no stack, no database) is named before a missing token is.
    adopt_running(cfg)
    token = cfg.cli_token()
    if token is None:
        raise CliError(
            f"no token: set HERALD_TOKEN, or run `herald dev` (it writes {cfg.token_file})"
        )
    where = "HERALD_TOKEN" if cfg.token is not None else str(cfg.token_file)
    principal: Principal | None = None
    break_glass = cfg.operator_token
    if break_glass is not None and principals.hashes_to(
        principals.token_hash(token), principals.token_hash(break_glass.get_secret_value())
    ):
        principal = Principal(BREAK_GLASS_NAME, Role.ADMIN)
    else:
        with ledger_sessions(cfg).begin() as session:
            principal = principals.authenticate(session, token, at=datetime.now(UTC))
    if principal is None:
        raise CliError(f"the token in {where} is not accepted (unknown or revoked)")
    if not principal.may(access):
        allowed = ", ".join(r.value for r in roles_for(access))
        raise CliError(
            f"{access.value} needs the {least_role_for(access).value} role (any of: {allowed}); "
            f"{principal.name} is {principal.role.value}"
        )
    return principal
