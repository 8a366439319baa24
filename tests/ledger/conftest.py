from __future__ import annotations

from datetime import UTC, datetime

import pytest

from domain.requests import NotificationRequest
from ledger import intake
from ledger.repository import IntentFields

pytestmark = pytest.mark.ledger

PHONE = "+447400000100"
EMAIL = "traveller@example.org"


def request(key: str, **overrides) -> NotificationRequest:  # type: ignore[no-untyped-def]
    values = dict(
        business_key=key,
        recipient_ref="m-1842",
        template_key="demo",
        phone=PHONE,
        variables={"n": 1, "intent_id": key},
    )
    values.update(overrides)
    return NotificationRequest(**values)  # type: ignore[arg-type]


def fields(session, cipher, key: str, **overrides) -> IntentFields:  # type: ignore[no-untyped-def]
    return intake.validate(
        session, request(key, **overrides), cipher, now=datetime.now(UTC), retention_days=30
    )
