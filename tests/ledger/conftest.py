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


def make_attempt(  # type: ignore[no-untyped-def]
    session,
    cipher,
    intent_id: str,
    business_key: str,
    *,
    channel: str = "sms",
    number: int = 1,
    destination: str = PHONE,
    body: str = "Your seat opened",
    subject: str | None = None,
    outcome: str = "allow",
    rule: str = "test",
    purge_after: datetime | None = None,
):
    """A policy decision plus a prepared attempt, encrypted the way the ledger activity does."""
    import hashlib

    from domain import keys
    from ledger import repository as repo
    from ledger.models import Attempt

    decision = repo.record_decision(
        session,
        intent_id=intent_id,
        channel=channel,
        policy_version=repo.active_policy(session).version,
        outcome=outcome,
        rule=rule,
        reason="test",
        inputs={"channel": channel},
        next_eligible_at=None,
        decided_at=datetime.now(UTC),
    )
    token = keys.attempt_token(business_key, channel, number)
    attempt_id = repo.prepare_attempt_id(
        session,
        intent_id=intent_id,
        channel=channel,
        number=number,
        token=token,
        decision_id=decision,
        destination_ct=cipher.encrypt(destination, context=token),
        destination_hmac=cipher.lookup_hmac(destination),
        body_ct=cipher.encrypt(body, context=token),
        subject_ct=cipher.encrypt(subject, context=token) if subject else None,
        content_sha256=hashlib.sha256(body.encode()).hexdigest(),
        template_key="demo",
        template_version=1,
        purge_after=purge_after,
    )
    attempt = session.get(Attempt, attempt_id)
    assert attempt is not None
    return attempt
