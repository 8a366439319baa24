"""The email provider's Event Webhook: `POST /v1/receipts/email/sendgrid`.

Order of work, each step before the next: the signature (ECDSA over the timestamp header
and the raw body, with the configured public key) and the timestamp's tolerance, then the
parse, then one transaction per event. Nothing is stored for an unsigned, tampered or
stale delivery. Each event is deduplicated on its `sg_event_id` (the observation's dedupe
key), so a batch delivered twice, or replayed, stores each event once and has each effect
(a state, a suppression) once.

**The tolerance.** SendGrid retries a batch the receiver did not answer 2xx "at increasing
intervals for up to 24 hours after the event occurs" and does not document that a retry is
signed anew with a fresh timestamp. A five-minute window would drop every retry after an
ingress outage longer than five minutes, and lose bounces and complaints for good. The
window is therefore 26 hours into the past (`HERALD_SENDGRID_EVENT_TOLERANCE_SECONDS`) and
five minutes into the future (clock skew). A replay inside that window is harmless:
deduplication by event id makes it change nothing.

Contact data: events carry the address. It is used only to compute the ledger's HMAC when
an event cannot be tied to an attempt (its token missing), and is never stored, logged or
put in a metric label.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from fastapi import APIRouter, HTTPException, Request, Response
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from activities.contracts import ReceiptSignal
from api.deps import EventsConfig, Ingress, IngressDep
from api.ingress.receiving import malformed, require_media_type
from api.schemas import Problem
from domain import channels, email_events
from domain.destinations import InvalidDestination, normalize_email
from domain.email_events import (
    ADDRESS,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    TOKEN_ARG,
    SuppressionEffect,
    without_addresses,
)
from domain.policy import fallback_for, load_policy
from domain.requests import Category
from domain.states import AttemptState, is_terminal
from ledger import evidence, observations
from ledger import repository as repo
from ledger.models import Attempt, Intent, Observation, Suppression
from ledger.observations import ObservationFacts, ObservationResult

log = logging.getLogger("herald.api")

EVENTS_PATH = "/v1/receipts/email/sendgrid"
MAX_BATCH_BYTES = 1024 * 1024
"""SendGrid posts a batch when it reaches 768 KB (or every 30 s); bodies up to 1 MB."""
FUTURE_SKEW_SECONDS = 300
SIGNAL_TIMEOUT_SECONDS = 5.0
_EVENT_ID = re.compile(r"^[A-Za-z0-9_=.:-]{1,100}$")
_TOKEN = re.compile(r"^[^\x00]{1,240}$")


PROBLEMS: dict[int | str, dict[str, Any]] = {
    400: {"model": Problem, "description": "Not a JSON array of event objects."},
    403: {
        "model": Problem,
        "description": "Missing or wrong signature, or a timestamp outside the tolerance.",
    },
    413: {"model": Problem, "description": f"Body larger than {MAX_BATCH_BYTES} bytes."},
    404: {"model": Problem, "description": "Email events are not configured (no public key)."},
}
OPENAPI = {
    "parameters": [
        {
            "name": SIGNATURE_HEADER,
            "in": "header",
            "required": True,
            "description": "Base64 DER ECDSA P-256 signature over the timestamp and the body.",
            "schema": {"type": "string", "minLength": 1},
        },
        {
            "name": TIMESTAMP_HEADER,
            "in": "header",
            "required": True,
            "description": "Unix seconds (digits), as signed; anything else is 403.",
            "schema": {"type": "string", "minLength": 1},
        },
    ],
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "event": {"type": "string"},
                            "sg_event_id": {"type": "string"},
                            "sg_message_id": {"type": "string"},
                            "timestamp": {"type": "integer"},
                            TOKEN_ARG: {"type": "string"},
                        },
                        "required": ["event"],
                    },
                }
            }
        },
    },
}


# --- the signature (the simulator signs with transports.sendgrid.sign_event_batch) ------


def load_event_public_key(value: str) -> ec.EllipticCurvePublicKey:
    """The verification key as SendGrid's settings page shows it (base64 DER), or PEM.

    Raises:
        ValueError: not an EC public key.
    """
    text = value.strip()
    try:
        if text.startswith("-----BEGIN"):
            key = serialization.load_pem_public_key(text.encode())
        else:
            key = serialization.load_der_public_key(base64.b64decode(text, validate=True))
    except (ValueError, binascii.Error) as exc:
        raise ValueError("not a base64 DER or PEM public key") from exc
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ValueError("the event webhook key must be an elliptic-curve (P-256) key")
    return key


def verify_event_batch(
    public_key: ec.EllipticCurvePublicKey, *, signature: str, timestamp: str, body: bytes
) -> bool:
    """Whether ``signature`` signs ``timestamp`` + ``body`` (the raw bytes, before any
    parse). A malformed signature is False, never an exception."""
    try:
        raw = base64.b64decode(signature.strip(), validate=True)
        stamp = timestamp.encode("ascii")
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return False
    try:
        public_key.verify(raw, stamp + body, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError):
        return False
    return True


def verified_body(request_headers: Any, body: bytes, config: EventsConfig, now: datetime) -> str:
    """Check the signature and the timestamp; return the problem, or "" when verified."""
    signature = request_headers.get(SIGNATURE_HEADER)
    timestamp = request_headers.get(TIMESTAMP_HEADER)
    if not signature or not timestamp:
        return f"missing {SIGNATURE_HEADER} or {TIMESTAMP_HEADER}"
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        return "the timestamp is not unix seconds"
    if not verify_event_batch(
        config.public_key, signature=signature, timestamp=timestamp, body=body
    ):
        return "signature does not match"
    age = now.timestamp() - int(timestamp)
    if age > config.tolerance_seconds or age < -FUTURE_SKEW_SECONDS:
        return "the signed timestamp is outside the tolerance"
    return ""


@dataclass(frozen=True)
class _Recorded:
    result: ObservationResult
    code: str | None


def _text(value: Any, limit: int) -> str:
    return str(value)[:limit] if isinstance(value, str | int | float) else ""


def _event_facts(event: dict[str, Any], now: datetime) -> tuple[ObservationFacts, str | None]:
    """The observation of one event (no contact data in it), and the token it names."""
    word = _text(event.get("event"), 40).strip().lower()
    bounce_type = _text(event.get("type"), 20) or None
    try:
        meaning = email_events.meaning(word, bounce_type=bounce_type)
        raw = meaning.source if meaning.effect == SuppressionEffect.COUNT_BLOCK else word
        normalized = meaning.state
    except ValueError:
        raw, normalized = word or "unknown", None  # kept as ignored evidence
    event_id = _text(event.get("sg_event_id"), 100)
    if not _EVENT_ID.match(event_id):
        # No usable id: the event's own bytes identify it (a redelivery repeats them).
        canonical = json.dumps(event, sort_keys=True, ensure_ascii=False)
        event_id = "sha256-" + hashlib.sha256(canonical.encode()).hexdigest()
    token = _text(event.get(TOKEN_ARG), 240) or None
    if token is not None and not _TOKEN.match(token):
        token = None
    message_id = _text(event.get("sg_message_id"), 200).partition(".")[0] or None
    stamp = event.get("timestamp")
    provider_at = (
        datetime.fromtimestamp(stamp, UTC)
        if isinstance(stamp, int) and 0 < stamp < 10**11
        else None
    )
    detail = {
        "sg_event_id": event_id,
        **{
            name: without_addresses(_text(event.get(name), 200))
            for name in ("type", "reason", "status", "response", "attempt")
            if event.get(name) is not None
        },
    }
    # The attempt's error code is Herald's word for the ending (permanent: no resend is
    # offered); the receiving server's enhanced status code stays in the detail.
    status = email_events.ERROR_CODES.get(raw) if normalized is not None else None
    return (
        ObservationFacts(
            source="webhook",
            raw_status=raw[:40],
            normalized=normalized,
            observed_at=now,
            dedupe_key=f"sendgrid:{event_id}",
            provider_code=status,
            provider_at=provider_at,
            remote_id=(message_id or "")[:80] or None,
            detail=detail,
            evidence_after_delivered=True,
        ),
        token,
    )


CATEGORIES = frozenset(c.value for c in Category)


def _category_of(session: Session, token: str | None, event: dict[str, Any]) -> str | None:
    """The message's category: its intent's, else the first category the event echoes."""
    if token is not None:
        found = session.execute(
            select(Intent.category)
            .join(Attempt, Attempt.intent_id == Intent.id)
            .where(Attempt.token == token)
        ).scalar_one_or_none()
        if found:
            return found
    echoed = event.get("category")
    if isinstance(echoed, list) and echoed:
        echoed = echoed[0]
    # Only one of Herald's own categories places it; anything else (a category some other
    # sender set, an object) is a message Herald cannot place: None, the whole channel.
    text = _text(echoed, 20)
    return text if text in CATEGORIES else None


def _destination_hmac(
    session: Session, ingress: Ingress, token: str | None, event: dict[str, Any]
) -> str | None:
    if token is not None:
        found = session.execute(
            select(Attempt.destination_hmac).where(Attempt.token == token)
        ).scalar_one_or_none()
        if found:
            return found
    try:
        address = normalize_email(_text(event.get(ADDRESS), 320)).address
    except InvalidDestination:
        return None
    return ingress.client.lookup_hmac(address)


def _blocks_in_window(session: Session, destination_hmac: str, since: datetime) -> int:
    return session.execute(
        select(func.count())
        .select_from(Observation)
        .join(Attempt, Attempt.id == Observation.attempt_id)
        .where(
            Attempt.destination_hmac == destination_hmac,
            Observation.raw_status == "blocked",
            Observation.observed_at >= since,
        )
    ).scalar_one()


def _effect(
    session: Session,
    ingress: Ingress,
    event: dict[str, Any],
    facts: ObservationFacts,
    token: str | None,
    now: datetime,
) -> None:
    """The event's suppression effect, once (the caller runs it only for a new event)."""
    word = _text(event.get("event"), 40).strip().lower()
    try:
        meaning = email_events.meaning(word, bounce_type=_text(event.get("type"), 20) or None)
    except ValueError:
        return
    if meaning.effect == SuppressionEffect.NONE:
        return
    lookup = _destination_hmac(session, ingress, token, event)
    if lookup is None:
        return
    proof = {
        "sg_event_id": facts.detail.get("sg_event_id"),
        "event": word,
        **({"attempt_token": token} if token else {}),
        **({"reason": facts.detail["reason"]} if facts.detail.get("reason") else {}),
    }
    if meaning.effect in (SuppressionEffect.SUPPRESS_CHANNEL, SuppressionEffect.SUPPRESS_CATEGORY):
        evidence.suppress(
            session,
            destination_hmac=lookup,
            channel=channels.EMAIL.name,
            reason=meaning.reason,
            source=meaning.source,
            at=now,
            # The channel: every category (None); else the message's own category.
            category=(
                _category_of(session, token, event)
                if meaning.effect == SuppressionEffect.SUPPRESS_CATEGORY
                else None
            ),
            evidence=proof,
        )
    elif meaning.effect == SuppressionEffect.LIFT_CATEGORY:
        category = _category_of(session, token, event)
        session.execute(
            update(Suppression)
            .where(
                Suppression.destination_hmac == lookup,
                Suppression.channel == channels.EMAIL.name,
                Suppression.reason == meaning.reason,
                Suppression.category.is_(None)
                if category is None
                else Suppression.category == category,
                Suppression.lifted_at.is_(None),
            )
            .values(lifted_at=now, lifted_source=meaning.source)
        )
    elif meaning.effect == SuppressionEffect.COUNT_BLOCK and token is not None:
        found = session.execute(
            select(Intent.region, Intent.category)
            .join(Attempt, Attempt.intent_id == Intent.id)
            .where(Attempt.token == token)
        ).one_or_none()
        if found is None:
            return
        rule = fallback_for(
            load_policy(repo.active_policy(session).document), found.region, found.category
        )
        since = now - timedelta(seconds=rule.email_blocks_window_seconds)
        if email_events.blocks_suppress(
            _blocks_in_window(session, lookup, since), rule.email_blocks_to_suppress
        ):
            evidence.suppress(
                session,
                destination_hmac=lookup,
                channel=channels.EMAIL.name,
                reason="repeated_blocks",
                source="blocked",
                at=now,
                evidence={**proof, "blocks": str(rule.email_blocks_to_suppress)},
            )


def record_event(
    session: Session, *, ingress: Ingress, event: dict[str, Any], now: datetime
) -> _Recorded:
    """One event in one transaction: the observation (deduplicated), then its effect."""
    facts, token = _event_facts(event, now)
    through = ingress.through["sendgrid"]
    result = observations.record_observation(session, facts, token=token, through=through)
    if result.verdict != "duplicate":
        # The attempt it moved, if any: a token naming another channel's attempt places
        # nothing (its category and destination are not this message's).
        _effect(session, ingress, event, facts, result.token, now)
    return _Recorded(result, facts.provider_code)


router = APIRouter(tags=["provider-webhooks"])


@router.post(
    EVENTS_PATH,
    status_code=204,
    response_class=Response,
    responses=PROBLEMS,
    summary="A batch of email events (SendGrid Event Webhook, signed)",
    openapi_extra=OPENAPI,
)
async def receive_sendgrid_events(request: Request, ingress: IngressDep) -> Response:
    """Verified before any parse, each event deduplicated on `sg_event_id`, recorded
    through the one transition; bounces and complaints suppress; settling events wake
    the intent's workflow."""
    config = ingress.email_events
    if config.public_key is None:
        # As if the route were absent; the provider retries, nothing is lost yet.
        raise HTTPException(
            404, "email events are not configured (HERALD_SENDGRID_EVENT_PUBLIC_KEY)"
        )
    require_media_type(request, ingress, "application/json")
    body = await request.body()
    now = datetime.now(UTC)
    problem = verified_body(request.headers, body, config, now)
    if problem:
        ingress.counters.rejected.labels("signature").inc()
        raise HTTPException(403, problem)
    try:
        events = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise malformed(ingress, "body is not JSON") from err
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise malformed(ingress, "body must be a JSON array of event objects")
    settled: list[_Recorded] = []
    for event in events:
        recorded = await ingress.tx(partial(record_event, ingress=ingress, event=event, now=now))
        result = recorded.result
        ingress.counters.receipts.labels(result.verdict).inc()
        if result.verdict == "duplicate":
            ingress.counters.duplicates.labels("webhook_redelivery").inc()
        if (
            result.changed
            and result.workflow_id
            and result.token
            and result.state
            and is_terminal(AttemptState(result.state))
        ):
            settled.append(recorded)
    for recorded in settled:
        await _signal(ingress, recorded)
    return Response(status_code=204)


async def _signal(ingress: Ingress, recorded: _Recorded) -> None:
    result = recorded.result
    assert result.workflow_id and result.token and result.state
    try:
        handle = ingress.client.temporal.get_workflow_handle(result.workflow_id)
        await asyncio.wait_for(
            handle.signal("receipt", ReceiptSignal(result.token, result.state, recorded.code)),
            SIGNAL_TIMEOUT_SECONDS,
        )
    except Exception as err:  # noqa: BLE001 - the ledger has it; the horizon will read it
        log.info("email event recorded but the workflow was not signalled: %s", type(err).__name__)
