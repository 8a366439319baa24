"""The console's first page: the last day at a glance, each number a link to its list."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from api.console import attention, reads, sessions
from api.console.deps import Who
from api.console.rendering import page
from api.deps import IngressDep
from ledger import circuits
from ledger.read_models.overview import CHART_OUTCOMES, WINDOWS, Overview
from ledger.read_models.overview import overview as read_overview

router = APIRouter(prefix="/console", include_in_schema=False)


@router.get("", response_class=HTMLResponse)
async def overview(request: Request, who: Who, ingress: IngressDep) -> HTMLResponse:
    now = sessions.now()
    data, needs, breakers = await ingress.tx(
        lambda s: (
            read_overview(s, now),
            attention.needs_attention(s, now),
            # Each SMS provider's circuit breaker, as every worker sees it (ledger.circuits).
            circuits.all_circuits(s),
        )
    )
    return page(
        request,
        "overview.html",
        who,
        data=data,
        breakers=breakers,
        attention=needs,
        set_titles=reads.SET_TITLES,
        chart=_chart(data),
        since={name: (now - span).isoformat() for name, span in WINDOWS.items()},
    )


CHART_COLOURS = {
    "delivered": "#2e7d32",
    "sent": "#1565c0",
    "unknown": "#ef6c00",
    "failed": "#c62828",
    "undelivered": "#ad1457",
    "cancelled": "#616161",
    "other": "#9e9e9e",
}


def _chart(data: Overview) -> dict[str, Any]:
    """Stacked bars for the last 24 hours, drawn as SVG rectangles by the server."""
    width, height, bar = 720, 160, 26
    peak = max((sum(h["counts"].values()) for h in data.hours), default=0) or 1
    bars = []
    for index, hour in enumerate(data.hours):
        y = height
        window = {
            "created_from": hour["start"].isoformat(),
            "created_to": (hour["start"] + timedelta(hours=1)).isoformat(),
        }
        for outcome in CHART_OUTCOMES:
            n = hour["counts"].get(outcome, 0)
            if not n:
                continue
            h = n / peak * (height - 10)
            y -= h
            # "other" is several states: its bar leads to the whole hour.
            state = {} if outcome == "other" else {"state": outcome}
            bars.append(
                {
                    "href": "/console/intents?" + urlencode({**state, **window}),
                    "x": index * (width / 24) + 2,
                    "y": round(y, 1),
                    "w": bar,
                    "h": round(h, 1),
                    "colour": CHART_COLOURS[outcome],
                    "label": f"{reads.when(hour['start'])}: {n} {outcome}",
                }
            )
    return {
        "width": width,
        "height": height,
        "bars": bars,
        "peak": peak,
        "legend": CHART_COLOURS,
        "first": reads.when(data.hours[0]["start"]),
    }
