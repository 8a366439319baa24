"""Imports point inward (docs/architecture.md, "What each room may import"): workflows ->
domain and the contracts; activities -> domain, ledger, transports; api, cli and starter ->
the ledger and the Temporal client (starter); nothing imports workflows except worker.py and
starter; no router imports the app factory (api.app), which only api/server.py serves.
Checked on the source with `ast`, as test_domain_purity checks domain/ itself, with every
import counted: at the top, inside a function, or under TYPE_CHECKING.

No module runs round a circle either, inside a package or across: an import inside a
function hides a circle from Python, not from a reader, so it counts as well. None is
known; a circle is broken at its cause (what both sides need goes in a module of its own),
never by moving an import into a function."""

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
rules on workflows and on api.app, and by the absence of circles."""
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


def module_name(path: str) -> str:
    """`ledger/review_items.py` -> `ledger.review_items`; a package's `__init__.py` is the
    package."""
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def module_edges(files: dict[str, str]) -> dict[str, set[str]]:
    """Which of `files` (path -> source) each one imports, at any depth of its code.

    `from pkg import sub` where `sub` is a module imports that module, not the package:
    the package's `__init__` runs first (Python imports every parent), but nothing of it is
    used, or every package whose `__init__` gathers its modules would be a circle. An
    import of a name inside a module is an import of that module.
    """
    known = {module_name(path) for path in files}
    edges: dict[str, set[str]] = {}
    for path, source in files.items():
        importer = module_name(path)
        targets = edges.setdefault(importer, set())
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                subs = [f"{node.module}.{alias.name}" for alias in node.names]
                names = [sub if sub in known else node.module for sub in subs]
            else:
                continue
            for name in names:
                while name and name not in known:
                    name = name.rpartition(".")[0]
                if name and name != importer:
                    targets.add(name)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import one another round a circle, each sorted."""

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = list(edges.get(start, ()))
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(edges.get(module, ()))
        return seen

    reached = {module: reach(module) for module in edges}
    groups = {
        frozenset(m for m in reached[module] if module in reached[m])
        for module in edges
        if module in reached[module]
    }
    return sorted(sorted(group) for group in groups)


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


def test_no_module_imports_round_a_circle() -> None:
    assert circles(module_edges(dict(project_files()))) == []


def test_the_circle_check_sees_a_circle_hidden_in_a_function() -> None:
    files = {
        "ledger/__init__.py": "",
        "ledger/a.py": "from ledger import b\n",
        "ledger/b.py": "from ledger.c import X\n",
        "ledger/c.py": "def f():\n    from ledger.a import Y\n",
        "ledger/d.py": "from ledger import a\n",
    }
    assert circles(module_edges(files)) == [["ledger.a", "ledger.b", "ledger.c"]]
    files["ledger/c.py"] = "import json\n"
    assert circles(module_edges(files)) == []


def test_a_package_gathering_its_modules_is_no_circle() -> None:
    """`api/console/__init__.py` imports its page modules, which import their siblings
    through the package (`from api.console import reads`): no name of the package's own is
    used, so no circle; one that is used is."""
    files = {
        "api/console/__init__.py": "from api.console import deps\n",
        "api/console/deps.py": "from api.console import sessions\n",
        "api/console/sessions.py": "",
    }
    assert circles(module_edges(files)) == []
    files["api/console/sessions.py"] = "from api.console import mount_console\n"
    assert circles(module_edges(files)) == [
        ["api.console", "api.console.deps", "api.console.sessions"]
    ]


CONSOLE_SIGN_IN = {"api/console/sessions.py", "api/console/sign_in_answer.py"}
"""The console's own sign-in sessions: the only console modules that query."""


def console_queries(path: str, source: str) -> list[str]:
    """Imports of `source` (a console module) that build SQL: the ledger's read models do
    the reading (ledger/read_models/), the console keeps the words."""
    return [
        f"{path}:{line} imports {module}"
        for line, module in imports_in(source)
        if module.split(".")[0] == "sqlalchemy" and module != "sqlalchemy.orm"
    ] + [
        f"{path}:{node.lineno} imports {alias.name} from sqlalchemy.orm"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module == "sqlalchemy.orm"
        for alias in node.names
        if alias.name != "Session"
    ]


def test_the_console_reads_through_the_ledgers_read_models() -> None:
    found = [
        q
        for path, source in project_files()
        if path.startswith("api/console/") and path not in CONSOLE_SIGN_IN
        for q in console_queries(path, source)
    ]
    assert found == []
    assert console_queries("api/console/x.py", "from sqlalchemy import select\n") == [
        "api/console/x.py:1 imports sqlalchemy"
    ]
    assert console_queries("api/console/x.py", "from sqlalchemy.orm import Session\n") == []


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
