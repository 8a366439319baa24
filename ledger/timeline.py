"""The auditor's view of one intent, read from the ledger alone (no Temporal needed)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from domain import channels, proof
from domain.clocks import iso_utc
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.listing import derive_states
from ledger.models import Attempt, Observation, OperatorAction, PolicyDecision, ReviewItem


def derived_state(session: Session, intent_id: str, *, now: datetime | None = None) -> str:
    """The derived state of one intent (domain.intents), as of `now`."""
    intent = session.get(repo.Intent, intent_id)
    assert intent is not None
    return derive_states(session, [intent], now or datetime.now(UTC))[intent_id]


def _masked_destination(cipher: FieldCipher | None, attempt: Attempt) -> str | None:
    if cipher is None or attempt.destination_ct is None:
        return None  # no key at hand, or the readable copy was purged
    return channels.get(attempt.channel).mask(
        cipher.decrypt(attempt.destination_ct, context=attempt.token)
    )


def timeline(
    session: Session,
    id_or_key: str,
    *,
    cipher: FieldCipher | None = None,
    scope: repo.KeyScope | None = None,
) -> dict[str, Any]:
    """Everything the ledger knows about an intent, without any PII.

    With `cipher`, each attempt carries its destination masked (`+44********42`), never
    readable. A business key is looked up in `scope` (repository.get_intent).
    """
    if not session.in_transaction():
        # One snapshot for every read below: a receipt landing between two of them would
        # otherwise give an intent `delivered` beside its attempt still `sent`.
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
    intent = repo.get_intent(session, id_or_key, scope)
    attempts = repo.attempts_of(session, intent.id)
    decisions = session.execute(
        select(PolicyDecision)
        .where(PolicyDecision.intent_id == intent.id)
        .order_by(PolicyDecision.id)
    ).scalars()
    actions = session.execute(
        select(OperatorAction)
        .where(OperatorAction.intent_id == intent.id)
        .order_by(OperatorAction.id)
    ).scalars()
    attempt_ids = {a.id: a.token for a in attempts}
    observations: Iterable[Observation] = (
        session.execute(
            select(Observation)
            .where(Observation.attempt_id.in_(list(attempt_ids) or [-1]))
            .order_by(Observation.id)
        ).scalars()
        if attempt_ids
        else []
    )
    observations = list(observations)
    subjects = (
        [f"intent:{intent.id}"]
        + [f"attempt:{i}" for i in attempt_ids]
        + [f"observation:{o.id}" for o in observations]
    )
    items = session.execute(
        select(ReviewItem).where(ReviewItem.subject.in_(subjects)).order_by(ReviewItem.id)
    ).scalars()
    return {
        "intent": {
            "id": intent.id,
            "business_key": intent.business_key,
            "state": derived_state(session, intent.id),
            "event_type": intent.event_type,
            "category": intent.category,
            "region": intent.region,
            "channel_plan": intent.channel_plan,
            "template_key": intent.template_key,
            "template_version": intent.template_version,
            "template_pins": intent.template_pins,
            "workflow_id": intent.workflow_id,
            "send_at": iso_utc(intent.send_at),
            "expires_at": iso_utc(intent.expires_at),
            "created_at": iso_utc(intent.created_at),
            "cancelled_at": iso_utc(intent.cancelled_at),
            "pii_purged_at": iso_utc(intent.pii_purged_at),
            "legal_hold": intent.legal_hold,
            "created_by": intent.created_by,
            "awaiting": intent.awaiting,
            "awaiting_until": iso_utc(intent.awaiting_until) if intent.awaiting else None,
        },
        "decisions": [
            {
                "id": d.id,
                "channel": d.channel,
                "policy_version": d.policy_version,
                "outcome": d.outcome,
                "rule": d.rule,
                "reason": d.reason,
                "inputs": d.inputs,
                "next_eligible_at": iso_utc(d.next_eligible_at),
                "decided_at": iso_utc(d.decided_at),
            }
            for d in decisions
        ],
        "attempts": [
            {
                "channel": a.channel,
                "number": a.number,
                "token": a.token,
                "state": a.state,
                "remote_id": a.remote_id,
                "message_id": a.message_id,
                "decision_id": a.decision_id,
                "template_key": a.template_key,
                "template_version": a.template_version,
                "content_sha256": a.content_sha256,
                "segments": a.segments,
                "sender": a.sender,
                "sender_address": a.sender_address,
                "provider": a.provider or channels.get(a.channel).default_providers[0],
                "error_code": a.error_code,
                "prepared_at": iso_utc(a.prepared_at),
                "submitted_at": iso_utc(a.submitted_at),
                "terminal_at": iso_utc(a.terminal_at),
                "pii_readable": a.destination_ct is not None,
                "destination_masked": _masked_destination(cipher, a),
                "settled_rule": a.settled_rule,
                "settled_resend_allowed": a.settled_resend_allowed,
            }
            for a in attempts
        ],
        "observations": [
            {
                "attempt": attempt_ids.get(o.attempt_id or -1),
                "source": o.source,
                "raw_status": o.raw_status,
                "normalized_status": o.normalized_status,
                "provider_code": o.provider_code,
                "provider_at": iso_utc(o.provider_at),
                "observed_at": iso_utc(o.observed_at),
                "verdict": o.verdict,
                "applied": o.applied,
                "conflict": o.conflict,
            }
            for o in observations
        ],
        "operator_actions": [
            {
                "action": a.action,
                "operator": a.operator,
                "operator_role": a.operator_role,
                "reason": a.reason,
                "outcome": a.outcome,
                "detail": a.detail,
                "at": iso_utc(a.at),
            }
            for a in actions
        ],
        "review_items": [
            {
                "id": r.id,
                "kind": r.kind,
                "subject": r.subject,
                "found_at": iso_utc(r.found_at),
                "resolved_at": iso_utc(r.resolved_at),
                "resolved_by": r.resolved_by,
                "resolution_note": r.resolution_note,
            }
            for r in items
        ],
    }


def _when(value: str | None) -> datetime:
    return datetime.fromisoformat(value) if value else datetime.min.replace(tzinfo=UTC)


def rows(doc: dict[str, Any], time_text: Callable[[str], str] = str) -> list[dict[str, Any]]:
    """The timeline's events, oldest first.

    `at` (ISO 8601), `event` (decision, attempt,
    observed, operator), `channel` and `detail`, each row a fact that never changes, so a
    follower can print only the rows it has not printed yet. `time_text` writes a time
    that appears inside a detail.
    """
    events: list[tuple[datetime, int, dict[str, Any]]] = []

    def add(
        at: str | None, event: str, channel: str | None, detail: str, *, key: datetime | None = None
    ) -> None:
        # Ties go to the order of the kinds below: an operator's approval before the
        # decision it led to.
        order = ("operator", "decision", "attempt", "observed").index(event)
        events.append(
            (
                key or _when(at),
                order,
                {"at": at, "event": event, "channel": channel, "detail": detail},
            )
        )

    prepared = {a["token"]: a["prepared_at"] for a in doc["attempts"]}
    for d in doc["decisions"]:
        extra = (
            f" next-eligible {time_text(d['next_eligible_at'])}" if d["next_eligible_at"] else ""
        )
        add(
            d["decided_at"],
            "decision",
            d["channel"],
            f"{d['outcome']} rule={d['rule']} policy={d['policy_version']}{extra} - {d['reason']}",
        )
    for a in doc["attempts"]:
        add(
            a["prepared_at"],
            "attempt",
            a["channel"],
            f"#{a['number']} prepared token={a['token']} "
            + (f"provider={a['provider']} " if a.get("provider") else "")
            + f"template={a['template_key']}@v{a['template_version']} "
            f"sha256={a['content_sha256'][:12]}",
        )
    channel_of = {a["token"]: a["channel"] for a in doc["attempts"]}
    for o in doc["observations"]:
        flag = "" if o["applied"] else " (kept as evidence, not applied)"
        if o["conflict"]:
            flag = " (CONFLICT: flagged for review)"
        code = f" code={o['provider_code']}" if o["provider_code"] else ""
        add(
            o["observed_at"],
            "observed",
            channel_of.get(o["attempt"] or ""),
            f"{o['attempt']} {o['source']} {o['raw_status']} -> "
            f"{o['normalized_status'] or '-'}{code} [{o['verdict'] or '-'}]{flag}",
        )
    for a in doc["operator_actions"]:
        detail = a["detail"] or {}
        who = acting_operator(a)
        text = f"{a['action']} by {who}: {a['outcome']} - {a['reason']}"
        notes = " ".join(
            f"{k}={v}" for k, v in detail.items() if v not in (None, "") and k not in CLAIM_KEYS
        )
        add(
            a["at"],
            "operator",
            detail.get("channel"),
            f"{text} ({notes})" if notes else text,
            key=approval_time(a, doc, prepared),
        )
    events.sort(key=lambda e: (e[0], e[1]))
    return [row for _, _, row in events]


CLAIM_KEYS = ("claimed_operator", "claimed_role", "proof")
"""Detail keys of an action recorded without a proof of its principal (domain.proof)."""


def acting_operator(action: dict[str, Any]) -> str:
    """Who an operator action names, as the timelines show it.

    The principal (with its role), or, for a request that reached the workflow through
    Temporal without Herald's proof, an unauthenticated Temporal caller with the identity
    it claimed, shown as claimed, never as a principal.
    """
    detail = action.get("detail") or {}
    if action["operator"] == proof.UNAUTHENTICATED:
        claimed = detail.get("claimed_operator") or "nobody"
        return f"an unauthenticated Temporal caller (claimed {claimed!r})"
    role = action.get("operator_role")
    return action["operator"] + (f" ({role})" if role else "")


def approval_time(
    action: dict[str, Any], doc: dict[str, Any], prepared: dict[str, str | None]
) -> datetime:
    """When an accepted approve-resend takes its place in the timeline.

    The workflow records the approval and authorizes the new attempt at the same moment,
    in two activities that may run in either order, so the approval can be written a few
    milliseconds after the decision it led to. It is placed before the first decision on
    its channel after the attempt it followed, where it belongs.
    """
    at = _when(action["at"])
    detail = action["detail"] or {}
    if action["action"] != "approve-resend" or action["outcome"] != "accepted":
        return at
    before = prepared.get(str(detail.get("after", "")).rpartition("=")[0])
    if before is None:
        return at
    later = [
        _when(d["decided_at"])
        for d in doc["decisions"]
        if d["channel"] == detail.get("channel") and _when(d["decided_at"]) > _when(before)
    ]
    return min([at, *later])


def summary(doc: dict[str, Any]) -> list[str]:
    """One line per attempt: where it ended."""
    return [
        f"=> {a['channel']} #{a['number']}: {a['state']}"
        + (f" (remote {a['remote_id']})" if a["remote_id"] else "")
        + (f" (message-id {a['message_id']})" if a["message_id"] else "")
        for a in doc["attempts"]
    ]
