"""The latencies and counts operators are told to watch, recorded when Herald learns them.

Scheduled -> submitted, submitted -> delivered, fallbacks, duplicates suppressed and the
age of unknown outcomes become known at a few points of the ledger (applying an
observation, preparing an attempt, claiming a send, recording an intent): those points
note them here, on the session, and they reach the Prometheus metrics only when that
transaction commits (a rolled-back transaction, or a compare-and-set retried by its
caller, counts nothing). Workflow code never records a metric: it replays.

The metrics live in this process's :data:`REGISTRY`: the API serves it on `/metrics`
(the receipts it records: delivered, settled unknowns, redeliveries) beside the
ledger-derived series (api/metrics.py), and each worker serves it at
`HERALD_WORKER_HERALD_METRICS_ADDRESS` (the submits, polls and fallbacks it records).
Prometheus sums the processes; the names, labels and buckets are the same everywhere.

Labels are channel, region, template key and version, role and kind, each from a small
set the policy and template catalog define; a value that does not look like one (too
long, or characters an identifier would not have) is reported as `other`, so nothing
personal can ever become a label.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Histogram
from sqlalchemy import event
from sqlalchemy.orm import Session

from domain import channels
from domain.states import AttemptState

log = logging.getLogger("herald.metrics")

REGISTRY = CollectorRegistry(auto_describe=True)
"""Herald's event-time metrics in this process (not the process-global default registry)."""

SECONDS_BUCKETS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400,
)  # fmt: skip
"""Sub-second where an intent should be (a 500 ms goal), up to a day for unknown outcomes."""

ATTEMPT_LABELS = ("channel", "region", "template_key", "template_version")

SCHEDULED_TO_SUBMITTED = Histogram(
    "herald_scheduled_to_submitted_seconds",
    "Seconds from when an attempt was due (the intent's send-at if it was scheduled, "
    "else when it was recorded) to the provider accepting it (SMS: the carrier's "
    "answer; email: the relay's).",
    ATTEMPT_LABELS,
    buckets=SECONDS_BUCKETS,
    registry=REGISTRY,
)
SUBMITTED_TO_DELIVERED = Histogram(
    "herald_submitted_to_delivered_seconds",
    "Seconds from the provider accepting an attempt to the delivery report (receipt or "
    "poll) that made it delivered.",
    ATTEMPT_LABELS,
    buckets=SECONDS_BUCKETS,
    registry=REGISTRY,
)
ATTEMPTS_PREPARED = Counter(
    "herald_attempts_prepared",
    "Attempts prepared (authorized, about to be sent), by role: first (the intent's first "
    "channel, or any channel of an all-channels plan), fallback (a later channel of a "
    "fallback plan), resend (an operator-approved attempt number > 1).",
    (*ATTEMPT_LABELS, "role"),
    registry=REGISTRY,
)
FALLBACKS = Counter(
    "herald_fallbacks",
    "Attempts on a fallback channel (the channel label is the one fallen back to). "
    'Fallback rate: this over herald_attempts_prepared_total{role="first"}.',
    ATTEMPT_LABELS,
    registry=REGISTRY,
)
DUPLICATES_SUPPRESSED = Counter(
    "herald_duplicates_suppressed",
    "Duplicates the ledger absorbed without acting twice, by kind: "
    "observation_redelivery (a status whose dedupe key was already stored), "
    "stale_observation (a status older than or equal to what is known, kept as evidence), "
    "send_already_submitted (a retried send whose attempt the provider already has), "
    "business_key_existing (an intent recorded again for a key that exists).",
    ("kind", "channel"),
    registry=REGISTRY,
)
UNKNOWN_OUTCOMES = Counter(
    "herald_unknown_outcomes",
    "Attempts that became unknown (no final answer before the transport window or the "
    "polling horizon closed).",
    ATTEMPT_LABELS,
    registry=REGISTRY,
)
UNKNOWN_AGE_AT_SETTLEMENT = Histogram(
    "herald_unknown_age_at_settlement_seconds",
    "How long an unknown outcome stayed unknown (since its last status) before a real "
    "observation settled it. The oldest still open: herald_unknown_outcome_max_age_seconds.",
    ATTEMPT_LABELS,
    buckets=SECONDS_BUCKETS,
    registry=REGISTRY,
)
DATA_KEY_ERRORS = Counter(
    "herald_data_key_errors",
    "Intents stopped because this worker's data key ring could not read their contact data "
    "(a key id the ring lacks, or a ciphertext that does not open), by step: authorize, "
    "submit_sms, lookup_sms, send_email. Each also files a data_key_unreadable review item.",
    ("step",),
    registry=REGISTRY,
)

DUPLICATE_KINDS = (
    "observation_redelivery",
    "stale_observation",
    "send_already_submitted",
    "business_key_existing",
)
for _kind in DUPLICATE_KINDS:
    for _channel in channels.NAMES:
        DUPLICATES_SUPPRESSED.labels(_kind, _channel)

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9_.:-]{1,40}$")
_PENDING = "herald_metrics_pending"


def label(value: object) -> str:
    """A label value from a bounded set, or `other` (never free text that might be PII)."""
    text = "" if value is None else str(value)
    if not _LABEL_VALUE.match(text) or text.startswith("+") or (text.isdigit() and len(text) > 4):
        return "other" if text else "none"
    return text


def attempt_labels(
    channel: str, region: str | None, template_key: str | None, template_version: object
) -> tuple[str, str, str, str]:
    """The metric labels of an attempt, each bounded (ledger.metrics.label)."""
    return (label(channel), label(region), label(template_key), label(template_version))


def note(session: Session, record: Callable[[], None]) -> None:
    """Record `record()` when this session's transaction commits (dropped on rollback)."""
    session.info.setdefault(_PENDING, []).append(record)


@event.listens_for(Session, "after_commit")
def _after_commit(session: Session) -> None:
    for record in session.info.pop(_PENDING, ()):
        try:
            record()
        except Exception:  # noqa: BLE001 - a metric must never fail a committed write
            log.warning("a metric could not be recorded", exc_info=True)


@event.listens_for(Session, "after_rollback")
def _after_rollback(session: Session) -> None:
    session.info.pop(_PENDING, None)


# --- the facts -------------------------------------------------------------------------


def note_transition(
    session: Session,
    labels: tuple[str, str, str, str],
    *,
    before: AttemptState,
    after: AttemptState,
    observed_at: datetime,
    due_at: datetime | None,
    submitted_before: datetime | None,
    last_status_before: datetime | None,
    submitted_now: datetime | None,
) -> None:
    """An attempt moved from `before` to `after` (a compare-and-set that succeeded)."""
    if submitted_before is None and submitted_now is not None and due_at is not None:
        waited = max(0.0, (submitted_now - due_at).total_seconds())
        note(session, lambda: SCHEDULED_TO_SUBMITTED.labels(*labels).observe(waited))
    if after == AttemptState.DELIVERED and submitted_before is not None:
        # Receipt-first deliveries (the send's answer lost) have no submit time to measure.
        took = max(0.0, (observed_at - submitted_before).total_seconds())
        note(session, lambda: SUBMITTED_TO_DELIVERED.labels(*labels).observe(took))
    if after == AttemptState.UNKNOWN and before != AttemptState.UNKNOWN:
        note(session, lambda: UNKNOWN_OUTCOMES.labels(*labels).inc())
    if before == AttemptState.UNKNOWN and after != AttemptState.UNKNOWN:
        since = last_status_before or submitted_before
        if since is not None:
            age = max(0.0, (observed_at - since).total_seconds())
            note(session, lambda: UNKNOWN_AGE_AT_SETTLEMENT.labels(*labels).observe(age))


def note_prepared(session: Session, labels: tuple[str, str, str, str], *, role: str) -> None:
    """Count a prepared attempt (and a fallback) once the transaction commits."""
    note(session, lambda: ATTEMPTS_PREPARED.labels(*labels, role).inc())
    if role == "fallback":
        note(session, lambda: FALLBACKS.labels(*labels).inc())


def note_duplicate(session: Session, kind: str, channel: str | None) -> None:
    """Count a duplicate suppressed once the transaction commits."""
    assert kind in DUPLICATE_KINDS, kind
    note(session, lambda: DUPLICATES_SUPPRESSED.labels(kind, label(channel)).inc())


def count_duplicate(kind: str, channel: str | None) -> None:
    """A duplicate suppressed outside any write transaction (nothing to wait for)."""
    assert kind in DUPLICATE_KINDS, kind
    DUPLICATES_SUPPRESSED.labels(kind, label(channel)).inc()


def attempt_role(plan: dict[str, object] | None, channel: str, number: int) -> str:
    """first, fallback or resend: what preparing this attempt means for the intent."""
    if number > 1:
        return "resend"
    plan = plan or {}
    channels = plan.get("channels") or []
    if (
        plan.get("mode") == "fallback"
        and isinstance(channels, list)
        and channel in channels
        and channels.index(channel) > 0
    ):
        return "fallback"
    return "first"
