"""The intents list (filtered, paged, counted by state), its CSV export, and the
search (a POST form: contact data never reaches a URL)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, StreamingResponse
from sqlalchemy.orm import Session

from api.console import reads, search
from api.console.deps import Who, checked
from api.console.rendering import page
from api.deps import IngressDep
from domain import channels
from ledger import listing
from ledger.listing import IntentFilter
from ledger.read_models import intent_list

log = logging.getLogger("herald.console")
router = APIRouter(prefix="/console", include_in_schema=False)


def parse_filter(
    state: str | None,
    channel: str | None,
    event_type: str | None,
    region: str | None,
    category: str | None,
    created_from: str | None,
    created_to: str | None,
    key_prefix: str | None,
    attempt_state: str | None,
    attempt_from: str | None,
    both_channels: str | None,
    awaiting: str | None = None,
) -> IntentFilter:
    def moment(name: str, value: str | None) -> datetime | None:
        if not value:
            return None
        text = value.strip().removesuffix("UTC").strip()
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError as err:
            raise HTTPException(
                400, f"{name}: not a date and time (YYYY-MM-DD HH:MM:SS, UTC)"
            ) from err
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)

    if state and state not in reads.STATES:
        raise HTTPException(400, f"state: one of {', '.join(reads.STATES)}")
    if channel and channel not in channels.REGISTRY:
        raise HTTPException(400, f"channel: one of {', '.join(channels.NAMES)}")
    if both_channels not in (None, "", "1"):
        raise HTTPException(400, "both channels: 1 (or leave it out)")
    if attempt_state and attempt_state not in reads.ATTEMPT_STATES:
        raise HTTPException(400, f"attempt state: one of {', '.join(reads.ATTEMPT_STATES)}")
    if awaiting and awaiting not in reads.AWAITING:
        raise HTTPException(400, f"waits for: one of {', '.join(reads.AWAITING)}")
    return IntentFilter(
        state=state or None,
        channel=channel or None,
        event_type=event_type or None,
        region=region or None,
        category=category or None,
        created_from=moment("created from", created_from),
        created_to=moment("created to", created_to),
        key_prefix=key_prefix or None,
        attempt_state=attempt_state or None,
        attempt_from=moment("attempt from", attempt_from),
        both_channels=both_channels == "1",
        awaiting=awaiting or None,
    )


Filter = Annotated[str | None, Query(max_length=200)]


async def intent_filter(  # async: no thread-pool hop for a parse (see current_ingress)
    state: Filter = None,
    channel: Filter = None,
    event_type: Filter = None,
    region: Filter = None,
    category: Filter = None,
    created_from: Filter = None,
    created_to: Filter = None,
    key_prefix: Filter = None,
    attempt_state: Filter = None,
    attempt_from: Filter = None,
    both_channels: Filter = None,
    awaiting: Filter = None,
) -> IntentFilter:
    return parse_filter(
        state,
        channel,
        event_type,
        region,
        category,
        created_from,
        created_to,
        key_prefix,
        attempt_state,
        attempt_from,
        both_channels,
        awaiting,
    )


@router.get("/intents", response_class=HTMLResponse)
async def intents(
    request: Request,
    who: Who,
    flt: Annotated[IntentFilter, Depends(intent_filter)],
    ingress: IngressDep,
    after: Filter = None,
    before: Filter = None,
) -> HTMLResponse:
    # `after` and `before` both hold a cursor (which way it pages is inside it); two names
    # keep the links readable.
    given = before or after
    try:
        cursor = listing.read_cursor(given, flt) if given else None
    except listing.InvalidCursor as err:
        raise HTTPException(400, f"{'before' if before else 'after'}: {err}") from err

    def work(
        session: Session,
    ) -> tuple[listing.IntentList, intent_list.StateCounts, dict[str, list[str]]]:
        listed = listing.page(session, flt, cursor)
        return (
            listed,
            intent_list.counts_by_state(session, flt),
            intent_list.filter_choices(session),
        )

    listed, counts, choices = await ingress.tx(work)
    now = datetime.now(UTC)
    presets = [
        (
            label,
            "/console/intents?"
            + urlencode(
                {
                    **flt.query_params(),
                    "created_from": start.replace(microsecond=0).isoformat(),
                    "created_to": "",
                }
            ),
        )
        for label, start in reads.date_presets(now)
    ]
    return page(
        request,
        "intents.html",
        who,
        flt=flt,
        listed=listed,
        counts=counts,
        cap=intent_list.COUNT_CAP,
        params=flt.query_params(),
        next_url=(
            "/console/intents?" + urlencode({**flt.query_params(), "after": listed.next_cursor})
            if listed.next_cursor
            else None
        ),
        prev_url=(
            "/console/intents?" + urlencode({**flt.query_params(), "before": listed.newer_cursor})
            if listed.newer_cursor
            else None
        ),
        choices=choices,
        presets=presets,
        csv_url="/console/intents.csv?" + urlencode(flt.query_params()),
        state_url=lambda s: "/console/intents?" + urlencode({**flt.query_params(), "state": s}),
        show_waits=flt.awaiting is not None,
    )


@router.get("/intents.csv")
async def intents_csv(
    who: Who, flt: Annotated[IntentFilter, Depends(intent_filter)], ingress: IngressDep
) -> StreamingResponse:
    def rows() -> list[str]:
        with ingress.client.sessions() as session:
            return list(reads.csv_rows(session, flt))

    body = await asyncio.to_thread(rows)
    log.info("console CSV export by %s", who.principal.name)
    return StreamingResponse(
        iter(body),
        media_type="text/csv; charset=utf-8",
        headers={
            "Content-Disposition": 'attachment; filename="herald-intents.csv"',
            "Cache-Control": "no-store",
        },
    )


@router.post("/search", response_class=HTMLResponse)
async def search_page(
    request: Request,
    who: Who,
    ingress: IngressDep,
    q: Annotated[str, Form(max_length=320)] = "",
    country: Annotated[str, Form(pattern="^[A-Za-z]{2}$")] = "",
    csrf: Annotated[str | None, Form()] = None,
) -> HTMLResponse:
    """Whatever a caller gives (api.console.search), matched in the ledger; the answer is
    rendered here (never a redirect, which would put a phone number in a URL)."""
    checked(who, csrf, act=False)
    region = (country or ingress.default_country).upper()
    if not q.strip():
        return page(request, "search.html", who, status_code=400, error="Type something to find.")
    found = await ingress.tx(
        lambda s: search.find(s, q, country=region, lookup=ingress.client.lookup_hmac)
    )
    return page(request, "search.html", who, found=found, country=region)
