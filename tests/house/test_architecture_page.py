"""docs/architecture.md is the project's one architecture page: every file cites it, none
a design page the repository does not have (ELSEWHERE), and every test it names as a guard
exists, so an invariant cannot lose its test in silence."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
ELSEWHERE = "ARCHITECTURE" + ".md"
"""Spelt in two so this file does not cite it."""


def defined_tests() -> set[str]:
    return {
        match
        for file in (ROOT / "tests").glob("**/*.py")
        for match in re.findall(r"^\s*(?:async )?def (test_\w+)", file.read_text(), re.M)
    }


def named_tests(text: str) -> list[str]:
    return re.findall(r"`(test_\w+)`", text)


def named_paths(text: str) -> list[str]:
    return [p for p in re.findall(r"`(\w[\w./-]*)`", text) if "/" in p]


def test_every_test_the_page_names_exists() -> None:
    text = PAGE.read_text()
    names = named_tests(text)
    assert len(names) > 20  # the page was read
    assert sorted(set(names) - defined_tests()) == []


def test_every_path_the_page_names_exists() -> None:
    paths = named_paths(PAGE.read_text())
    assert "activities/contracts.py" in paths
    assert [p for p in paths if not (ROOT / p).exists() and not (ROOT / f"{p}.py").exists()] == []


def test_the_checks_see_a_missing_test_and_a_missing_path() -> None:
    assert named_tests("guarded by `test_a_name_no_file_defines`") == [
        "test_a_name_no_file_defines"
    ]
    assert "test_a_name_no_file_defines" not in defined_tests()
    assert named_paths("in `ledger/no_such_module.py`, a `word`") == ["ledger/no_such_module.py"]


def test_no_file_cites_an_architecture_page_outside_the_repository() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    files = [ROOT / name for name in listed if name]
    citing = [
        f.relative_to(ROOT).as_posix()
        for f in files
        if f.is_file() and ELSEWHERE in f.read_text(errors="ignore")
    ]
    assert citing == []
