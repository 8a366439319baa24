"""Consent revokes and suppressions, as the authorize activity reads them from the ledger."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import select

from activities.contracts import AuthorizeInput
from activities.ledger import LedgerActivities
from domain.requests import NotificationRequest
from ledger import evidence, intake
from ledger import repository as repo
from ledger.errors import NotFound
from ledger.models import Consent, PolicyDecision
from tests.conftest import key_id

pytestmark = pytest.mark.ledger


def _intent(committed, cipher, *, phone: str | None = None, email: str | None = None) -> str:  # type: ignore[no-untyped-def]
    key = f"order-created:o-{key_id()}"
    with committed.begin() as session:
        recorded = repo.record_intent(
            session,
            intake.validate(
                session,
                NotificationRequest(
                    business_key=key,
                    recipient_ref=key,
                    phone=phone,
                    email=email,
                    template_key="demo",
                    variables={"n": 1, "intent_id": key},
                ),
                cipher,
                now=datetime.now(UTC),
                retention_days=30,
            ),
        )
    return recorded.intent_id


def _recipient(committed, intent_id: str) -> str:  # type: ignore[no-untyped-def]
    with committed() as session:
        return repo.get_intent(session, intent_id).recipient_ref


def _grant(committed, recipient: str, channel: str) -> int:  # type: ignore[no-untyped-def]
    with committed.begin() as session:
        return evidence.record_consent(
            session,
            recipient_ref=recipient,
            channel=channel,
            purpose="service",
            source="test",
            at=datetime.now(UTC),
        ).id


def _revoke(committed, recipient: str, channel: str) -> list[int]:  # type: ignore[no-untyped-def]
    with committed.begin() as session:
        ended = evidence.revoke_consent(
            session,
            recipient_ref=recipient,
            channel=channel,
            purpose="service",
            source="support-ticket",
            at=datetime.now(UTC),
        )
        return [c.id for c in ended]


async def test_a_revoke_ends_the_earlier_grant_and_the_next_authorization_is_denied_citing_it(
    committed, cipher
):
    ledger = LedgerActivities(committed, cipher)
    intent_id = _intent(committed, cipher, phone="+447400031001")
    recipient = _recipient(committed, intent_id)
    grant = _grant(committed, recipient, "sms")
    first = await ledger.authorize(AuthorizeInput(intent_id, "sms", 1))
    assert first.outcome == "allow", first

    assert _revoke(committed, recipient, "sms") == [grant]

    second = await ledger.authorize(AuthorizeInput(intent_id, "sms", 2))
    assert (second.outcome, second.rule) == ("deny", "consent.revoked"), second
    assert f"consent {grant}" in second.reason and "support-ticket" in second.reason
    with committed() as session:
        decision = session.get(PolicyDecision, second.decision_id)
        assert decision is not None
        (cited,) = decision.inputs["consent_revoked"]
        assert cited["id"] == str(grant) and cited["revoked_source"] == "support-ticket"
        # The grant is kept as history, now ended; the revoke wrote no row of its own.
        rows = list(session.execute(select(Consent).where(Consent.recipient_ref == recipient)))
        assert len(rows) == 1
        row = session.get(Consent, grant)
        assert row is not None and row.revoked_at is not None


async def test_a_revoke_on_one_channel_ends_an_all_channels_grant(committed, cipher):
    ledger = LedgerActivities(committed, cipher)
    intent_id = _intent(committed, cipher, phone="+447400031002")
    recipient = _recipient(committed, intent_id)
    everywhere = _grant(committed, recipient, "*")
    email_only = _grant(committed, recipient, "email")

    assert _revoke(committed, recipient, "sms") == [everywhere]

    decision = await ledger.authorize(AuthorizeInput(intent_id, "sms", 1))
    assert (decision.outcome, decision.rule) == ("deny", "consent.revoked")
    with committed() as session:
        kept = session.get(Consent, email_only)
        assert kept is not None and kept.revoked_at is None


def test_revoking_twice_ends_nothing_the_second_time(committed):
    recipient = f"m-{uuid.uuid4().hex[:8]}"
    grant = _grant(committed, recipient, "email")
    assert _revoke(committed, recipient, "email") == [grant]
    assert _revoke(committed, recipient, "email") == []


def test_a_revoke_on_all_channels_ends_every_live_grant_of_that_purpose(committed):
    recipient = f"m-{uuid.uuid4().hex[:8]}"
    grants = [_grant(committed, recipient, c) for c in ("sms", "email", "*")]
    with committed.begin() as session:
        other_purpose = evidence.record_consent(
            session,
            recipient_ref=recipient,
            channel="sms",
            purpose="marketing",
            source="test",
            at=datetime.now(UTC),
        ).id
    assert _revoke(committed, recipient, "*") == grants
    with committed() as session:
        rows = evidence.consents_of(session, recipient)
    live = [c.id for c in rows if c.revoked_at is None]
    assert live == [other_purpose]


def test_an_all_channels_suppression_is_loaded_for_every_channel(committed, cipher):
    lookup = cipher.lookup_hmac(f"+4474000{uuid.uuid4().int % 100_000:05d}")
    with committed.begin() as session:
        row, created = evidence.suppress(
            session,
            destination_hmac=lookup,
            channel="*",
            reason="complaint",
            source="test",
            at=datetime.now(UTC),
        )
    assert created
    with committed() as session:
        for channel in ("sms", "email"):
            assert [s.id for s in repo.suppressions_for(session, lookup, channel)] == [row.id]


async def test_an_all_channels_suppression_denies_the_authorization(committed, cipher):
    ledger = LedgerActivities(committed, cipher)
    phone = "+447400031003"
    intent_id = _intent(committed, cipher, phone=phone)
    _grant(committed, _recipient(committed, intent_id), "sms")
    with committed.begin() as session:
        evidence.suppress(
            session,
            destination_hmac=cipher.lookup_hmac(phone),
            channel="*",
            reason="complaint",
            source="test",
            at=datetime.now(UTC),
        )
    decision = await ledger.authorize(AuthorizeInput(intent_id, "sms", 1))
    assert (decision.outcome, decision.rule) == ("deny", "suppression.complaint"), decision


def test_a_lifted_suppression_stays_as_history_and_no_longer_applies(committed, cipher):
    lookup = cipher.lookup_hmac(f"someone.{uuid.uuid4().hex[:8]}@example.org")
    now = datetime.now(UTC)
    with committed.begin() as session:
        row, _ = evidence.suppress(
            session,
            destination_hmac=lookup,
            channel="email",
            reason="unsubscribed",
            source="test",
            at=now,
        )
        again, created = evidence.suppress(
            session,
            destination_hmac=lookup,
            channel="email",
            reason="unsubscribed",
            source="test",
            at=now,
        )
        assert (again.id, created) == (row.id, False)
    with committed.begin() as session:
        lifted, changed = evidence.lift_suppression(session, row.id, source="api", at=now)
        assert changed and lifted.lifted_source == "api"
        _, changed = evidence.lift_suppression(session, row.id, source="api", at=now)
        assert not changed
    with committed() as session:
        assert repo.suppressions_for(session, lookup, "email") == []
        assert [s.id for s in evidence.suppressions_of(session, lookup)] == [row.id]
        with pytest.raises(NotFound):
            evidence.lift_suppression(session, -1, source="api", at=now)
