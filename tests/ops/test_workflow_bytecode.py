"""The worker writes the workflow modules' bytecode even where PYTHONDONTWRITEBYTECODE is
set, because the sandbox imports the workflow module again for every workflow run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import workflows.notification
from worker import ensure_workflow_bytecode


def test_workflow_bytecode_is_written_even_when_python_writes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path))
    source = workflows.notification.__file__
    cached = Path(importlib.util.cache_from_source(source))
    assert cached.is_relative_to(tmp_path) and not cached.exists()

    assert ensure_workflow_bytecode() is True

    assert cached.exists()
    # The loader accepts it: the header matches the source's current size and mtime.
    loader = importlib.machinery.SourceFileLoader("workflows.notification", source)
    assert loader.get_code("workflows.notification") is not None
    data = cached.read_bytes()
    assert data[:4] == importlib.util.MAGIC_NUMBER
    assert int.from_bytes(data[12:16], "little") == Path(source).stat().st_size
