"""`herald migrate` and `herald worker`: what a deployment runs besides the API (a
one-shot before anything else, then the workers)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import settings as settings_module
from cli.context import CliError, adopt_running
from cli.output import print_value

if TYPE_CHECKING:
    from cli.main import Command


async def cmd_migrate(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    from ledger import migrate
    from ledger.templates import seed_packaged

    # In the wrong folder (no stack, no database set) stop as every ledger command does:
    # the default port may be another stack's Postgres, or some other program's.
    adopt_running(cfg)
    url = cfg.resolved_database_url()
    await asyncio.to_thread(migrate.upgrade, url)
    if cfg.env == "dev":
        # The ledger's key is born with the ledger, once the database has answered: a
        # migration that failed leaves no key to mislead the next command.
        cfg.resolved_data_keys(create=True)
    sessions = sessionmaker(create_engine(url))
    with sessions.begin() as session:
        seed_packaged(session, cfg.policy_name)
    # Lookups added by a migration that only the data key can compute.
    from ledger.crypto import FieldCipher
    from ledger.keys import check_key_ring
    from ledger.search_lookups import backfill_email_search

    try:
        cipher = FieldCipher(cfg.resolved_data_keys())
        # Records the ring's keys and gives the lookups the ledger's own key (ledger.keys).
        check_key_ring(sessions.kw["bind"], cipher)
    except RuntimeError:
        cipher = None  # no data key here: the lookups wait for a `herald migrate` that has it
        print(
            "note: email search lookups not filled (no data key); run `herald migrate` "
            "where HERALD_DATA_KEY is set",
            file=sys.stderr,
        )
    while cipher is not None:
        with sessions.begin() as session:
            if not backfill_email_search(session, cipher):
                break
    print_value({"migrated": True}, args.json, lambda _: "ledger migrated to head")
    return 0


async def cmd_worker(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    import worker

    try:
        cfg.sender_book()  # one line naming the bad alias, before anything connects
    except RuntimeError as err:
        raise CliError(str(err)) from err
    await worker.main(cfg)
    return 0


def register(add: Callable[..., argparse.ArgumentParser]) -> dict[str, Command]:
    add(
        "migrate",
        "apply ledger migrations and load packaged policies and templates",
        example="HERALD_DATABASE_URL=postgresql://... herald migrate",
    )
    add(
        "worker",
        "run a Temporal worker (workflows, ledger, SMS and email activities)",
        json_flag=False,
        example="HERALD_TEMPORAL_ADDRESS=temporal:7233 herald worker",
    )
    return {"migrate": cmd_migrate, "worker": cmd_worker}
