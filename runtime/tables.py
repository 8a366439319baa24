"""How `herald` prints for a person: tables with a header row and aligned columns, and
every time in ISO 8601 with its offset, in one zone named once at the top (`--utc`, or
the local zone). A missing value prints as `-`, never as `None`.

`--json` never comes through here: it prints the API's documents (api/schemas.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

MISSING = "-"


@dataclass(frozen=True)
class Clock:
    """The zone every time of one command's output is printed in."""

    zone: tzinfo | None
    """None: the machine's local zone, DST included (each time gets its own offset)."""

    @classmethod
    def for_args(cls, utc: bool) -> Clock:
        return cls(UTC if utc else None)

    def heading(self) -> str:
        """The line that says, once, which zone the times are in."""
        if self.zone is UTC:
            return "times in UTC"
        here = datetime.now().astimezone()
        return (
            f"times in the local zone ({here.tzname()}, UTC{here.isoformat()[-6:]}; --utc for UTC)"
        )

    def at(self, value: datetime | str | None) -> str:
        """ISO 8601 with the offset, to the millisecond; `-` when there is no time."""
        if value is None or value == "":
            return MISSING
        when = datetime.fromisoformat(value) if isinstance(value, str) else value
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)  # the ledger stores UTC
        return when.astimezone(self.zone).isoformat(timespec="milliseconds")


def cell(value: Any) -> str:
    """A value as a person reads it: lists joined, booleans as yes/no, nothing as `-`."""
    if value is None or value == "":
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple | set):
        return ",".join(cell(v) for v in value) or MISSING
    if isinstance(value, Mapping):
        return " ".join(f"{k}={cell(v)}" for k, v in value.items() if v not in (None, "")) or (
            MISSING
        )
    return str(value)


def table(
    rows: Iterable[Mapping[str, Any]],
    columns: Sequence[str],
    *,
    headers: Mapping[str, str] | None = None,
    times: Iterable[str] = (),
    clock: Clock | None = None,
    empty: str | None = "(none)",
    widths: Mapping[str, int] | None = None,
) -> str:
    """Rows under a header row, each column as wide as its widest cell (at least its entry
    in `widths`); the columns named in `times` go through `clock`; the last column is not
    padded. Without rows, `empty` (None: the header row alone)."""
    timed = set(times)
    cells = [
        [
            clock.at(row.get(c)) if c in timed and clock is not None else cell(row.get(c))
            for c in columns
        ]
        for row in rows
    ]
    if not cells and empty is not None:
        return empty
    heads = [(headers or {}).get(c, c.replace("_", " ").upper()) for c in columns]
    least = [(widths or {}).get(c, 0) for c in columns]
    sizes = [max([len(h), least[i], *(len(r[i]) for r in cells)]) for i, h in enumerate(heads)]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(line, sizes, strict=True)).rstrip()
        for line in [heads, *cells]
    )


TIMELINE_COLUMNS = ("at", "event", "channel", "detail")
TIMELINE_WIDTHS = {"at": len("2026-01-01T00:00:00.000+00:00"), "event": len("observed")}
"""Every time is as wide (milliseconds and an offset) and `observed` is the longest event,
so a timeline's columns are the same width however many rows it has: `show --follow` and
`send --wait` print the header before any row, and later rows line up under it."""


def timeline_head(doc: Mapping[str, Any], clock: Clock) -> list[str]:
    """The intent's lines above its events."""
    i = doc["intent"]
    plan = i["channel_plan"]
    lines = [
        f"intent {i['business_key']}  ({i['id']})",
        f"  state {i['state']}  category {i['category']}  region {i['region']}  "
        f"plan {plan['mode']}:{','.join(plan['channels'])}",
        f"  created {clock.at(i['created_at'])}"
        + (f"  send-at {clock.at(i['send_at'])}" if i["send_at"] else "")
        + (f"  expires {clock.at(i['expires_at'])}" if i["expires_at"] else "")
        + (f"  cancelled {clock.at(i['cancelled_at'])}" if i["cancelled_at"] else ""),
    ]
    return lines


def timeline_lines(doc: Mapping[str, Any], clock: Clock) -> list[str]:
    """The header row and one line per event (`timeline.rows`), columns aligned on the
    widest cell of this document."""
    from ledger import timeline

    found = timeline.rows(dict(doc), clock.at)
    text = table(
        found, TIMELINE_COLUMNS, times=("at",), clock=clock, empty=None, widths=TIMELINE_WIDTHS
    )
    return ["  " + line for line in text.splitlines()]


def timeline_text(doc: Mapping[str, Any], clock: Clock) -> str:
    """What `herald show` prints: the zone, the intent, its events, where each attempt
    ended."""
    from ledger import timeline

    lines = [clock.heading(), *timeline_head(doc, clock), *timeline_lines(doc, clock)]
    lines += ["  " + line for line in timeline.summary(dict(doc))]
    return "\n".join(lines)
