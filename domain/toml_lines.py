"""Where in a TOML document a dotted path is written, so an error can name its line.

`tomllib` parses to plain values and forgets lines; the catalog and policy checks name the
field they refuse (``template[3].body``, ``regions.US.rules.sms.footer``). `line_of` reads
the text again, line by line, and finds the header or key nearest to that path. It is a
reader for error messages, not a parser: on text `tomllib` has accepted it is exact for the
headers and keys Herald's files use, and at worst points at the enclosing table.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\[\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(
    r"""^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=(.*)$"""
)
_PART = re.compile(r"""\s*("[^"]*"|'[^']*'|[A-Za-z0-9_-]+)\s*""")


def _parts(dotted: str) -> list[str]:
    return [p.strip("\"'") for p in _PART.findall(dotted)]


def line_of(text: str, path: Sequence[str | int]) -> int | None:
    """The 1-based line of the header or key that best matches `path`, or None.

    An element of an array of tables is addressed by its index (``["template", 3,
    "body"]``). The line whose path shares the longest prefix with `path` wins; of equal
    ones, the first.
    """
    target = [str(p) for p in path]
    best: tuple[int, int] | None = None  # (shared prefix, line)
    table: list[str] = []
    arrays: dict[tuple[str, ...], int] = {}
    closing: str | None = None  # the delimiter of a multi-line string being skipped
    for number, line in enumerate(text.splitlines(), start=1):
        if closing is not None:
            if line.count(closing) % 2 == 1:
                closing = None
            continue
        header = _HEADER.match(line)
        key = None if header else _KEY.match(line)
        if header:
            parts = _with_indices(_parts(header[2]), arrays)
            if header[1] == "[[":
                named = tuple(_parts(header[2]))
                arrays[named] = arrays.get(named, -1) + 1
                parts = _with_indices(list(named), arrays)
            table, candidate = parts, parts
        elif key:
            candidate = table + _parts(key[1])
            for delimiter in ('"""', "'''"):
                if key[2].count(delimiter) % 2 == 1:
                    closing = delimiter
        else:
            continue
        shared = 0
        for mine, wanted in zip(candidate, target, strict=False):
            if mine != wanted:
                break
            shared += 1
        if shared and (best is None or shared > best[0]):
            best = (shared, number)
    return None if best is None else best[1]


def _with_indices(parts: list[str], arrays: dict[tuple[str, ...], int]) -> list[str]:
    """`template.variables` -> `template.3.variables` inside the fourth `[[template]]`."""
    out: list[str] = []
    for i, part in enumerate(parts):
        out.append(part)
        index = arrays.get(tuple(parts[: i + 1]))
        if index is not None:
            out.append(str(index))
    return out
