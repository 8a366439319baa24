"""The tool rooms, bench/ and cli/, have no import circle between their own modules (#52):
every import counted as tests/unit/test_import_direction.py counts them (at the top,
inside a function, or under TYPE_CHECKING), so an import moved into a function to break
a circle at run time does not hide it."""

from __future__ import annotations

from tests.unit.test_import_direction import ROOT, imports_in


def module_graph(package: str) -> dict[str, set[str]]:
    """Each module of `package` -> the modules of `package` it imports."""
    graph: dict[str, set[str]] = {}
    for file in sorted((ROOT / package).glob("**/*.py")):
        name = ".".join(file.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        graph[name] = {
            module
            for _, module in imports_in(file.read_text())
            if module.split(".")[0] == package and module != name
        }
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One path per circle found, each starting and ending at the same module."""
    found: list[list[str]] = []
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            found.append([*path[path.index(module) :], module])
            return
        if module in done:
            return
        for target in sorted(graph.get(module, ())):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    return found


def test_bench_has_no_import_circle():
    assert circles(module_graph("bench")) == []


def test_cli_has_no_import_circle():
    assert circles(module_graph("cli")) == []


def test_the_check_finds_a_circle_through_an_import_inside_a_function():
    graph = {"bench.a": {"bench.b"}, "bench.b": {"bench.a"}, "bench.c": {"bench.a"}}
    assert circles(graph) == [["bench.a", "bench.b", "bench.a"]]
    inside = "def f():\n    from bench.openloop import rate_mode\n"
    assert [m for _, m in imports_in(inside)] == ["bench.openloop"]
