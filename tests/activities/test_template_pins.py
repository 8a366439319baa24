"""An intent renders every attempt with the template versions pinned at intake: a rollback
between its first attempt and its fallback or resend changes nothing for it, and only
intents recorded after the rollback use the earlier version."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy import select, update

from activities.contracts import AuthorizeInput
from activities.ledger import LedgerActivities
from domain.requests import NotificationRequest
from domain.templates import TemplateVersion
from ledger.models import Attempt, Consent, Intent
from ledger.templates import activate_template, seed_templates
from tests.activities import intents


def _catalog(key: str) -> list[TemplateVersion]:
    """Two versions of each channel of a template of the test's own (the packaged ones
    are shared by every test of the session)."""
    return [
        TemplateVersion(key, version, "sms", "en", f"v{version}: order {{{{ order_id }}}}")
        for version in (1, 2)
    ] + [
        TemplateVersion(
            key, version, "email", "en", f"v{version}: order {{{{ order_id }}}}", "Order"
        )
        for version in (1, 2)
    ]


def _record(committed, cipher, key: str) -> str:  # type: ignore[no-untyped-def]
    business_key = f"pin-test:{uuid.uuid4().hex[:8]}"
    request = NotificationRequest(
        business_key=business_key,
        recipient_ref=business_key,
        phone="+447400000131",
        email="pinned@example.test",
        template_key=key,
        variables={"order_id": "o-7"},
    )
    intent_id = intents.record(committed, cipher, request)
    with committed.begin() as session:
        for channel in ("sms", "email"):
            session.add(
                Consent(
                    recipient_ref=business_key,
                    channel=channel,
                    purpose="service",
                    source="test",
                    granted_at=datetime.now(UTC),
                )
            )
    return intent_id


async def _version_sent(committed, cipher, intent_id: str, channel: str, number: int) -> int:  # type: ignore[no-untyped-def]
    result = await LedgerActivities(committed, cipher).authorize(
        AuthorizeInput(intent_id, channel, number)
    )
    assert result.outcome == "allow", result
    with committed.begin() as session:
        return session.execute(
            select(Attempt.template_version).where(Attempt.token == result.attempt_token)
        ).scalar_one()


async def test_a_fallback_and_a_resend_after_a_rollback_render_the_version_pinned_at_intake(
    committed, cipher
) -> None:
    key = f"pinned-{uuid.uuid4().hex[:8]}"
    with committed.begin() as session:
        seed_templates(session, _catalog(key))  # v2 of each channel starts active
    first = _record(committed, cipher, key)
    assert await _version_sent(committed, cipher, first, "sms", 1) == 2

    with committed.begin() as session:
        activate_template(session, key, 1)  # the rollback, between the attempts

    assert await _version_sent(committed, cipher, first, "email", 1) == 2  # the fallback
    assert await _version_sent(committed, cipher, first, "sms", 2) == 2  # a resend
    later = _record(committed, cipher, key)
    assert await _version_sent(committed, cipher, later, "sms", 1) == 1
    with committed.begin() as session:
        pins = session.get(Intent, first).template_pins  # type: ignore[union-attr]
    assert pins == {"sms": {"locale": "en", "version": 2}, "email": {"locale": "en", "version": 2}}


async def test_an_intent_recorded_before_pins_renders_the_version_active_at_each_attempt(
    committed, cipher
) -> None:
    key = f"unpinned-{uuid.uuid4().hex[:8]}"
    with committed.begin() as session:
        seed_templates(session, _catalog(key))
    before = _record(committed, cipher, key)
    with committed.begin() as session:
        session.execute(update(Intent).where(Intent.id == before).values(template_pins=None))
    assert await _version_sent(committed, cipher, before, "sms", 1) == 2
    with committed.begin() as session:
        activate_template(session, key, 1)
    assert await _version_sent(committed, cipher, before, "email", 1) == 1


def test_the_same_request_repeated_after_an_activation_is_the_same_intent_with_its_pins(
    committed, cipher
) -> None:
    from ledger import intake
    from ledger import repository as repo

    key = f"repeated-{uuid.uuid4().hex[:8]}"
    with committed.begin() as session:
        seed_templates(session, _catalog(key))
    request = NotificationRequest(
        business_key=f"pin-test:{uuid.uuid4().hex[:8]}",
        recipient_ref="m-1",
        phone="+447400000131",
        template_key=key,
        variables={"order_id": "o-7"},
    )
    first = intents.record(committed, cipher, request)
    with committed.begin() as session:
        activate_template(session, key, 1)
        again = repo.record_intent(
            session,
            intake.validate(session, request, cipher, now=datetime.now(UTC), retention_days=30),
        )
        assert (again.intent_id, again.created) == (first, False)
        pins = session.get(Intent, first).template_pins  # type: ignore[union-attr]
    assert pins == {"sms": {"locale": "en", "version": 2}}
