"""Imports point inward (ARCHITECTURE.md, "Layout"): workflows -> domain and the
contracts; activities -> domain, ledger, transports; api, cli and starter -> the ledger
and the Temporal client (starter); nothing imports workflows except worker.py and
starter; no router imports the app factory (api.app), which only api/server.py serves.
Checked on the source with `ast`, as test_domain_purity checks domain/ itself, with every
import counted: at the top, inside a function, or under TYPE_CHECKING."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "activities",
    "api",
    "bench",
    "cli",
    "devstack",
    "domain",
    "ledger",
    "runtime",
    "scenarios",
    "simulators",
    "starter",
    "transports",
    "workflows",
}
MODULES = {"settings", "worker"}
CONTRACTS = "activities.contracts"
"""The dataclasses and names that cross the workflow boundary: standard library only, so
any layer may import them (the API and the starter signal and query workflows)."""

ALLOWED: dict[str, set[str]] = {
    "domain": set(),
    "workflows": {"domain", CONTRACTS},
    "activities": {"domain", "ledger", "transports"},
    "transports": {"domain"},
    # The stand-ins sign as the providers do with the adapters' own functions (SendGrid).
    "simulators": {"domain", "transports"},
    "ledger": {"domain", "settings"},
    "settings": {"domain"},
    "starter": {"domain", "ledger", "settings", CONTRACTS, "workflows"},
    "api": {"domain", "ledger", "settings", CONTRACTS, "starter", "runtime"},
    "cli": {
        *("domain", "ledger", "settings", CONTRACTS, "starter", "runtime"),
        # The command runs the others: `herald api`, `dev`, `bench`, `demo`, `worker`.
        *("api.server", "api.schemas", "devstack", "bench", "scenarios", "worker"),
    },
}
"""What each layer may import of the project; a folder not named here is held only by the
rules on workflows and on api.app, and by the absence of cycles."""
WORKFLOW_IMPORTERS = {"worker", "starter"}
APP_IMPORTERS = {"api/server.py"}
"""Inside api/, only the server imports the app factory; outside it, what serves the app
(devstack's `herald dev`, the console benchmark)."""

KNOWN: dict[str, str] = {}
"""Departures still to move (none now: the search attributes and the maintenance workflow's
type are in the contracts, the scenarios' handles come from starter); each one here must
still exist, so an entry is dropped when its import is."""


def layer(module: str) -> str | None:
    """`activities.contracts` is a layer of its own; otherwise the top-level folder."""
    if module == CONTRACTS or module.startswith(CONTRACTS + "."):
        return CONTRACTS
    top = module.split(".")[0]
    return top if top in PACKAGES | MODULES else None


def allowed(importer: str, module: str) -> bool:
    target = layer(module)
    if target is None or module.split(".")[0] == importer:
        return True
    rules = ALLOWED.get(importer)
    if rules is None:
        return True
    return target in rules or any(module == r or module.startswith(r + ".") for r in rules)


def imports_in(source: str) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            # `from api import app` imports the module api.app
            folder = ROOT.joinpath(*node.module.split("."))
            for alias in node.names:
                if (folder / f"{alias.name}.py").exists() or (folder / alias.name).is_dir():
                    yield node.lineno, f"{node.module}.{alias.name}"


def violations(path: str, source: str) -> list[str]:
    """Every import of `source` (the file at `path`, relative to the root) that breaks a
    rule, as `path:line imports module (rule)`."""
    importer = path.split("/")[0].removesuffix(".py")
    found: list[str] = []
    for line, module in imports_in(source):
        target = layer(module)
        if target is None or module.split(".")[0] == importer:
            continue
        where = f"{path}:{line} imports {module}"
        if not allowed(importer, module):
            found.append(f"{where} (not a layer {importer}/ may use)")
        elif target == "workflows" and importer not in WORKFLOW_IMPORTERS:
            found.append(f"{where} (only worker.py and starter import workflows)")
    if path.startswith("api/") and path not in APP_IMPORTERS:
        for line, module in imports_in(source):
            if module == "api.app":
                found.append(f"{path}:{line} imports api.app (only api/server.py may)")
    return sorted(set(found))


def project_files() -> Iterator[tuple[str, str]]:
    for name in sorted(PACKAGES):
        for file in sorted((ROOT / name).glob("**/*.py")):
            yield file.relative_to(ROOT).as_posix(), file.read_text()
    for name in sorted(MODULES):
        yield f"{name}.py", (ROOT / f"{name}.py").read_text()


def folder_edges() -> set[tuple[str, str]]:
    edges = set()
    for path, source in project_files():
        importer = path.split("/")[0].removesuffix(".py")
        for _, module in imports_in(source):
            target = module.split(".")[0]
            if target in PACKAGES | MODULES and target != importer:
                edges.add((importer, target))
    return edges


def known_as(violation: str) -> str:
    """`path imports module`, the key of `KNOWN`."""
    where, _, rest = violation.partition(" imports ")
    return f"{where.split(':')[0]} imports {rest.split()[0]}"


def test_every_import_points_the_way_the_layout_says() -> None:
    found = [v for path, source in project_files() for v in violations(path, source)]
    assert [v for v in found if known_as(v) not in KNOWN] == []


def test_every_known_departure_still_exists() -> None:
    found = {known_as(v) for path, source in project_files() for v in violations(path, source)}
    assert set(KNOWN) - found == set()


def test_no_two_folders_import_each_other() -> None:
    edges = folder_edges()
    assert sorted(f"{a} <-> {b}" for a, b in edges if (b, a) in edges and a < b) == []


def test_the_check_reports_what_breaks_a_rule() -> None:
    assert violations("workflows/x.py", "from activities.maintenance import Job\n") == [
        "workflows/x.py:1 imports activities.maintenance (not a layer workflows/ may use)"
    ]
    assert violations("api/console/x.py", "from api.app import Ingress\n") == [
        "api/console/x.py:1 imports api.app (only api/server.py may)"
    ]
    assert violations("api/x.py", "from api import app\n") == [
        "api/x.py:1 imports api.app (only api/server.py may)"
    ]
    assert violations("scenarios/x.py", "import workflows.notification\n") == [
        "scenarios/x.py:1 imports workflows.notification (only worker.py and starter "
        "import workflows)"
    ]
    assert violations("activities/x.py", "def f():\n    from api.auth import check\n") == [
        "activities/x.py:2 imports api.auth (not a layer activities/ may use)"
    ]
    assert violations("api/server.py", "from api.app import create_app\n") == []
    assert violations("workflows/x.py", "from activities.contracts import X\nimport json\n") == []
