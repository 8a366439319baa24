"""`herald`: the command line for developers and operators.

Every command has `--help` with an example; every option says its default and choices;
commands that print data take `--json` (the HTTP API's documents, api/schemas.py) and
`--utc`; errors go to stderr with a non-zero exit code; operator commands are recorded
under the CLI's principal (HERALD_TOKEN or the data folder's operator.token) with `--reason`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Coroutine
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import settings as settings_module
from cli.context import CliError
from cli.errors import NO_DEV_STACK, is_dev_stack, operational_error
from cli.output import HelpFormatter, output_options
from runtime.loop import run

Command = Callable[[argparse.Namespace, settings_module.Settings], Coroutine[Any, Any, int]]

COMMANDS: dict[str, Command] = {}
"""Each command's coroutine by name, as the modules below register them."""

# The command groups, each in its own module with `register(add) -> dict[str, Command]`,
# where `add(name, help, json_flag=True)` returns an argparse subparser (so `--json` is
# uniform). Imported when the parser is built, in this order (the order `--help` lists).
COMMAND_MODULES = [
    "cli.dev",
    "cli.intents",
    "cli.consent",
    "cli.services",
    "cli.ledger",
    "cli.content",
    "cli.ops",
    "cli.bench",
    "cli.maint",
    "cli.principals",
    "cli.doctor",
    "cli.retention",
    "cli.keys",
    "cli.deploy",
]


def herald_version() -> str:
    try:
        return version("herald")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="herald",
        description=__doc__.splitlines()[0],
        epilog='Shell completion (bash, zsh): eval "$(register-python-argcomplete herald)"',
        formatter_class=HelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"herald {herald_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, help: str, *, json_flag: bool = True, example: str | None = None
    ) -> argparse.ArgumentParser:
        sp = sub.add_parser(
            name,
            help=help,
            description=help,
            epilog=f"example:\n  {example}" if example else None,
            formatter_class=HelpFormatter,
        )
        if json_flag:
            output_options(sp)
        return sp

    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:
                raise
            continue
        COMMANDS.update(module.register(add))
    return p


WORDED_REASONS = ("cancel", "approve-resend", "settle", "legal-hold")
"""Commands whose `--reason` is a person's words, recorded with the action (a
suppression's is a machine word, checked by its command)."""


def _worded(reason: str) -> bool:
    from domain.key_privacy import is_worded

    return is_worded(reason) and len(reason) <= 2000 and "\x00" not in reason


def main(argv: list[str] | None = None) -> int:
    import argcomplete

    built = parser()
    # Answers a completing shell (and exits) when it is the one asking; a no-op otherwise.
    argcomplete.autocomplete(built)
    args = built.parse_args(argv)
    try:
        cfg = settings_module.load()
    except (RuntimeError, ValueError) as err:
        if args.command == "doctor":  # its first check, reported as its others are
            from cli.doctor import settings_refused

            return settings_refused(err)
        # A missing production secret or a malformed HERALD_* value: say which, no traceback.
        print(f"herald {args.command}: settings: {settings_module.problem(err)}", file=sys.stderr)
        return 2
    reason = getattr(args, "reason", None)
    if args.command in WORDED_REASONS and reason is not None and not _worded(reason):
        # As the API and the console refuse it: the timeline would say nothing of why.
        print(
            f"herald {args.command}: --reason: say why in words (1 to 2000 characters)",
            file=sys.stderr,
        )
        return 2
    try:
        return run(COMMANDS[args.command](args, cfg))
    except (CliError, settings_module.MissingDataKey) as err:
        print(f"herald {args.command}: {err}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as err:
        if not is_dev_stack(err):
            raise
        print(f"herald {args.command}: {NO_DEV_STACK}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader left (`herald list | head`): nothing more to say, and nothing to flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as err:
        message = operational_error(err, cfg)
        if message is None:
            raise  # a bug: the traceback is what a developer needs
        print(f"herald {args.command}: {message}", file=sys.stderr)
        return 2


def entry() -> None:
    """The console script: run, flush, and leave without interpreter teardown, which can
    abort a process that used the Temporal client (temporalio/sdk-python#300)."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
