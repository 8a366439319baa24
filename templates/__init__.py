"""Packaged message templates (data, not code).

``catalog.toml`` holds every template version; :func:`domain.templates.parse_catalog`
parses it. Reading the file lives here, outside ``domain``, because the domain does no I/O.
"""

from __future__ import annotations

from importlib import resources

from domain.templates import TemplateVersion, parse_catalog


def load_packaged() -> list[TemplateVersion]:
    """Every template version in the packaged ``catalog.toml``."""
    text = resources.files(__name__).joinpath("catalog.toml").read_text(encoding="utf-8")
    return parse_catalog(text)
