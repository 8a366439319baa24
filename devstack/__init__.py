"""Process runners for Herald's embedded dev stack (``herald dev``, tests).

Everything here binds to loopback only and keeps its state under one data folder.
See ``docs/devstack.md``.
"""

from devstack.binaries import MissingBinary, find_binary, postgres_bin_dir
from devstack.ports import PortInUse, free_port, port_in_use
from devstack.postgres import EmbeddedPostgres, PostgresStartError
from devstack.processes import ChildProcess, no_orphans, processes_in_group
from devstack.temporal import TemporalDevServer, TemporalStartError

__all__ = [
    "ChildProcess",
    "EmbeddedPostgres",
    "MissingBinary",
    "PortInUse",
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
