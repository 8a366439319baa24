from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack import EmbeddedPostgres, free_port


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def make_pg() -> Iterator:
    """Factory for fast (fsync=off) embedded Postgres instances, destroyed afterwards."""
    created: list[EmbeddedPostgres] = []

    def factory(data_dir: Path, **kwargs) -> EmbeddedPostgres:
        kwargs.setdefault("port", free_port())
        kwargs.setdefault("fast", True)
        pg = EmbeddedPostgres(data_dir, **kwargs)
        created.append(pg)
        return pg

    yield factory
    for pg in created:
        pg.destroy()
