"""What every `herald` command prints through: the help formatter that states defaults,
`--json`/`--utc`, sub-actions built like commands, and the API's documents as JSON."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel


def print_value(value: Any, as_json: bool, render: Callable[[Any], str] | None = None) -> None:
    if as_json:
        plain = asdict(value) if is_dataclass(value) and not isinstance(value, type) else value
        print(json.dumps(plain, indent=2, default=str))
    else:
        print(render(value) if render else value)


def api_document(schema: type[BaseModel], value: Any) -> dict[str, Any]:
    """`value` as the HTTP API returns it under `schema` (the same validation and the same
    JSON: field names, shapes, times as ISO 8601), so a script reads both alike."""
    plain = asdict(value) if is_dataclass(value) and not isinstance(value, type) else value
    return schema.model_validate(plain).model_dump(mode="json")


def print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2))


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each option's help ends with its default, when it has one worth saying (not when
    the help already names it, and never a bare `None`); examples keep their lines."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            not action.option_strings
            or action.default in (None, False, argparse.SUPPRESS)
            or "default" in text
        ):
            return text
        return f"{text} (default: %(default)s)"


def output_options(sp: argparse.ArgumentParser) -> None:
    """`--json` and `--utc`, the same on every command that prints data; and the help
    formatter that states defaults (a sub-action's parser is built without it)."""
    sp.formatter_class = HelpFormatter
    sp.add_argument(
        "--json",
        action="store_true",
        help="print JSON (for what the HTTP API also serves, the document it returns)",
    )
    sp.add_argument(
        "--utc", action="store_true", help="print times in UTC (default: the local zone)"
    )


def action(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help: str,
    *,
    example: str,
    json_flag: bool = True,
) -> argparse.ArgumentParser:
    """A command's sub-action (`herald template show`), built like a command: its help as
    description, an example that works as written, and `--json`/`--utc`."""
    sp = actions.add_parser(
        name,
        help=help,
        description=help,
        epilog=f"example:\n  {example}",
        formatter_class=HelpFormatter,
    )
    if json_flag:
        output_options(sp)
    return sp
