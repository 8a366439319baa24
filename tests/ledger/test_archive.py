"""The archive: only closed intents past the policy's evidence retention and not on hold
leave the hot tables; each leaves a tombstone whose hash and chain verify its export; a
second run does nothing, a stopped run resumes; an archived business key stays taken."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, func, select, update
from sqlalchemy.orm import Session, sessionmaker

import policies
from domain.states import AttemptState
from ledger import archive, migrate, operator_actions, retention
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.errors import IntentConflict, NotFound
from ledger.models import (
    ArchivedIntent,
    Attempt,
    Intent,
    Observation,
    OperatorAction,
    Outbox,
    PolicyDecision,
    ReviewItem,
)
from ledger.templates import seed_packaged, seed_policy
from tests.conftest import fresh_database, key_id
from tests.ledger.conftest import fields, make_attempt

pytestmark = pytest.mark.ledger

LATER = datetime.now(UTC) + timedelta(days=366)
"""Past the default evidence retention (365 days) of everything recorded today."""
HOT_TABLES = (Intent, Attempt, Observation, PolicyDecision, OperatorAction, Outbox)


@pytest.fixture
def sessions(pg_url: str) -> Iterator[sessionmaker[Session]]:
    """A fresh, migrated database of our own: the archive looks at every intent in it."""
    url = fresh_database(pg_url, "herald_archive")
    migrate.upgrade(url)
    engine = create_engine(url)
    made = sessionmaker(engine, expire_on_commit=False)
    with made.begin() as session:
        seed_packaged(session, "default")
    yield made
    engine.dispose()


def _intent(
    session: Session, cipher: FieldCipher, *, state: str = AttemptState.DELIVERED.value
) -> str:
    """An SMS intent with one attempt in `state`, an observation and an operator action."""
    key = f"archive:{key_id()}"
    recorded = repo.record_intent(session, fields(session, cipher, key))
    attempt = make_attempt(session, cipher, recorded.intent_id, key)
    session.execute(update(Attempt).where(Attempt.id == attempt.id).values(state=state))
    session.add(
        Observation(
            attempt_id=attempt.id,
            source="webhook",
            raw_status=state,
            normalized_status=state,
            observed_at=datetime.now(UTC),
            dedupe_key=f"wh:{key}",
            applied=True,
        )
    )
    operator_actions.record_operator_action(
        session,
        intent_id=recorded.intent_id,
        action="note",
        operator="desk",
        reason="checked",
        outcome="accepted",
        at=datetime.now(UTC),
    )
    return recorded.intent_id


def _hot_rows(session: Session, intent_id: str) -> dict[str, int]:
    counts = {}
    for model in HOT_TABLES:
        if model is Observation:
            where = Observation.attempt_id.in_(
                select(Attempt.id).where(Attempt.intent_id == intent_id)
            )
        elif model is Intent:
            where = Intent.id == intent_id
        else:
            where = model.intent_id == intent_id  # type: ignore[attr-defined]
        counts[model.__tablename__] = session.scalar(
            select(func.count()).select_from(model).where(where)
        )
    return counts


def test_only_closed_intents_past_retention_without_hold_are_archived(
    sessions: sessionmaker[Session], cipher: FieldCipher
) -> None:
    with sessions.begin() as s:
        closed = _intent(s, cipher)
        in_flight = _intent(s, cipher, state=AttemptState.SUBMITTED.value)
        held = _intent(s, cipher)
        retention.set_legal_hold(s, held, True)
        reviewed = _intent(s, cipher)
        s.add(
            ReviewItem(
                kind="unknown_outcome",
                subject=f"intent:{reviewed}",
                found_at=datetime.now(UTC),
                intent_id=reviewed,
            )
        )
        awaiting = _intent(s, cipher, state=AttemptState.UNKNOWN.value)
        s.execute(update(Intent).where(Intent.id == awaiting).values(awaiting="settlement"))
        late = _intent(s, cipher)
        # A receipt long after: the retention counts from the intent's last activity.
        attempt_id = s.scalar(select(Attempt.id).where(Attempt.intent_id == late))
        s.add(
            Observation(
                attempt_id=attempt_id,
                source="webhook",
                raw_status="delivered",
                observed_at=LATER - timedelta(days=10),
                dedupe_key=f"late:{late}",
            )
        )
    kept = [in_flight, held, reviewed, awaiting, late]
    with sessions() as s:
        before = {i: _hot_rows(s, i) for i in [closed, *kept]}
    assert before[closed] == {
        "intent": 1,
        "attempt": 1,
        "observation": 1,
        "policy_decision": 1,
        "operator_action": 1,
        "outbox": 1,
    }

    report = archive.archive_in_batches(sessions.begin, now=LATER, batch=100)

    assert report.archived == 1
    assert report.held == 1
    assert (report.policy_version, report.evidence_days) == ("2026-12-07.1", 365)
    with sessions() as s:
        assert set(_hot_rows(s, closed).values()) == {0}
        for intent_id in kept:
            assert _hot_rows(s, intent_id) == before[intent_id]
        stone = s.execute(select(ArchivedIntent)).scalar_one()
    assert stone.intent_id == closed
    assert stone.row_counts == {
        "intent": 1,
        "attempts": 1,
        "observations": 1,
        "decisions": 1,
        "operator_actions": 1,
        "review_items": 0,
        "outbox": 1,
    }


def test_the_evidence_retention_comes_from_the_active_policy(
    sessions: sessionmaker[Session], cipher: FieldCipher
) -> None:
    with sessions.begin() as s:
        intent_id = _intent(s, cipher)
    soon = datetime.now(UTC) + timedelta(days=40)
    assert archive.archive_in_batches(sessions.begin, now=soon, batch=10).archived == 0
    text = policies.load_packaged("default").replace(
        'version = "2026-12-07.1"', 'version = "short-evidence-1"'
    )
    with sessions.begin() as s:
        seed_policy(s, text + "\n[retention]\nevidence_days = 30\n", name="short", activate=True)
    report = archive.archive_in_batches(sessions.begin, now=soon, batch=10)
    assert (report.archived, report.policy_version, report.evidence_days) == (
        1,
        "short-evidence-1",
        30,
    )
    with sessions() as s:
        assert s.get(Intent, intent_id) is None


def test_the_export_verifies_against_its_tombstone_and_a_change_is_found(
    sessions: sessionmaker[Session], cipher: FieldCipher
) -> None:
    with sessions.begin() as s:
        ids = [_intent(s, cipher) for _ in range(3)]
        hmac = s.get(Intent, ids[0]).sms_destination_hmac  # type: ignore[union-attr]
    archive.archive_in_batches(sessions.begin, now=LATER, batch=100)
    with sessions() as s:
        stones = list(archive.tombstones(s))
        assert archive.verify(s).as_dict() == {
            "tombstones": 3,
            "documents_checked": 3,
            "problems": [],
            "ok": True,
        }
        lines = [stone.document + "\n" for stone in stones]  # type: ignore[operator]
        assert archive.verify(s, lines).documents_checked == 6
    first = stones[0].document
    assert first is not None and archive.sha256(first) == stones[0].document_sha256
    # The evidence is kept as hashes; no ciphertext of contact data is ever exported.
    assert hmac in first and "_ct" not in first and "email_search_hmac" not in first

    tampered = lines[1].replace('"state":"delivered"', '"state":"failed"')
    with sessions() as s:
        assert archive.verify(s, [tampered]).problems == [
            f"line 1: intent {stones[1].intent_id} does not match its hash"
        ]
    with sessions.begin() as s:
        s.execute(
            update(ArchivedIntent)
            .where(ArchivedIntent.id == stones[1].id)
            .values(document=tampered.rstrip("\n"))
        )
    with sessions() as s:
        assert archive.verify(s).problems == [
            f"tombstone {stones[1].id} ({stones[1].business_key}): document does not match its hash"
        ]
    with sessions.begin() as s:
        s.delete(s.get(ArchivedIntent, stones[0].id))
    with sessions() as s:
        problems = archive.verify(s).problems
    assert f"tombstone {stones[1].id} ({stones[1].business_key}): chain broken" in problems


def test_only_a_document_exported_intact_leaves_the_ledger(
    sessions: sessionmaker[Session], cipher: FieldCipher
) -> None:
    with sessions.begin() as s:
        for _ in range(2):
            _intent(s, cipher)
    archive.archive_in_batches(sessions.begin, now=LATER, batch=10)
    with sessions() as s:
        good, bad = [stone.document for stone in archive.tombstones(s)]
    assert good is not None and bad is not None
    garbled = bad.replace('"state":"delivered"', '"state":"failed"')
    with sessions.begin() as s:
        assert archive.drop_documents(s, [good + "\n", garbled + "\n", "not json\n"]) == 1
    with sessions() as s:
        kept = [stone.document for stone in archive.tombstones(s)]
        assert kept == [None, bad]
        # The file with the good line still verifies against the tombstone left behind.
        assert archive.verify(s, [good]).as_dict()["ok"] is True


def test_a_second_run_does_nothing_and_a_stopped_run_resumes(
    sessions: sessionmaker[Session], cipher: FieldCipher
) -> None:
    with sessions.begin() as s:
        # Old but open intents first (pending: nothing decided yet), recorded in an earlier
        # transaction, so earlier: a batch full of them must not end the run.
        still_open = [
            repo.record_intent(s, fields(s, cipher, f"archive:{key_id()}")).intent_id
            for _ in range(2)
        ]
    with sessions.begin() as s:
        closed = [_intent(s, cipher) for _ in range(5)]
    # A run stopped after its first committed batch of two...
    with sessions.begin() as s:
        first = archive.archive(s, now=LATER, limit=2)
    assert (first.archived, first.more) == (0, True)
    with sessions.begin() as s:
        second = archive.archive(s, now=LATER, limit=3, after=first.after)
    assert second.archived == 3
    # ...resumes: the rest go, each once (the open ones are looked at again, and kept).
    rest = archive.archive_in_batches(sessions.begin, now=LATER, batch=2)
    assert (rest.archived, rest.batches) == (2, 3)  # the open two, the rest, none
    again = archive.archive_in_batches(sessions.begin, now=LATER, batch=2)
    assert again.archived == 0
    with sessions() as s:
        archived = set(s.execute(select(ArchivedIntent.intent_id)).scalars())
        assert archived == set(closed)
        assert all(s.get(Intent, i) is not None for i in still_open)
        assert archive.verify(s).as_dict()["ok"] is True


def test_an_archived_business_key_cannot_be_recorded_again_and_says_where_it_went(
    sessions: sessionmaker[Session], cipher: FieldCipher
) -> None:
    with sessions.begin() as s:
        intent_id = _intent(s, cipher)
        key = s.get(Intent, intent_id).business_key  # type: ignore[union-attr]
    archive.archive_in_batches(sessions.begin, now=LATER, batch=10)
    with sessions.begin() as s:
        with pytest.raises(IntentConflict, match="belongs to an archived intent"):
            repo.record_intent(s, fields(s, cipher, key))
    with sessions() as s:
        # `herald show`, the API and the console say where it went.
        with pytest.raises(NotFound, match="was archived on .*herald archive export"):
            repo.get_intent(s, key)


def test_every_table_that_refers_to_an_intent_or_its_rows_is_archived_with_it() -> None:
    """A new table with a foreign key to an intent's rows must be a part of the export
    (ledger.archive.PARTS), or archiving would either fail on the key or leave it behind."""
    from ledger.models import Base

    archived = {model.__tablename__ for _, model, _ in archive.PARTS} | {"intent"}
    referring = {
        table.name
        for table in Base.metadata.sorted_tables
        for key in table.foreign_keys
        if key.column.table.name in archived
    }
    assert referring <= archived
    # review_item names its intent without a foreign key (it outlives nothing else).
    assert "review_item" in archived
