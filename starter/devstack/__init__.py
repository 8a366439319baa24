"""Process runners for Herald's embedded dev stack (``herald dev``, tests).

Everything here binds to loopback only and keeps its state under one data folder.
See ``docs/devstack.md``.
"""

from starter.devstack.binaries import MissingBinary, find_binary, postgres_bin_dir
from starter.devstack.ports import free_port, port_in_use
from starter.devstack.postgres import EmbeddedPostgres, PostgresStartError
from starter.devstack.processes import ChildProcess, no_orphans, processes_in_group
from starter.devstack.temporal import TemporalDevServer, TemporalStartError

__all__ = [
    "ChildProcess",
    "EmbeddedPostgres",
    "MissingBinary",
    "PostgresStartError",
    "TemporalDevServer",
    "TemporalStartError",
    "find_binary",
    "free_port",
    "no_orphans",
    "port_in_use",
    "postgres_bin_dir",
    "processes_in_group",
]
