"""The overview: how the last hour and day went.

Intents and attempts by state over the last hour and day, the share of unknown outcomes,
how often SMS fell back to email, delivery latency, the last 24 hours by outcome, and the
email health of each sender domain.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from domain import channels
from ledger import email_health
from ledger.email_health import EmailRates
from ledger.listing import IntentFilter
from ledger.models import Attempt, Intent
from ledger.read_models.intent_list import counted_by_state, counts_by_state


@dataclass
class Overview:
    """What the overview shows, as counts, shares and seconds."""

    intents: dict[str, dict[str, int]]
    """window -> state -> count."""
    attempts: dict[str, dict[str, int]]
    unknown_share: float | None
    fallback_rate: float | None
    p50_seconds: float | None
    p95_seconds: float | None
    hours: list[dict[str, Any]]
    """The last 24 hours, oldest first: {start, counts by outcome}."""
    email: dict[str, EmailRates] = field(default_factory=dict)
    """The last day's email health per sender domain (bounce and complaint rates)."""


WINDOWS = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
CHART_OUTCOMES = ["delivered", "sent", "unknown", "failed", "undelivered", "cancelled", "other"]
"""The outcomes the last 24 hours are counted by; every other derived state is `other`."""


def overview(session: Session, now: datetime) -> Overview:
    """The overview as of `now`."""
    intents = {
        name: counts_by_state(session, IntentFilter(created_from=now - span), cap=1_000_000).counts
        for name, span in WINDOWS.items()
    }
    attempts: dict[str, dict[str, int]] = {}
    for name, span in WINDOWS.items():
        attempts[name] = dict(
            session.execute(
                select(Attempt.state, func.count())
                .where(Attempt.prepared_at >= now - span)
                .group_by(Attempt.state)
            ).all()
        )
    day = intents["day"]
    total = sum(day.values())
    unknown_share = day.get("unknown", 0) / total if total else None
    with_email = session.execute(
        select(func.count(func.distinct(Attempt.intent_id))).where(
            Attempt.prepared_at >= now - WINDOWS["day"], Attempt.channel == channels.EMAIL.name
        )
    ).scalar_one()
    with_sms = session.execute(
        select(func.count(func.distinct(Attempt.intent_id))).where(
            Attempt.prepared_at >= now - WINDOWS["day"], Attempt.channel == channels.SMS.name
        )
    ).scalar_one()
    both = session.execute(
        select(func.count()).select_from(
            select(Attempt.intent_id)
            .where(Attempt.prepared_at >= now - WINDOWS["day"])
            .group_by(Attempt.intent_id)
            .having(func.count(func.distinct(Attempt.channel)) > 1)
            .subquery()
        )
    ).scalar_one()
    fallback_rate = both / with_sms if with_sms else (None if not with_email else 0.0)
    latency = session.execute(
        select(
            func.percentile_cont(0.5).within_group(
                func.extract("epoch", Attempt.terminal_at - Intent.created_at)
            ),
            func.percentile_cont(0.95).within_group(
                func.extract("epoch", Attempt.terminal_at - Intent.created_at)
            ),
        )
        .join(Intent, Intent.id == Attempt.intent_id)
        .where(Attempt.state == "delivered", Intent.created_at >= now - WINDOWS["day"])
    ).one()
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=23)
    hours: list[dict[str, Any]] = [
        {"start": start + timedelta(hours=h), "counts": Counter()} for h in range(24)
    ]
    hour_of = func.floor(func.extract("epoch", Intent.created_at - start) / 3600)
    by_hour, _ = counted_by_state(
        session, IntentFilter(created_from=start), cap=10_000_000, slot=hour_of
    )
    for (slot, outcome), n in by_hour.items():
        hours[min(max(int(slot), 0), 23)]["counts"][
            outcome if outcome in CHART_OUTCOMES else "other"
        ] += n
    return Overview(
        intents,
        attempts,
        unknown_share,
        fallback_rate,
        float(latency[0]) if latency[0] is not None else None,
        float(latency[1]) if latency[1] is not None else None,
        hours,
        email_health.totals(
            email_health.email_rates(session, since=now - WINDOWS["day"], until=now)
        ),
    )
