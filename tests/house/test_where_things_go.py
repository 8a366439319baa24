"""docs/where-things-go.md names files and names in the code: each must exist, so the page
cannot drift from the tree it describes."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "where-things-go.md"
TEXT = PAGE.read_text()
CODE = re.findall(r"`([^`\n]+)`", TEXT)
PATH = re.compile(r"^[\w.-]+(/[\w.-]+)*(/|\.(py|toml|html|md))$")
DOTTED = re.compile(r"^[a-z_]+(\.[A-Za-z_][A-Za-z0-9_]*)+$")
PENDING: dict[str, str] = {}
"""Pages this one links that another branch is writing: exempt while they are absent."""


def _resolve(dotted: str) -> object:
    """`api.console.rendering.page`: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise AssertionError(f"{dotted}: no such module")


def test_every_path_it_names_exists():
    paths = [token for token in CODE if PATH.match(token) and "/" in token]
    assert len(paths) > 30  # the page was read
    assert [p for p in paths if not (ROOT / p).exists()] == []


def test_every_dotted_name_it_names_is_in_the_code():
    names = [token for token in CODE if DOTTED.match(token) and "/" not in token]
    packages = {"api", "cli", "domain", "ledger", "activities", "starter", "runtime"}
    names = [n for n in names if n.split(".")[0] in packages]
    assert "cli.output.action" in names and "api.console.PAGE_GROUPS" in names
    for name in names:
        _resolve(name)


def test_every_bare_name_it_gives_a_module_for_is_defined_there():
    # `Who` ... `api/console/deps.py`: the names a bullet attributes to a module.
    pairs = {
        "api/console/deps.py": ["Who", "signed_in"],
        "api/deps.py": ["IngressDep", "Ingress"],
        "api/auth.py": [
            "CreatingIntents",
            "ReadingIntents",
            "ReadingEvidence",
            "Operating",
            "Administering",
            "GuardedRoute",
        ],
        "cli/context.py": ["ledger_sessions", "herald_client", "acting", "CliError"],
        "domain/policy.py": ["_RULE_FIELDS", "_resolve_rule", "evaluate", "Decision"],
        "activities/ledger.py": ["LedgerActivities"],
    }
    for path, names in pairs.items():
        assert f"`{path}`" in TEXT, path
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        for name in names:
            assert hasattr(module, name), f"{path} has no {name}"
    assert hasattr(importlib.import_module("activities.ledger").LedgerActivities, "authorize")
    assert "inputs" in importlib.import_module("domain.policy").Decision.__dataclass_fields__
    assert "cooldown.min_gap" in (ROOT / "domain" / "policy.py").read_text()


def test_every_page_it_links_exists():
    links = re.findall(r"\]\(([^)#]+)\)", TEXT)
    assert "channels.md" in links  # a new channel is the channels page's
    missing = [link for link in links if not (PAGE.parent / link).exists()]
    assert [link for link in missing if link not in PENDING] == []
