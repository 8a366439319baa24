"""Packaged policy versions (data, not code).

Each ``*.toml`` here is one policy version; :func:`domain.policy.load_policy` parses the
text. Reading the file lives here, outside ``domain``, because the domain does no I/O.
"""

from __future__ import annotations

from importlib import resources


def load_packaged(name: str) -> str:
    """The text of a packaged policy, e.g. ``load_packaged("default")``.

    Args:
        name: The file name without ``.toml`` (``"default"``, ``"demo"``).

    Raises:
        FileNotFoundError: No packaged policy has that name.
    """
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise FileNotFoundError(f"no packaged policy named {name!r}")
    resource = resources.files(__name__).joinpath(f"{name}.toml")
    if not resource.is_file():
        raise FileNotFoundError(f"no packaged policy named {name!r}")
    return resource.read_text(encoding="utf-8")


def packaged_names() -> list[str]:
    """Names of every packaged policy, sorted."""
    return sorted(
        entry.name.removesuffix(".toml")
        for entry in resources.files(__name__).iterdir()
        if entry.name.endswith(".toml")
    )
