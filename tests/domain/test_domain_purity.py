"""The domain stays pure: standard library, phonenumbers, jinja2 and jsonschema only (pure
libraries: parsing numbers, rendering text, checking a document); no I/O, no clock,
no randomness of its own. Checked on the source with `ast`, so it cannot be fooled by
what happens to be installed."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

DOMAIN = Path(__file__).resolve().parents[2] / "domain"
ALLOWED_THIRD_PARTY = {"phonenumbers", "jinja2", "jsonschema"}
# Standard-library modules that are I/O, clocks or randomness in disguise.
FORBIDDEN_MODULES = {
    "random",
    "secrets",
    "time",
    "os",
    "io",
    "pathlib",
    "socket",
    "subprocess",
    "shutil",
    "urllib",
    "http",
    "logging",
    "sqlite3",
    "asyncio",
}
FORBIDDEN_CALLS = {
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
    ("time", "time"),
    ("time", "monotonic"),
    ("time", "perf_counter"),
    ("uuid", "uuid1"),
    ("uuid", "uuid4"),
}
FORBIDDEN_NAMES = {"open", "input", "print", "exec", "eval", "__import__"}


def violations_in(source: str, name: str = "<source>") -> list[str]:
    found: list[str] = []
    tree = ast.parse(source, name)
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        for module in modules:
            top = module.split(".")[0]
            allowed = (
                top == "domain"
                or top in ALLOWED_THIRD_PARTY
                or (top in sys.stdlib_module_names and top not in FORBIDDEN_MODULES)
            )
            if not allowed:
                found.append(f"{name}:{node.lineno}: imports {module}")
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_NAMES:
                found.append(f"{name}:{node.lineno}: calls {func.id}()")
            if isinstance(func, ast.Attribute):
                owner = func.value
                owner_name = (
                    owner.id
                    if isinstance(owner, ast.Name)
                    else (owner.attr if isinstance(owner, ast.Attribute) else "")
                )
                if (owner_name, func.attr) in FORBIDDEN_CALLS or owner_name == "random":
                    found.append(f"{name}:{node.lineno}: calls {owner_name}.{func.attr}()")
    return found


def test_the_domain_imports_only_the_standard_library_and_its_pure_libraries() -> None:
    files = sorted(DOMAIN.glob("**/*.py"))
    assert len(files) >= 10
    problems = [p for f in files for p in violations_in(f.read_text(), f.name)]
    assert problems == []


def test_the_purity_check_catches_what_it_claims_to() -> None:
    source = (
        "import random\nimport sqlalchemy\nfrom httpx import Client\nimport datetime\n"
        "open('x')\ndatetime.datetime.now()\ndatetime.utcnow()\nrandom.random()\n"
        "import time\ntime.time()\n"
    )
    problems = violations_in(source)
    for expected in (
        "imports random",
        "imports sqlalchemy",
        "imports httpx",
        "calls open()",
        "calls datetime.now()",
        "calls datetime.utcnow()",
        "calls random.random()",
        "imports time",
        "calls time.time()",
    ):
        assert any(expected in p for p in problems), expected
    assert violations_in("from datetime import datetime, time\nimport phonenumbers\n") == []
