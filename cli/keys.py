"""`herald keys status | new | rotate | retire`: the data key ring against the ledger.

Run where HERALD_DATA_KEY (or, in dev, the data folder's `data.key`) and the ledger are:
whoever holds both can read every field anyway. Each command first checks the ring against
the ledger (ledger.keys.check_key_ring), as the worker and the API do at start. The
procedure is docs/operations.md, "Rotating the data key".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import IO, Any

import settings as settings_module
from domain.clocks import iso_utc
from runtime.tables import Clock, table

BAR_WIDTH = 30


class ProgressLine:
    """One line on stderr that redraws itself (`\\r`) on a terminal; elsewhere (a log, a
    pipe) nothing until the end, so a log is not filled with a line per batch."""

    def __init__(self, label: str, stream: IO[str] | None = None) -> None:
        self._label = label
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._last = (0, 0)

    def __call__(self, done: int, total: int) -> None:
        self._last = (done, total)
        if self._tty:
            self._stream.write("\r" + self.line(done, total))
            self._stream.flush()

    def line(self, done: int, total: int) -> str:
        """`label [#####.....] done/total (pct%)`."""
        share = 1.0 if total == 0 else min(done / total, 1.0)
        filled = round(share * BAR_WIDTH)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        return f"{self._label} [{bar}] {done}/{total} ({share:.0%})"

    def close(self) -> None:
        """End the line (on a terminal) or write it once (elsewhere)."""
        if self._tty:
            self._stream.write("\n")
        else:
            self._stream.write(self.line(*self._last) + "\n")
        self._stream.flush()


async def cmd_keys(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from sqlalchemy import create_engine

    from cli.context import CliError, adopt_running
    from cli.output import print_value
    from ledger import keys
    from ledger.crypto import FieldCipher, KeyRingError

    if args.keys_command == "new":
        try:
            entry = keys.new_key(args.kid)
        except KeyRingError as err:
            raise CliError(str(err)) from err
        print(entry)
        print(
            f"put it first in HERALD_DATA_KEY ({args.kid}:...,<the keys there now>), keep a "
            "copy in escrow, restart every worker and API, then run `herald keys rotate`",
            file=sys.stderr,
        )
        return 0
    adopt_running(cfg)
    engine = create_engine(cfg.resolved_database_url(), pool_pre_ping=True)
    try:
        cipher = FieldCipher(cfg.resolved_data_keys())
        keys.check_key_ring(engine, cipher)
        if args.keys_command == "status":
            rows = [_status_row(s) for s in keys.key_status(engine, cipher)]
            print_value(
                rows, args.json, lambda listed: _render_status(listed, Clock.for_args(args.utc))
            )
            return 0
        if args.keys_command == "rotate":
            progress = ProgressLine(f"re-encrypting under {cipher.primary}")
            try:
                done = keys.rotate(engine, cipher, batch=args.batch, progress=progress)
            finally:
                progress.close()
            left = {
                s.kid: s.rows for s in keys.key_status(engine, cipher) if s.rows and not s.primary
            }
            out: dict[str, Any] = {"primary": cipher.primary, "reencrypted": done, "left": left}
            print_value(out, args.json, _render_rotated)
            return 0
        keys.retire(engine, cipher, args.kid)
        print_value(
            {"retired": args.kid},
            args.json,
            lambda o: (
                f"data key {o['retired']} retired: remove it from HERALD_DATA_KEY "
                "everywhere (a ring that holds it is refused from now on)"
            ),
        )
        return 0
    finally:
        engine.dispose()


def _status_row(status: Any) -> dict[str, Any]:
    return {
        "kid": status.kid,
        "in_ring": status.in_ring,
        "primary": status.primary,
        "derivation": status.derivation,
        "rows": status.rows,
        "recorded_at": iso_utc(status.recorded_at),
        "retired_at": iso_utc(status.retired_at),
        "columns": status.columns,
    }


def _yes(value: bool) -> str:
    return "yes" if value else "-"


def _render_status(rows: list[dict[str, Any]], clock: Clock) -> str:
    shown = [
        {
            **row,
            "in_ring": _yes(row["in_ring"]),
            "primary": _yes(row["primary"]),
            "derivation": _yes(row["derivation"]),
        }
        for row in rows
    ]
    return table(
        shown,
        ["kid", "in_ring", "primary", "derivation", "rows", "recorded_at", "retired_at"],
        headers={
            "kid": "KEY",
            "in_ring": "IN RING",
            "primary": "PRIMARY",
            "derivation": "LOOKUP/PROOF KEYS",
            "rows": "CIPHERTEXTS",
            "recorded_at": "RECORDED",
            "retired_at": "RETIRED",
        },
        times=("recorded_at", "retired_at"),
        clock=clock,
    )


def _render_rotated(out: dict[str, Any]) -> str:
    line = f"re-encrypted {out['reencrypted']} ciphertexts under {out['primary']}"
    if out["left"]:
        left = ", ".join(f"{kid}: {rows}" for kid, rows in sorted(out["left"].items()))
        return f"{line}; still under other keys (written meanwhile? run it again): {left}"
    return f"{line}; nothing is left under another key: `herald keys retire KID` may follow"


def register(add: Callable[..., argparse.ArgumentParser]) -> dict[str, Any]:
    from cli.output import action

    top = add(
        "keys",
        "the data key ring against the ledger: status, a new key, rotate, retire",
        json_flag=False,
        example="herald keys status",
    )
    sub = top.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    action(
        sub,
        "status",
        "each key: in the ring, primary, holding the lookup/proof keys, ciphertexts under it",
        example="herald keys status",
    )
    new_p = action(
        sub,
        "new",
        "print a new ring entry KID:base64 (32 random bytes) for HERALD_DATA_KEY",
        example="herald keys new k2",
        json_flag=False,
    )
    new_p.add_argument("kid", help="the new key's id: letters, digits, '-' or '_' (at most 40)")
    rotate_p = action(
        sub,
        "rotate",
        "re-encrypt every field not under the ring's primary key (resumable, in batches)",
        example="herald keys rotate",
    )
    rotate_p.add_argument(
        "--batch",
        type=int,
        default=500,
        help="rows per transaction (default: 500)",
    )
    retire_p = action(
        sub,
        "retire",
        "record a key retired, once nothing in the ledger is under it",
        example="herald keys retire k1",
    )
    retire_p.add_argument("kid", help="the key to retire")
    return {"keys": cmd_keys}
