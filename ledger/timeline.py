"""The auditor's view of one intent, read from the ledger alone (no Temporal needed)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from domain.destinations import masked
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.listing import derive_states
from ledger.models import Attempt, Observation, OperatorAction, PolicyDecision


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value else None


def derived_state(session: Session, intent_id: str, *, now: datetime | None = None) -> str:
    intent = session.get(repo.Intent, intent_id)
    assert intent is not None
    return derive_states(session, [intent], now or datetime.now(UTC))[intent_id]


def _masked_destination(cipher: FieldCipher | None, attempt: Attempt) -> str | None:
    if cipher is None or attempt.destination_ct is None:
        return None  # no key at hand, or the readable copy was purged
    return masked(cipher.decrypt(attempt.destination_ct, context=attempt.token))


def timeline(
    session: Session, id_or_key: str, *, cipher: FieldCipher | None = None
) -> dict[str, Any]:
    """Everything the ledger knows about an intent, without any PII. With `cipher`, each
    attempt carries its destination masked (`+44********42`), never readable."""
    intent = repo.get_intent(session, id_or_key)
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
            "workflow_id": intent.workflow_id,
            "send_at": _iso(intent.send_at),
            "expires_at": _iso(intent.expires_at),
            "created_at": _iso(intent.created_at),
            "cancelled_at": _iso(intent.cancelled_at),
            "pii_purged_at": _iso(intent.pii_purged_at),
            "legal_hold": intent.legal_hold,
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
                "next_eligible_at": _iso(d.next_eligible_at),
                "decided_at": _iso(d.decided_at),
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
                "error_code": a.error_code,
                "prepared_at": _iso(a.prepared_at),
                "submitted_at": _iso(a.submitted_at),
                "terminal_at": _iso(a.terminal_at),
                "pii_readable": a.destination_ct is not None,
                "destination_masked": _masked_destination(cipher, a),
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
                "provider_at": _iso(o.provider_at),
                "observed_at": _iso(o.observed_at),
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
                "at": _iso(a.at),
            }
            for a in actions
        ],
    }


def render(doc: dict[str, Any]) -> str:
    """A readable timeline for `herald show`."""
    i = doc["intent"]
    lines = [
        f"intent {i['business_key']}  ({i['id']})",
        f"  state {i['state']}  category {i['category']}  region {i['region']}  "
        f"plan {i['channel_plan']['mode']}:{','.join(i['channel_plan']['channels'])}",
        f"  created {i['created_at']}"
        + (f"  send-at {i['send_at']}" if i["send_at"] else "")
        + (f"  cancelled {i['cancelled_at']}" if i["cancelled_at"] else ""),
    ]
    events: list[tuple[str, str]] = []
    for d in doc["decisions"]:
        extra = f" next-eligible {d['next_eligible_at']}" if d["next_eligible_at"] else ""
        events.append(
            (
                d["decided_at"],
                f"decision  {d['channel']:<5} {d['outcome']:<6} "
                f"rule={d['rule']} policy={d['policy_version']}{extra} - {d['reason']}",
            )
        )
    for a in doc["attempts"]:
        events.append(
            (
                a["prepared_at"],
                f"attempt   {a['channel']:<5} #{a['number']} prepared "
                f"token={a['token']} template={a['template_key']}@v{a['template_version']} "
                f"sha256={a['content_sha256'][:12]}",
            )
        )
    for o in doc["observations"]:
        flag = "" if o["applied"] else "  (kept as evidence, not applied)"
        if o["conflict"]:
            flag = "  (CONFLICT: flagged for review)"
        code = f" code={o['provider_code']}" if o["provider_code"] else ""
        events.append(
            (
                o["observed_at"],
                f"observed  {o['attempt']}  {o['source']:<9} "
                f"{o['raw_status']} -> {o['normalized_status']}{code} "
                f"[{o['verdict']}]{flag}",
            )
        )
    for a in doc["operator_actions"]:
        events.append(
            (
                a["at"],
                f"operator  {a['action']} by {a['operator']}"
                + (f" ({a['operator_role']})" if a.get("operator_role") else "")
                + f": {a['outcome']} - {a['reason']} {a['detail'] or ''}".rstrip(),
            )
        )
    for at, text in sorted(events, key=lambda e: e[0] or ""):
        lines.append(f"  {at}  {text}")
    for a in doc["attempts"]:
        lines.append(
            f"  => {a['channel']} #{a['number']}: {a['state']}"
            + (f" (remote {a['remote_id']})" if a["remote_id"] else "")
            + (f" (message-id {a['message_id']})" if a["message_id"] else "")
        )
    return "\n".join(lines)
