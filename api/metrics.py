"""Herald's own Prometheus metrics, read from the ledger at scrape time, and this
process's event-time series (ledger.metrics: the facts the receipts it records establish).

The ledger is the truth that every process shares, so most series are aggregate queries
run when Prometheus scrapes (:class:`LedgerCollector`): any number of API replicas report
the same numbers, and nothing is lost when a process restarts. A few facts never reach the
ledger (a receipt delivered twice, an Idempotency-Key replay); those are process-local
counters (:class:`ApiCounters`), summed across replicas by Prometheus.

Labels are only channel, region, state, verdict, source, rule, reason, kind, provider
alias and template key/version: never a phone number, address, body, business key or id.

Every query returns one row per label combination (bounded by the number of states,
channels, regions, rules and template versions), under a statement timeout. The scans are
full-table aggregates over the indexed ledger; at very large volumes, bound them by the
retention purge or move them to a reporting replica.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from domain import channels
from domain.circuit import CircuitState
from domain.intents import IntentState
from domain.policy import Outcome
from domain.states import AttemptState
from ledger import email_health
from ledger.circuits import all_circuits
from ledger.listing import derived_state
from ledger.metrics import REGISTRY as EVENT_REGISTRY
from ledger.metrics import label

log = logging.getLogger("herald.metrics")

WINDOW = timedelta(hours=24)
"""Latency histograms cover attempts submitted (or delivered) within this window."""
LATENCY_BUCKETS: tuple[float, ...] = (
    1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400,
)  # fmt: skip
STATEMENT_TIMEOUT_MS = 5000
CHANNELS = channels.NAMES

_INTENTS_BY_DERIVATION_INPUTS = text(
    """
    WITH a AS (
        SELECT intent_id, array_agg(DISTINCT state ORDER BY state) AS states
        FROM attempt GROUP BY intent_id
    ), d AS (
        SELECT DISTINCT ON (intent_id) intent_id, outcome
        FROM policy_decision ORDER BY intent_id, id DESC
    )
    SELECT a.states,
           d.outcome,
           i.cancelled_at IS NOT NULL AS cancelled,
           (i.expires_at IS NOT NULL AND i.expires_at <= now()) AS past_expiry,
           (i.send_at IS NOT NULL AND i.send_at > now()) AS scheduled,
           count(*) AS n
    FROM intent i
    LEFT JOIN a ON a.intent_id = i.id
    LEFT JOIN d ON d.intent_id = i.id
    GROUP BY 1, 2, 3, 4, 5
    """
)


def _latency_query(end_column: str, extra_where: str) -> Any:
    seconds = f"extract(epoch FROM a.{end_column} - i.created_at)"
    buckets = ",\n".join(
        f"count(*) FILTER (WHERE {seconds} <= {b}) AS b{n}" for n, b in enumerate(LATENCY_BUCKETS)
    )
    return text(
        f"""
        SELECT a.channel, i.region, a.template_key, a.template_version,
               {buckets},
               count(*) AS n,
               coalesce(sum({seconds}), 0) AS total
        FROM attempt a JOIN intent i ON i.id = a.intent_id
        WHERE a.{end_column} IS NOT NULL AND a.{end_column} >= now() - :window {extra_where}
        GROUP BY 1, 2, 3, 4
        """
    )


_TO_SUBMITTED = _latency_query("submitted_at", "")
_TO_DELIVERED = _latency_query("terminal_at", "AND a.state = 'delivered'")


class ApiCounters:
    """Process-local counters for what never reaches the ledger."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.duplicates = Counter(
            "herald_api_duplicates_suppressed",
            "Duplicates this API process absorbed without changing anything: "
            "webhook_redelivery (a receipt with a dedupe key already stored), "
            "idempotency_key_replay (a stored response replayed), "
            "business_key_existing (POST /v1/intents for a key already recorded).",
            ["kind"],
            registry=registry,
        )
        self.receipts = Counter(
            "herald_api_receipts",
            "Verified delivery receipts by what recording them did "
            "(applied, settles_unknown, stale, conflict, orphan, duplicate).",
            ["verdict"],
            registry=registry,
        )
        self.rejected = Counter(
            "herald_api_webhooks_rejected",
            "Webhook requests refused before reaching the ledger, by reason "
            "(signature, malformed, too_large).",
            ["reason"],
            registry=registry,
        )
        self.sign_ins_refused = Counter(
            "herald_console_sign_ins_refused",
            "Console sign-ins refused, by reason: credentials (a wrong name or token, or a "
            "principal who may not use the console), throttled (too many refusals for the "
            "name or the client address: answered 429), form (a stale or reused form). "
            "Alert on a rise of credentials or throttled.",
            ["reason"],
            registry=registry,
        )
        for reason in ("credentials", "throttled", "form"):
            self.sign_ins_refused.labels(reason)
        for kind in ("webhook_redelivery", "idempotency_key_replay", "business_key_existing"):
            self.duplicates.labels(kind)

    def note_intent(self, *, existed: bool) -> None:
        if existed:
            self.duplicates.labels("business_key_existing").inc()


class LedgerCollector(Collector):
    """Aggregate queries over the ledger, run at scrape time."""

    def __init__(self, sessions: sessionmaker[Session], *, window: timedelta = WINDOW) -> None:
        self._sessions = sessions
        self._window = window

    def describe(self) -> Iterable[Metric]:
        # Declared empty so registering does not run the queries.
        return []

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        up = GaugeMetricFamily("herald_ledger_up", "1 if the ledger answered the last scrape.")
        try:
            with self._sessions.begin() as session:
                session.execute(text("SET TRANSACTION READ ONLY"))
                session.execute(text(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}"))
                families = list(self._families(session))
        except Exception as err:  # noqa: BLE001 - a scrape reports the outage, never a 500
            log.warning("ledger metrics unavailable: %s", type(err).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families
        took = GaugeMetricFamily(
            "herald_ledger_scrape_seconds", "Time the ledger queries of this scrape took."
        )
        took.add_metric([], time.monotonic() - started)
        yield took

    def _families(self, session: Session) -> Iterator[Metric]:
        yield self._intents(session)
        yield self._attempts(session)
        yield from self._latencies(session)
        yield from self._decisions(session)
        yield from self._observations(session)
        yield from self._unknown(session)
        yield from self._reconciliation(session)
        yield from self._email_health(session)
        yield self._circuits(session)

    def _circuits(self, session: Session) -> Metric:
        family = GaugeMetricFamily(
            "herald_provider_circuit",
            "Each SMS provider's circuit breaker: 1 for its current state (closed, open, "
            "half_open), 0 for the others; providers appear once one was used.",
            labels=["provider", "state"],
        )
        for circuit in all_circuits(session):
            for state in CircuitState:
                family.add_metric(
                    [label(circuit.provider), state.value], int(circuit.state == state)
                )
        return family

    def _intents(self, session: Session) -> Metric:
        family = GaugeMetricFamily(
            "herald_intents",
            "Intents by derived state (domain.intents.derive_intent_state).",
            labels=["state"],
        )
        counts = {s.value: 0 for s in IntentState}
        for states, outcome, cancelled, past_expiry, scheduled, n in session.execute(
            _INTENTS_BY_DERIVATION_INPUTS
        ):
            # One row per combination of derivation inputs, derived by the ledger's one
            # reading of them, so this can never disagree with `herald show`.
            state = derived_state(
                states or [],
                outcome,
                cancelled=bool(cancelled),
                past_expiry=bool(past_expiry),
                scheduled=bool(scheduled),
            )
            counts[state.value] += n
        for name, n in counts.items():
            family.add_metric([name], n)
        return family

    def _attempts(self, session: Session) -> Metric:
        family = GaugeMetricFamily(
            "herald_attempts", "Attempts by channel and current state.", labels=["channel", "state"]
        )
        rows = session.execute(
            text("SELECT channel, state, count(*) FROM attempt GROUP BY 1, 2")
        ).all()
        seen = {(c, s): n for c, s, n in rows}
        for channel in CHANNELS:
            for state in AttemptState:
                seen.setdefault((channel, state.value), 0)
        for (channel, state), n in sorted(seen.items()):
            family.add_metric([channel, state], n)
        return family

    def _latencies(self, session: Session) -> Iterator[Metric]:
        labels = ["channel", "region", "template_key", "template_version"]
        window_h = self._window.total_seconds() / 3600
        for name, query, what in (
            ("herald_intent_to_submitted_seconds", _TO_SUBMITTED, "provider acceptance"),
            ("herald_intent_to_delivered_seconds", _TO_DELIVERED, "a delivery receipt"),
        ):
            family = GaugeHistogramMetricFamily(
                name,
                f"Seconds from the intent being recorded to {what}, over attempts of the "
                f"last {window_h:g} h (a gauge histogram: use histogram_quantile on it "
                "directly, not on rate()).",
                labels=labels,
            )
            for row in session.execute(query, {"window": self._window}).mappings():
                buckets = [
                    (floatToGoString(b), float(row[f"b{n}"])) for n, b in enumerate(LATENCY_BUCKETS)
                ]
                buckets.append(("+Inf", float(row["n"])))
                family.add_metric(
                    [
                        row["channel"],
                        row["region"],
                        row["template_key"],
                        str(row["template_version"]),
                    ],
                    buckets,
                    float(row["total"]),
                )
            yield family

    def _decisions(self, session: Session) -> Iterator[Metric]:
        decisions = CounterMetricFamily(
            "herald_policy_decisions",
            "Policy decisions by channel, outcome (allow, defer, deny) and deciding rule.",
            labels=["channel", "outcome", "rule"],
        )
        deferrals = CounterMetricFamily(
            "herald_deferrals",
            "Deferrals (backpressure as data) by channel and reason (the deciding rule).",
            labels=["channel", "rule"],
        )
        for channel, outcome, rule, n in session.execute(
            text("SELECT channel, outcome, rule, count(*) FROM policy_decision GROUP BY 1, 2, 3")
        ):
            decisions.add_metric([channel, outcome, rule], n)
            if outcome == Outcome.DEFER.value:
                deferrals.add_metric([channel, rule], n)
        yield decisions
        yield deferrals

    def _observations(self, session: Session) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "herald_observations",
            "Observations kept in the ledger by source and verdict. `stale` ones are "
            "duplicates or late reports the state machine suppressed (kept as evidence, "
            "not applied); `orphan` ones name no known attempt yet.",
            labels=["source", "verdict"],
        )
        for source, verdict, n in session.execute(
            text(
                """
                SELECT source,
                       coalesce(verdict,
                                CASE WHEN attempt_id IS NULL THEN 'orphan' ELSE 'pending' END),
                       count(*)
                FROM observation GROUP BY 1, 2
                """
            )
        ):
            family.add_metric([source, verdict], n)
        yield family

    def _email_health(self, session: Session) -> Iterator[Metric]:
        """Bounce and complaint rates per sender domain over the window (ledger.email_health;
        alert rules in docs/operations.md)."""
        now = datetime.now(UTC)
        summed = email_health.totals(
            email_health.email_rates(session, since=now - self._window, until=now)
        )
        window_h = self._window.total_seconds() / 3600
        counts = GaugeMetricFamily(
            "herald_email_messages",
            f"Email over the last {window_h:g} h per sender domain: accepted by the provider, "
            "and delivered, hard-bounced and reported as spam by its signed events.",
            labels=["sender_domain", "kind"],
        )
        bounce = GaugeMetricFamily(
            "herald_email_bounce_rate",
            f"Hard bounces per accepted email over the last {window_h:g} h, per sender domain.",
            labels=["sender_domain"],
        )
        complaint = GaugeMetricFamily(
            "herald_email_complaint_rate",
            f"Spam reports per delivered email over the last {window_h:g} h, per sender "
            "domain (the spam rate Gmail and Yahoo enforce).",
            labels=["sender_domain"],
        )
        for domain, r in sorted(summed.items()):
            for kind, n in (
                ("accepted", r.accepted),
                ("delivered", r.delivered),
                ("bounced", r.bounces),
                ("complained", r.complaints),
            ):
                counts.add_metric([domain, kind], n)
            bounce.add_metric([domain], r.bounce_rate or 0.0)
            complaint.add_metric([domain], r.complaint_rate or 0.0)
        yield counts
        yield bounce
        yield complaint

    def _unknown(self, session: Session) -> Iterator[Metric]:
        count = GaugeMetricFamily(
            "herald_unknown_attempts",
            "Attempts whose outcome is unknown (awaiting reconciliation).",
            labels=["channel"],
        )
        age = GaugeMetricFamily(
            "herald_unknown_outcome_max_age_seconds",
            "Age of the oldest attempt in state unknown, since its last status.",
            labels=["channel"],
        )
        rows = {
            channel: (n, oldest)
            for channel, n, oldest in session.execute(
                text(
                    """
                    SELECT channel, count(*),
                           max(extract(epoch FROM now() - coalesce(last_status_at,
                                                                   submitted_at, prepared_at)))
                    FROM attempt WHERE state = 'unknown' GROUP BY 1
                    """
                )
            )
        }
        for channel in sorted(set(CHANNELS) | set(rows)):
            n, oldest = rows.get(channel, (0, 0))
            count.add_metric([channel], n)
            age.add_metric([channel], float(oldest or 0))
        yield count
        yield age

    def _reconciliation(self, session: Session) -> Iterator[Metric]:
        review = GaugeMetricFamily(
            "herald_review_items_open",
            "Unresolved reconciliation/review items by kind.",
            labels=["kind"],
        )
        oldest = GaugeMetricFamily(
            "herald_review_item_open_max_age_seconds",
            "Age of the oldest unresolved review item of each kind (set), since it was filed.",
            labels=["kind"],
        )
        for kind, n, age in session.execute(
            text(
                "SELECT kind, count(*), max(extract(epoch FROM now() - found_at)) "
                "FROM review_item WHERE resolved_at IS NULL GROUP BY 1"
            )
        ):
            review.add_metric([kind], n)
            oldest.add_metric([kind], float(age or 0))
        yield review
        yield oldest
        waiting = GaugeMetricFamily(
            "herald_intents_awaiting_operator",
            "Intents whose workflow waits for an operator (a settlement or an approve-resend), "
            "and how soon the first window closes.",
            labels=["awaiting"],
        )
        closing = GaugeMetricFamily(
            "herald_awaiting_operator_min_seconds_left",
            "Seconds until the soonest waiting window closes, by what it waits for.",
            labels=["awaiting"],
        )
        for awaiting, n, left in session.execute(
            text(
                "SELECT awaiting, count(*), min(extract(epoch FROM awaiting_until - now())) "
                "FROM intent WHERE awaiting IS NOT NULL GROUP BY 1"
            )
        ):
            waiting.add_metric([awaiting], n)
            closing.add_metric([awaiting], float(left or 0))
        yield waiting
        yield closing
        orphans = GaugeMetricFamily(
            "herald_orphan_observations",
            "Observations that name no known attempt (receipts awaiting reconciliation).",
        )
        orphans.add_metric(
            [],
            session.execute(
                text("SELECT count(*) FROM observation WHERE attempt_id IS NULL")
            ).scalar_one(),
        )
        yield orphans
        pending, oldest = session.execute(
            text(
                "SELECT count(*), coalesce(max(extract(epoch FROM now() - created_at)), 0) "
                "FROM outbox WHERE started_at IS NULL"
            )
        ).one()
        outbox = GaugeMetricFamily(
            "herald_outbox_unstarted", "Recorded intents whose workflow is not started yet."
        )
        outbox.add_metric([], pending)
        yield outbox
        outbox_age = GaugeMetricFamily(
            "herald_outbox_oldest_unstarted_seconds",
            "Age of the oldest outbox row not started (the relay's lag).",
        )
        outbox_age.add_metric([], float(oldest))
        yield outbox_age
        suppressions = GaugeMetricFamily(
            "herald_suppressions_active",
            "Active suppressions (opt-outs, unsubscribes, bounces) by channel and reason.",
            labels=["channel", "reason"],
        )
        for channel, reason, n in session.execute(
            text(
                "SELECT channel, reason, count(*) FROM suppression "
                "WHERE lifted_at IS NULL GROUP BY 1, 2"
            )
        ):
            suppressions.add_metric([channel, reason], n)
        yield suppressions


class EventMetrics(Collector):
    """This process's event-time series (ledger.metrics): the receipts the API records."""

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield from EVENT_REGISTRY.collect()


def build_registry(sessions: sessionmaker[Session]) -> tuple[CollectorRegistry, ApiCounters]:
    """A registry of Herald's own (not the process-global default one, so apps can coexist)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(sessions))
    registry.register(EventMetrics())
    return registry, ApiCounters(registry)
