"""Intents recorded in the real ledger, as an app's `record` would, for the activity tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from activities.contracts import AuthorizeInput
from activities.ledger import LedgerActivities
from domain.requests import NotificationRequest
from ledger import intake
from ledger import repository as repo
from ledger.models import Consent


def demo_request(
    key: str, phone: str, *, recipient_ref: str | None = None, **fields: Any
) -> NotificationRequest:
    """An SMS intent on the packaged `demo` template (recipient: the key unless given)."""
    return NotificationRequest(
        business_key=key,
        recipient_ref=recipient_ref or key,
        phone=phone,
        template_key="demo",
        variables={"n": 1, "intent_id": key},
        **fields,
    )


def record(committed, cipher, request: NotificationRequest, *, consent: str | None = None) -> str:  # type: ignore[no-untyped-def]
    """Record the intent (and a `service` consent for channel `consent`); its id."""
    now = datetime.now(UTC)
    with committed.begin() as session:
        recorded = repo.record_intent(
            session,
            intake.validate(session, request, cipher, now=now, retention_days=30),
        )
        if consent is not None:
            session.add(
                Consent(
                    recipient_ref=request.recipient_ref,
                    channel=consent,
                    purpose="service",
                    source="test",
                    granted_at=now,
                )
            )
    return recorded.intent_id


async def prepared(  # type: ignore[no-untyped-def]
    committed,
    cipher,
    request: NotificationRequest,
    channel: str,
    ledger: LedgerActivities | None = None,
) -> str:
    """Record the intent with consent for `channel`, authorize it (through `ledger`, a
    plain one by default); the attempt's token."""
    intent_id = record(committed, cipher, request, consent=channel)
    result = await (ledger or LedgerActivities(committed, cipher)).authorize(
        AuthorizeInput(intent_id, channel, 1)
    )
    assert result.outcome == "allow", result
    assert result.attempt_token is not None
    return result.attempt_token
