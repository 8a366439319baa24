"""The intents list (filtered, paged, counted by state), its CSV export, and the
search by recipient (a POST form: contact data never reaches a URL)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, StreamingResponse
from sqlalchemy.orm import Session

from api.console import reads
from api.console.deps import Who, checked
from api.console.rendering import page
from api.deps import IngressDep
from domain import channels
from domain.destinations import normalized_destination

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
) -> reads.IntentFilter:
    def moment(name: str, value: str | None) -> datetime | None:
        if not value:
            return None
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError as err:
            raise HTTPException(
                400, f"{name}: not a date and time (YYYY-MM-DDTHH:MM, UTC)"
            ) from err
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)

    if state and state not in reads.STATES:
        raise HTTPException(400, f"state: one of {', '.join(reads.STATES)}")
    if channel and channel not in channels.REGISTRY:
        raise HTTPException(400, f"channel: one of {', '.join(channels.NAMES)}")
    if both_channels not in (None, "", "1"):
        raise HTTPException(400, "both channels: 1 (or leave it out)")
    if attempt_state and attempt_state not in reads.ATTEMPT_STATES:
        raise HTTPException(400, f"attempt state: one of {', '.join(reads.ATTEMPT_STATES)}")
    return reads.IntentFilter(
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
    )


Filter = Annotated[str | None, Query(max_length=200)]


def intent_filter(
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
) -> reads.IntentFilter:
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
    )


@router.get("/intents", response_class=HTMLResponse)
async def intents(
    request: Request,
    who: Who,
    flt: Annotated[reads.IntentFilter, Depends(intent_filter)],
    ingress: IngressDep,
    after: Filter = None,
) -> HTMLResponse:
    try:
        cursor = reads.decode_cursor(after) if after else None
    except ValueError as err:
        raise HTTPException(400, "after: not a page cursor from this console") from err

    def work(session: Session) -> tuple[reads.IntentList, reads.StateCounts]:
        return reads.list_page(session, flt, after=cursor), reads.counts_by_state(session, flt)

    listed, counts = await ingress.tx(work)
    return page(
        request,
        "intents.html",
        who,
        flt=flt,
        listed=listed,
        counts=counts,
        cap=reads.COUNT_CAP,
        params=flt.query_params(),
        next_url=(
            "/console/intents?" + urlencode({**flt.query_params(), "after": listed.next_cursor})
            if listed.next_cursor
            else None
        ),
        csv_url="/console/intents.csv?" + urlencode(flt.query_params()),
        state_url=lambda s: "/console/intents?" + urlencode({**flt.query_params(), "state": s}),
    )


@router.get("/intents.csv")
async def intents_csv(
    who: Who, flt: Annotated[reads.IntentFilter, Depends(intent_filter)], ingress: IngressDep
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
async def search(
    request: Request,
    who: Who,
    ingress: IngressDep,
    destination: Annotated[str, Form(max_length=320)] = "",
    csrf: Annotated[str | None, Form()] = None,
) -> HTMLResponse:
    """A recipient's phone number or address, matched by the ledger's HMAC; the answer
    is rendered here (never a redirect, which would put it in a URL)."""
    checked(who, csrf, act=False)
    try:
        lookup = ingress.client.lookup_hmac(normalized_destination(destination.strip(), None))
    except ValueError as err:
        return page(
            request,
            "search.html",
            who,
            status_code=400,
            error=f"Not a phone number or an email address: {err}",
        )
    flt = reads.IntentFilter(recipient_hmac=lookup)

    def work(session: Session) -> tuple[reads.IntentList, list[str]]:
        return (
            reads.list_page(session, flt, size=100),
            reads.recipient_refs_for(session, lookup),
        )

    listed, refs = await ingress.tx(work)
    return page(request, "search.html", who, listed=listed, refs=refs, searched=True)
