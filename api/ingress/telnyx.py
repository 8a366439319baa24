"""Telnyx's signed message events: receipts (`message.sent`, `message.finalized`) and
inbound SMS (`message.received`), on one route, `POST /v1/webhooks/telnyx`.

The same discipline as Twilio's webhooks (`api.app`): the Ed25519 signature over
``f"{telnyx-timestamp}|{raw body}"`` is checked against the raw bytes before anything is
parsed; receipts are deduplicated on the event's `data.id` and recorded through the one
transition function; a settling receipt wakes the workflow; STOP and START suppress and
lift SMS for the destination on every provider.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response
from sqlalchemy.orm import Session

from api.deps import IngressDep
from api.ingress.receiving import (
    TOKEN_MAX_LENGTH,
    malformed,
    record_keyword,
    require_media_type,
    wake_workflow,
)
from api.ingress.telnyx_signature import TOLERANCE_SECONDS, TelnyxVerifier
from api.schemas import NO_CONTROL, Problem
from domain.clocks import parse_iso_utc
from domain.states import TELNYX_STATUSES, normalize_telnyx_status
from ledger import observations
from ledger import repository as repo
from ledger.errors import NotFound
from ledger.observations import ObservationFacts

log = logging.getLogger("herald.api")

RECEIPT_EVENTS = frozenset({"message.sent", "message.finalized"})
INBOUND_EVENT = "message.received"
SIGNATURE_HEADER = "telnyx-signature-ed25519"
TIMESTAMP_HEADER = "telnyx-timestamp"


PROBLEMS: dict[int | str, dict[str, Any]] = {
    400: {"model": Problem, "description": "Not a JSON event Herald can read; `detail` says why."},
    403: {
        "model": Problem,
        "description": "Missing, stale or wrong telnyx-signature-ed25519 / telnyx-timestamp, "
        "or no Telnyx public key configured.",
    },
}
OPENAPI: dict[str, Any] = {
    "parameters": [
        {
            "name": SIGNATURE_HEADER,
            "in": "header",
            "required": True,
            "description": "Ed25519 signature (base64) over `telnyx-timestamp|raw body`.",
            "schema": {"type": "string", "minLength": 1},
        },
        {
            "name": TIMESTAMP_HEADER,
            "in": "header",
            "required": True,
            "description": "Unix seconds; refused when more than 300 s from the server's clock.",
            # Checked by the signature code (digits, within 300 s), not by pydantic.
            "schema": {"type": "string", "minLength": 1},
        },
    ],
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["data"],
                    "properties": {
                        "data": {
                            "type": "object",
                            "required": ["event_type", "id", "payload"],
                            "properties": {
                                "event_type": {"type": "string"},
                                "id": {"type": "string"},
                                "occurred_at": {"type": "string"},
                                "payload": {"type": "object"},
                            },
                        }
                    },
                }
            }
        },
    },
}


def _event(body: bytes) -> tuple[str, str, dict[str, Any]]:
    """(event_type, event id, payload) of a verified body; ValueError if it is not one."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError("body is not JSON") from err
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, dict):
        raise ValueError("'data' must be an object")
    event_type, event_id, payload = data.get("event_type"), data.get("id"), data.get("payload")
    if not isinstance(event_type, str) or not isinstance(event_id, str) or not event_id:
        raise ValueError("'data.event_type' and 'data.id' must be strings")
    if not 0 < len(event_id) <= 120 or "\x00" in event_id:
        raise ValueError("'data.id' is not an event id")
    if not isinstance(payload, dict):
        raise ValueError("'data.payload' must be an object")
    return event_type, event_id, payload


def _status_of(payload: dict[str, Any]) -> tuple[str, str, str | None]:
    """(message id, raw status, error code) of a message event's payload."""
    remote_id = payload.get("id")
    to = payload.get("to")
    raw = to[0].get("status") if isinstance(to, list) and to and isinstance(to[0], dict) else None
    if not isinstance(remote_id, str) or not 0 < len(remote_id) <= 80 or "\x00" in remote_id:
        raise ValueError("'payload.id' is not a message id")
    if not isinstance(raw, str) or raw.strip().lower() not in TELNYX_STATUSES:
        raise ValueError("'payload.to[0].status' is not a Telnyx status")
    code = None
    errors = payload.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        value = errors[0].get("code")
        code = str(value)[:20] if value not in (None, "") else None
    return remote_id, raw.strip().lower(), code


def _token_for(session: Session, token: str | None, remote_id: str) -> str | None:
    """The `token` query parameter, if it may be trusted. Telnyx signs the body, not the
    URL: a token is used only for an attempt that has no remote id yet (its send answer
    was lost) or whose remote id is this message's; otherwise the message id decides."""
    if token is None:
        return None
    try:
        attempt = repo.attempt_by_token(session, token)
    except NotFound:
        return None
    return token if attempt.remote_id in (None, remote_id) else None


router = APIRouter(tags=["provider-webhooks"])
"""Telnyx's message events, signed by Telnyx."""


@router.post(
    "/v1/webhooks/telnyx",
    status_code=204,
    response_class=Response,
    responses=PROBLEMS,
    summary="A Telnyx message event (Ed25519-signed): receipts and inbound SMS",
    openapi_extra=OPENAPI,
)
async def receive_telnyx_event(
    request: Request,
    ingress: IngressDep,
    token: Annotated[
        str | None,
        Query(
            max_length=TOKEN_MAX_LENGTH,
            pattern=NO_CONTROL,
            description="The attempt token we sent (a hint: unsigned).",
        ),
    ] = None,
) -> Response:
    """Verified before parsing, deduplicated on `data.id`, recorded through the one
    transition (`message.sent`, `message.finalized`), or read for STOP/START
    (`message.received`). Other event types are acknowledged and ignored."""
    require_media_type(request, ingress, "application/json")
    body = await request.body()
    verifier = ingress.telnyx_verifier
    signature = request.headers.get(SIGNATURE_HEADER)
    timestamp = request.headers.get(TIMESTAMP_HEADER)
    if verifier is None or not signature or not timestamp:
        ingress.counters.rejected.labels("signature").inc()
        missing = "no Telnyx public key is configured" if verifier is None else None
        raise HTTPException(403, missing or f"missing {SIGNATURE_HEADER} or {TIMESTAMP_HEADER}")
    refusal = verifier.verify(body, signature, timestamp, now=time.time())
    if refusal is not None:
        ingress.counters.rejected.labels("signature").inc()
        raise HTTPException(403, refusal)
    if token is not None and "\x00" in token:
        raise malformed(ingress, "token contains a NUL character")
    try:
        event_type, event_id, payload = _event(body)
    except ValueError as err:
        raise malformed(ingress, str(err)) from err

    if event_type == INBOUND_EVENT:
        sender = payload.get("from")
        number = sender.get("phone_number") if isinstance(sender, dict) else None
        text = payload.get("text")
        if not isinstance(number, str) or not isinstance(text, str) or "\x00" in text:
            raise malformed(ingress, "'payload.from.phone_number' and 'payload.text' needed")
        # Kept once by the event id (a redelivery repeats it), ordered by Telnyx's time.
        stamp = payload.get("received_at")
        at = parse_iso_utc(stamp) if isinstance(stamp, str) else None
        await record_keyword(
            ingress, number, text, provider="telnyx", provider_id=event_id, provider_at=at
        )
        return Response(status_code=204)
    if event_type not in RECEIPT_EVENTS:
        return Response(status_code=204)

    try:
        remote_id, raw, code = _status_of(payload)
    except ValueError as err:
        raise malformed(ingress, str(err)) from err
    facts = ObservationFacts(
        source="webhook",
        raw_status=raw,
        normalized=normalize_telnyx_status(raw),
        observed_at=datetime.now(UTC),
        # Telnyx repeats the event id on every redelivery of one event.
        dedupe_key=f"telnyx:{event_id}",
        provider_code=code,
        remote_id=remote_id,
        detail={"provider": "telnyx", "event_type": event_type},
    )

    def work(session: Session) -> observations.ObservationResult:
        trusted = _token_for(session, token, remote_id)
        return observations.record_observation(
            session, facts, token=trusted, through=ingress.through["telnyx"]
        )

    result = await ingress.tx(work)
    ingress.counters.receipts.labels(result.verdict).inc()
    if result.verdict == "duplicate":
        ingress.counters.duplicates.labels("webhook_redelivery").inc()
    await wake_workflow(ingress, result, code)
    return Response(status_code=204)


__all__ = ["TOLERANCE_SECONDS", "TelnyxVerifier", "router"]
