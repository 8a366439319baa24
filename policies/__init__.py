"""Packaged policy versions (data, not code), and an adopter's own policy file.

Each ``*.toml`` here is one policy version; :func:`domain.policy.load_policy` parses the
text. Reading the file lives here, outside ``domain``, because the domain does no I/O.

Where a policy is named (``HERALD_POLICY_NAME``, ``herald dev --policy``), the name is a
packaged one (``default``, ``demo``) or the path of a policy file in the same format
(ending in ``.toml``, or holding a ``/``): :func:`load` reads either.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


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


def is_file(spec: str) -> bool:
    """True when `spec` names a policy file rather than a packaged policy."""
    return spec.endswith(".toml") or "/" in spec or "\\" in spec


def load(spec: str) -> tuple[str, str]:
    """The name and text of a packaged policy or a policy file.

    A file's name is its stem (``short-horizon`` for ``tests/short-horizon.toml``): what the
    ledger records as the version's ``name`` beside the packaged ones.

    Args:
        spec: A packaged name, or the path of a policy file.

    Raises:
        FileNotFoundError: No packaged policy has that name, or the file cannot be read;
            the message names which, in one line.
    """
    if not is_file(spec):
        try:
            return spec, load_packaged(spec)
        except FileNotFoundError:
            known = ", ".join(packaged_names())
            raise FileNotFoundError(
                f"no packaged policy named {spec!r} (packaged: {known}; or give a policy "
                "file's path, ending in .toml)"
            ) from None
    path = Path(spec).expanduser()
    try:
        return path.stem, path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise FileNotFoundError(f"cannot read the policy file {spec}: {why}") from None
