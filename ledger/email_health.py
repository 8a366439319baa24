"""Bounce and complaint rates of the email Herald sends, per day and per sender domain.

The numbers mailbox providers enforce (docs/operations.md, "Email health"): the share of
accepted messages that hard-bounce, and the share of delivered messages their recipients
report as spam. Read from the ledger's own evidence: attempts a provider accepted, and the
provider's signed events (observations from the email Event Webhook). Only a provider that
reports events (SendGrid) gives bounces and complaints; over SMTP both read zero.

A sender domain is the domain of the From an attempt went out with: Herald's own, never
a recipient's, so it may be a metric label.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime
from email.utils import parseaddr

from sqlalchemy import Date, cast, func, select
from sqlalchemy.orm import Session

from domain import channels
from ledger.models import Attempt, Observation


@dataclass(frozen=True)
class EmailRates:
    """One day (UTC) and sender domain."""

    day: date
    sender_domain: str
    accepted: int
    """Email attempts a provider or relay accepted that day."""
    delivered: int
    """Signed `delivered` events that day."""
    bounces: int
    """Hard bounces (`bounce` of type bounce) that day."""
    complaints: int
    """Spam reports that day."""

    @property
    def bounce_rate(self) -> float | None:
        """Hard bounces per accepted message; None when nothing was accepted."""
        return self.bounces / self.accepted if self.accepted else None

    @property
    def complaint_rate(self) -> float | None:
        """Spam reports per delivered message (the mailbox providers' spam rate)."""
        return self.complaints / self.delivered if self.delivered else None


def sender_domain(sender: str | None) -> str:
    """The domain of a From (``Name <a@b>`` or ``a@b``), lowercased; ``unknown`` if none."""
    address = parseaddr(sender or "")[1]
    return address.rpartition("@")[2].lower() or "unknown"


def email_rates(session: Session, *, since: datetime, until: datetime) -> list[EmailRates]:
    """Per UTC day and sender domain, from `since` to `until`, oldest first."""
    email = channels.EMAIL.name
    sender = func.coalesce(Attempt.sender_address, Attempt.sender)
    accepted_day = cast(func.timezone("UTC", Attempt.submitted_at), Date)
    accepted = session.execute(
        select(accepted_day, sender, func.count())
        .where(
            Attempt.channel == email,
            Attempt.submitted_at >= since,
            Attempt.submitted_at < until,
        )
        .group_by(accepted_day, sender)
    ).all()
    event_day = cast(func.timezone("UTC", Observation.observed_at), Date)
    events = session.execute(
        select(event_day, sender, Observation.raw_status, func.count())
        .join(Attempt, Attempt.id == Observation.attempt_id)
        .where(
            Attempt.channel == email,
            Observation.source == "webhook",
            Observation.raw_status.in_(("delivered", "bounce", "spamreport")),
            Observation.observed_at >= since,
            Observation.observed_at < until,
        )
        .group_by(event_day, sender, Observation.raw_status)
    ).all()
    counts: dict[tuple[date, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for day, who, n in accepted:
        counts[(day, sender_domain(who))]["accepted"] += n
    for day, who, word, n in events:
        counts[(day, sender_domain(who))][word] += n
    return [
        EmailRates(
            day,
            domain,
            accepted=c["accepted"],
            delivered=c["delivered"],
            bounces=c["bounce"],
            complaints=c["spamreport"],
        )
        for (day, domain), c in sorted(counts.items())
    ]


def totals(rates: list[EmailRates]) -> dict[str, EmailRates]:
    """The same numbers summed over days, per sender domain (the day is the latest)."""
    summed: dict[str, EmailRates] = {}
    for r in rates:
        before = summed.get(r.sender_domain)
        summed[r.sender_domain] = (
            r
            if before is None
            else EmailRates(
                max(before.day, r.day),
                r.sender_domain,
                before.accepted + r.accepted,
                before.delivered + r.delivered,
                before.bounces + r.bounces,
                before.complaints + r.complaints,
            )
        )
    return summed
