"""The ledger against real Postgres: idempotent intents, compare-and-set transitions,
append-only deduplicated observations."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import func, select

from domain.states import AttemptState
from ledger import observations
from ledger import repository as repo
from ledger.errors import IntentConflict, InvalidRequest
from ledger.models import Attempt, Intent, Observation, Outbox, Suppression
from ledger.observations import ObservationFacts
from tests.conftest import unique
from tests.ledger.conftest import fields, make_attempt

pytestmark = pytest.mark.ledger


def _attempt(session, cipher, key: str, state: str = "prepared") -> Attempt:  # type: ignore[no-untyped-def]
    recorded = repo.record_intent(session, fields(session, cipher, key))
    attempt = make_attempt(session, cipher, recorded.intent_id, key)
    if state != "prepared":
        session.query(Attempt).filter(Attempt.id == attempt.id).update({Attempt.state: state})
        session.refresh(attempt)
    return attempt


def _facts(state: AttemptState, dedupe: str, source: str = "webhook") -> ObservationFacts:
    return ObservationFacts(
        source=source,
        raw_status=state.value,
        normalized=state,
        observed_at=datetime.now(UTC),
        dedupe_key=dedupe,
    )


def test_recording_a_business_key_twice_returns_the_existing_intent(db, cipher):
    key = unique("order-created:o")
    first = repo.record_intent(db, fields(db, cipher, key))
    second = repo.record_intent(db, fields(db, cipher, key))
    assert first.created and not second.created
    assert first.intent_id == second.intent_id
    assert (
        db.scalar(select(func.count()).select_from(Intent).where(Intent.business_key == key)) == 1
    )
    assert (
        db.scalar(
            select(func.count()).select_from(Outbox).where(Outbox.intent_id == first.intent_id)
        )
        == 1
    )


def test_the_same_key_with_another_payload_is_a_conflict_not_a_second_intent(db, cipher):
    key = unique("order-created:o")
    repo.record_intent(db, fields(db, cipher, key))
    with pytest.raises(IntentConflict, match="different payload"):
        repo.record_intent(db, fields(db, cipher, key, variables={"n": 2, "intent_id": key}))
    assert (
        db.scalar(select(func.count()).select_from(Intent).where(Intent.business_key == key)) == 1
    )


def test_an_invalid_phone_number_is_refused_naming_the_field(db, cipher):
    with pytest.raises(InvalidRequest) as caught:
        fields(db, cipher, unique("order-created:o"), phone="+44 12")
    assert caught.value.field == "phone"
    assert "12" not in caught.value.problem.replace("+44", "")  # the number is not echoed


FAR_TIMES = {
    # Before year 1 in UTC: Postgres stored it as BC and every listing then failed to read.
    "year 1 at +14:00": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))),
    # Past the calendar once the retention days are added (an OverflowError, a 500).
    "year 9999": datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
    "367 days ahead": datetime.now(UTC) + timedelta(days=367),
    "367 days back": datetime.now(UTC) - timedelta(days=367),
}


@pytest.mark.parametrize("name", ["send_at", "expires_at"])
@pytest.mark.parametrize("when", FAR_TIMES.values(), ids=FAR_TIMES.keys())
def test_a_time_more_than_a_year_from_now_is_refused_naming_the_field(db, cipher, name, when):
    with pytest.raises(InvalidRequest) as caught:
        fields(db, cipher, unique("order-created:o"), **{name: when})
    assert caught.value.problems == [(name, "must be within 366 days of now, either way")]


def test_a_send_a_year_ahead_and_its_expiry_are_recorded(db, cipher):
    send_at = datetime.now(UTC) + timedelta(days=365)
    recorded = repo.record_intent(
        db,
        fields(
            db,
            cipher,
            unique("order-created:o"),
            send_at=send_at,
            expires_at=send_at + timedelta(hours=23),
        ),
    )
    intent = db.get(Intent, recorded.intent_id)
    assert intent is not None and intent.send_at == send_at


def test_an_unknown_template_is_refused_naming_the_field(db, cipher):
    with pytest.raises(InvalidRequest) as caught:
        fields(db, cipher, unique("order-created:o"), template_key="no-such-template")
    assert caught.value.field == "template_key"


def test_pii_is_stored_only_encrypted(db, cipher):
    key = unique("order-created:o")
    recorded = repo.record_intent(db, fields(db, cipher, key))
    intent = db.get(Intent, recorded.intent_id)
    assert "7400000100" not in (intent.sms_destination_ct or "")
    assert cipher.decrypt(intent.sms_destination_ct, context=key) == "+447400000100"
    assert intent.sms_destination_hmac == cipher.lookup_hmac("+447400000100")


def test_a_duplicate_receipt_changes_nothing(db, cipher):
    attempt = _attempt(db, cipher, unique("demo:d"), state="submitted")
    first = observations.record_observation(
        db, _facts(AttemptState.DELIVERED, "dup-1"), token=attempt.token
    )
    second = observations.record_observation(
        db, _facts(AttemptState.DELIVERED, "dup-1"), token=attempt.token
    )
    assert first.verdict == "applied" and second.verdict == "duplicate"
    assert (
        db.scalar(
            select(func.count())
            .select_from(Observation)
            .where(Observation.attempt_id == attempt.id)
        )
        == 1
    )


def test_a_late_sent_after_delivered_is_kept_as_evidence_and_not_applied(db, cipher):
    attempt = _attempt(db, cipher, unique("demo:d"), state="submitted")
    observations.record_observation(
        db, _facts(AttemptState.DELIVERED, unique("d")), token=attempt.token
    )
    late = observations.record_observation(
        db, _facts(AttemptState.SENT, unique("s")), token=attempt.token
    )
    assert late.verdict == "stale"
    db.refresh(attempt)
    assert attempt.state == "delivered"
    rows = db.execute(
        select(Observation.raw_status, Observation.applied)
        .where(Observation.attempt_id == attempt.id)
        .order_by(Observation.id)
    ).all()
    assert rows == [("delivered", True), ("sent", False)]


def test_conflicting_terminal_observations_are_kept_and_flagged(db, cipher):
    attempt = _attempt(db, cipher, unique("demo:d"), state="submitted")
    observations.record_observation(
        db, _facts(AttemptState.UNDELIVERED, unique("u")), token=attempt.token
    )
    result = observations.record_observation(
        db, _facts(AttemptState.DELIVERED, unique("d")), token=attempt.token
    )
    assert result.verdict == "conflict"
    db.refresh(attempt)
    assert attempt.state == "undelivered"
    assert (
        db.scalar(
            select(func.count())
            .select_from(Observation)
            .where(Observation.attempt_id == attempt.id, Observation.conflict.is_(True))
        )
        == 1
    )


def test_a_receipt_for_an_unknown_message_is_kept_as_orphan_evidence(db):
    facts = ObservationFacts(
        source="webhook",
        raw_status="delivered",
        normalized=AttemptState.DELIVERED,
        observed_at=datetime.now(UTC),
        dedupe_key=unique("orphan"),
        remote_id="SM" + uuid.uuid4().hex,  # no attempt of any test holds it
    )
    result = observations.record_observation(db, facts)
    assert result.verdict == "orphan"
    assert (
        db.scalar(
            select(func.count())
            .select_from(Observation)
            .where(Observation.dedupe_key == facts.dedupe_key)
        )
        == 1
    )


def test_fifty_concurrent_records_of_one_business_key_leave_one_intent(committed, cipher):
    key = unique("class-opening:c-9081")
    barrier = threading.Barrier(50)

    def record(_: int) -> str:
        with committed.begin() as session:
            f = fields(session, cipher, key)
            barrier.wait()
            return repo.record_intent(session, f).intent_id

    with ThreadPoolExecutor(max_workers=50) as pool:
        ids = set(pool.map(record, range(50)))
    with committed() as session:
        count = session.scalar(
            select(func.count()).select_from(Intent).where(Intent.business_key == key)
        )
    assert count == 1 and len(ids) == 1


def test_a_delivered_receipt_and_a_late_unknown_racing_leave_delivered(committed, cipher):
    key = unique("class-opening:c-9081")
    with committed.begin() as session:
        token = _attempt(session, cipher, key, state="submitted").token
    barrier = threading.Barrier(2)

    def observe(state: AttemptState) -> str:
        with committed.begin() as session:
            barrier.wait()
            return observations.record_observation(
                session, _facts(state, unique("race")), token=token
            ).verdict

    for _ in range(5):  # both orders are exercised across rounds
        with ThreadPoolExecutor(max_workers=2) as pool:
            verdicts = list(pool.map(observe, [AttemptState.DELIVERED, AttemptState.UNKNOWN]))
        with committed() as session:
            attempt = repo.attempt_by_token(session, token)
            assert attempt.state == "delivered", verdicts
    with committed() as session:
        rows = session.execute(
            select(Observation.normalized_status, Observation.applied).where(
                Observation.attempt_id == attempt.id
            )
        ).all()
    assert ("unknown", False) in rows or ("unknown", True) in rows
    assert sum(1 for r in rows if r[0] == "delivered" and r[1]) >= 1
    assert len(rows) == 10  # nothing was lost


def test_an_orphan_receipt_is_applied_once_the_attempt_learns_its_remote_id(db, cipher):
    attempt = _attempt(db, cipher, unique("demo:d"))
    remote = "SM" + uuid.uuid4().hex
    orphan = ObservationFacts(
        source="webhook",
        raw_status="delivered",
        normalized=AttemptState.DELIVERED,
        observed_at=datetime.now(UTC),
        dedupe_key=unique("orphan"),
        remote_id=remote,
    )
    assert observations.record_observation(db, orphan).verdict == "orphan"
    sent = ObservationFacts(
        source="send",
        raw_status="queued",
        normalized=AttemptState.SUBMITTED,
        observed_at=datetime.now(UTC),
        dedupe_key=unique("send"),
        remote_id=remote,
    )
    result = observations.record_observation(db, sent, token=attempt.token)
    db.refresh(attempt)
    assert attempt.state == "delivered" and result.state == "delivered"
    linked = db.execute(
        select(Observation.attempt_id, Observation.applied).where(
            Observation.dedupe_key == orphan.dedupe_key
        )
    ).one()
    assert linked == (attempt.id, True)


def test_an_all_channels_suppression_is_loaded_for_sms_and_email(db, cipher):
    lookup = cipher.lookup_hmac("+447400000199")
    everywhere = Suppression(
        destination_hmac=lookup,
        channel="*",
        reason="complaint",
        source="test",
        at=datetime.now(UTC),
    )
    email_only = Suppression(
        destination_hmac=lookup,
        channel="email",
        reason="bounce",
        source="test",
        at=datetime.now(UTC),
    )
    db.add_all([everywhere, email_only])
    db.flush()
    assert [s.id for s in repo.suppressions_for(db, lookup, "sms")] == [everywhere.id]
    assert {s.id for s in repo.suppressions_for(db, lookup, "email")} == {
        everywhere.id,
        email_only.id,
    }


class _Statements:
    """Counts the SQL statements a session's connection runs while open (round trips)."""

    def __init__(self, session) -> None:  # type: ignore[no-untyped-def]
        self.connection = session.connection()
        self.sql: list[str] = []

    def _count(self, conn, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
        self.sql.append(statement.split(None, 1)[0])

    def __enter__(self) -> _Statements:
        from sqlalchemy import event

        event.listen(self.connection, "before_cursor_execute", self._count)
        return self

    def __exit__(self, *exc: object) -> None:
        from sqlalchemy import event

        event.remove(self.connection, "before_cursor_execute", self._count)


def test_a_receipt_is_recorded_in_three_statements_with_its_verdict_written_once(db, cipher):
    attempt = _attempt(db, cipher, unique("class-opening:c"), state="submitted")
    with _Statements(db) as run:
        result = observations.record_observation(
            db, _facts(AttemptState.DELIVERED, unique("w")), token=attempt.token
        )
    assert result.verdict == "applied" and result.state == "delivered"
    # Read the attempt, insert the observation with its verdict, compare-and-set.
    assert run.sql == ["SELECT", "INSERT", "UPDATE"]
    stored = db.execute(
        select(Observation.verdict, Observation.applied).where(
            Observation.id == result.observation_id
        )
    ).one()
    assert stored == ("applied", True)


def test_a_send_answer_learns_the_remote_id_without_reading_the_attempt_again(db, cipher):
    attempt = _attempt(db, cipher, unique("class-opening:c"))
    sent = ObservationFacts(
        source="send",
        raw_status="queued",
        normalized=AttemptState.SUBMITTED,
        observed_at=datetime.now(UTC),
        dedupe_key=unique("send"),
        remote_id=unique("SM"),
    )
    with _Statements(db) as run:
        result = observations.record_observation(db, sent, token=attempt.token)
    assert (result.verdict, result.state) == ("applied", "submitted")
    # Read, insert, store the remote id (returning the row), compare-and-set, orphans.
    assert run.sql == ["SELECT", "INSERT", "UPDATE", "UPDATE", "SELECT"]
    db.refresh(attempt)
    assert (attempt.state, attempt.remote_id) == ("submitted", sent.remote_id)


def test_recent_contacts_are_other_intents_submissions_to_the_destination_since_a_time(db, cipher):
    from datetime import timedelta

    now = datetime.now(UTC)
    # A destination no other test uses (committed rows of other tests stay in the ledger).
    phone = f"+4474009{uuid.uuid4().int % 100_000:05d}"

    def attempt_to_phone() -> Attempt:
        key = unique("class-opening:c")
        recorded = repo.record_intent(db, fields(db, cipher, key))
        return make_attempt(db, cipher, recorded.intent_id, key, destination=phone)

    mine, other, older = attempt_to_phone(), attempt_to_phone(), attempt_to_phone()
    at_other = now - timedelta(minutes=5)
    for attempt, at in ((mine, now), (other, at_other), (older, now - timedelta(hours=2))):
        db.query(Attempt).filter(Attempt.id == attempt.id).update({Attempt.submitted_at: at})
    found = repo.recent_contacts(
        db, mine.destination_hmac, "sms", now - timedelta(hours=1), mine.intent_id
    )
    assert found == [at_other]
    assert (
        repo.recent_contacts(db, mine.destination_hmac, "email", now - timedelta(hours=1), "x")
        == []
    )
