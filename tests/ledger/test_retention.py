"""Retention: after purge no phone number, email address or body is readable anywhere in
the ledger, while the auditor's timeline still explains what happened; legal hold exempts
an intent; a dump of the whole database never holds a destination in plaintext."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, delete, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from domain.states import AttemptState
from ledger import migrate, observations, retention, timeline
from ledger import repository as repo
from ledger.errors import NotFound
from ledger.models import Attempt, Base, IdempotencyRecord, Intent, OperatorAction
from ledger.observations import ObservationFacts
from ledger.templates import seed_packaged
from tests.conftest import fresh_database, unique
from tests.ledger.conftest import EMAIL, PHONE, fields, make_attempt

pytestmark = pytest.mark.ledger

NATIONAL = ("07400000100", "07400 000100", "7400000100")
SMS_BODY = "Ada, a seat opened in Pilates c-9081"
EMAIL_SUBJECT = "Ada, your seat is waiting"
EMAIL_BODY = "Dear Ada Lovelace, a seat opened in Pilates c-9081."
ITINERARY = {
    "flight": "LH-432",
    "origin": "Paris",
    "destination": "Boston",
    "new_departure": "16:05",
    "old_departure": "14:10",
    "trip_url": "https://trips.example/t-1",
    "first_name": "Ada Lovelace",
}
SECRETS = (PHONE, *NATIONAL, EMAIL, SMS_BODY, EMAIL_SUBJECT, EMAIL_BODY, "Ada Lovelace")


@pytest.fixture
def ledger_db(pg_url: str) -> Iterator[tuple[str, sessionmaker[Session]]]:
    """A fresh, migrated database of our own: `any table` then means only our rows."""
    url = fresh_database(pg_url, "herald_retention")
    migrate.upgrade(url)
    engine = create_engine(url)
    sessions = sessionmaker(engine, expire_on_commit=False)
    with sessions.begin() as session:
        seed_packaged(session, "default")
    yield url, sessions
    engine.dispose()


def _delivered_intent(session: Session, cipher, key: str) -> str:  # type: ignore[no-untyped-def]
    """An sms+email intent whose SMS was delivered and whose email was sent."""
    recorded = repo.record_intent(
        session,
        fields(
            session,
            cipher,
            key,
            email=EMAIL,
            channels=("sms", "email"),
            mode="all",
            template_key="itinerary-change",
            variables=ITINERARY,
        ),
    )
    sms = make_attempt(session, cipher, recorded.intent_id, key, body=SMS_BODY)
    email = make_attempt(
        session,
        cipher,
        recorded.intent_id,
        key,
        channel="email",
        destination=EMAIL,
        body=EMAIL_BODY,
        subject=EMAIL_SUBJECT,
    )
    now = datetime.now(UTC)
    remote_id = "SM" + unique("r").replace("-", "").ljust(32, "0")[:32]
    for source, state, dedupe, rid in (
        ("send", AttemptState.SUBMITTED, f"send:{sms.token}:submitted", remote_id),
        ("webhook", AttemptState.SENT, unique("wh"), remote_id),
        ("webhook", AttemptState.DELIVERED, unique("wh"), remote_id),
    ):
        observations.record_observation(
            session,
            ObservationFacts(
                source=source,
                raw_status=state.value,
                normalized=state,
                observed_at=now,
                dedupe_key=dedupe,
                remote_id=rid,
            ),
            token=sms.token,
        )
    session.execute(
        Attempt.__table__.update()
        .where(Attempt.id == email.id)
        .values(message_id=f"<{email.token}@herald.localhost>")
    )
    observations.record_observation(
        session,
        ObservationFacts(
            source="send",
            raw_status="smtp_250",
            normalized=AttemptState.SENT,
            observed_at=now,
            dedupe_key=f"send:{email.token}:smtp_250",
            detail={"message_id": f"<{email.token}@herald.localhost>"},
        ),
        token=email.token,
    )
    return recorded.intent_id


def _every_row_as_text(session: Session) -> str:
    """Every row of every ledger table, as Postgres prints it."""
    chunks = []
    for table in Base.metadata.sorted_tables:
        chunks += session.execute(text(f'SELECT t::text FROM "{table.name}" t')).scalars().all()
    return "\n".join(chunks)


def _readable_ciphertexts(session: Session, intent_id: str) -> list[str]:
    intent = session.get(Intent, intent_id)
    assert intent is not None
    values = [intent.sms_destination_ct, intent.email_destination_ct, intent.variables_ct]
    for a in repo.attempts_of(session, intent_id):
        values += [a.destination_ct, a.body_ct, a.subject_ct]
    return [v for v in values if v is not None]


def _after_retention() -> datetime:
    return datetime.now(UTC) + timedelta(days=31)


def test_after_purge_no_destination_or_body_is_readable_in_any_table(ledger_db, cipher):
    _, sessions = ledger_db
    key = unique("class-opening:c-9081")
    with sessions.begin() as session:
        intent_id = _delivered_intent(session, cipher, key)
    with sessions() as session:
        assert len(_readable_ciphertexts(session, intent_id)) == 8
        before = timeline.timeline(session, key)

    with sessions.begin() as session:
        report = retention.purge(session, now=_after_retention())
    assert report.intents_purged == 1 and report.attempts_purged == 2
    assert report.intent_ids == [intent_id]

    with sessions() as session:
        assert _readable_ciphertexts(session, intent_id) == []
        for column in [c for t in Base.metadata.tables.values() for c in t.columns]:
            if column.name.endswith("_ct"):
                assert session.scalar(select(column).where(column.is_not(None)).limit(1)) is None, (
                    column
                )
        everything = _every_row_as_text(session)
        for secret in SECRETS:
            assert secret not in everything
        after = timeline.timeline(session, key)

    assert after["intent"]["pii_purged_at"] is not None
    # The routing evidence is all still there, unchanged.
    assert after["decisions"] == before["decisions"]
    assert after["observations"] == before["observations"]
    assert [o["normalized_status"] for o in after["observations"]] == [
        "submitted",
        "sent",
        "delivered",
        "sent",
    ]
    assert all(d["policy_version"] == "2026-12-07.1" for d in after["decisions"])
    for kept, was in zip(after["attempts"], before["attempts"], strict=True):
        assert kept["pii_readable"] is False and was["pii_readable"] is True
        assert {k: v for k, v in kept.items() if k != "pii_readable"} == {
            k: v for k, v in was.items() if k != "pii_readable"
        }
    sms, email = after["attempts"]
    assert sms["template_version"] == 1 and len(sms["content_sha256"]) == 64
    assert sms["remote_id"].startswith("SM") and sms["state"] == "delivered"
    assert email["message_id"].endswith("@herald.localhost>")
    assert after["intent"]["state"] == "delivered"


def test_purge_leaves_intents_inside_their_window_alone(ledger_db, cipher):
    _, sessions = ledger_db
    key = unique("class-opening:c-9081")
    with sessions.begin() as session:
        intent_id = _delivered_intent(session, cipher, key)
    with sessions.begin() as session:
        report = retention.purge(session, now=datetime.now(UTC) + timedelta(days=29))
    assert report.intents_purged == 0 and report.attempts_purged == 0
    with sessions() as session:
        assert len(_readable_ciphertexts(session, intent_id)) == 8


def test_a_limited_purge_goes_in_batches_until_nothing_is_left(ledger_db, cipher):
    _, sessions = ledger_db
    with sessions.begin() as session:
        ids = [_delivered_intent(session, cipher, unique("class-opening:c")) for _ in range(3)]
    batches = []
    while True:
        with sessions.begin() as session:
            report = retention.purge(session, now=_after_retention(), limit=2)
        batches.append((report.intents_purged, report.more))
        if not report.more:
            break
    assert batches == [(2, True), (1, False)]
    with sessions() as session:
        assert all(_readable_ciphertexts(session, i) == [] for i in ids)


def test_the_whole_purge_run_batches_and_expires_only_old_idempotency_keys(ledger_db, cipher):
    _, sessions = ledger_db
    now = _after_retention()
    with sessions() as session:
        db_now = session.scalar(select(func.now()))
    with sessions.begin() as session:
        session.execute(delete(IdempotencyRecord))
        ids = [_delivered_intent(session, cipher, unique("class-opening:c")) for _ in range(3)]
        old = db_now - retention.IDEMPOTENCY_RETENTION - timedelta(seconds=1)
        session.add_all(
            [
                IdempotencyRecord(
                    key=f"old-{n}",
                    request_sha256="0" * 64,
                    status_code=None if n == 0 else 201,  # a day-old in-flight record too
                    response={"intent_id": ids[0]},
                    created_at=old,
                )
                for n in range(3)
            ]
            + [
                IdempotencyRecord(
                    key="fresh",
                    request_sha256="1" * 64,
                    status_code=None,
                    response=None,
                    created_at=db_now - retention.IDEMPOTENCY_RETENTION + timedelta(minutes=5),
                ),
            ]
        )

    # `now` is days ahead (as `herald purge --now` may be): keys are judged by the
    # database's clock, so the fresh in-flight key survives.
    report = retention.purge_in_batches(sessions.begin, now=now, batch=2)

    assert report.intents_purged == 3
    assert report.idempotency_keys_expired == 3
    assert report.batches == 2 + 2  # intents 2 + 1, keys 2 + 1
    with sessions() as session:
        assert all(_readable_ciphertexts(session, i) == [] for i in ids)
        assert session.scalars(select(IdempotencyRecord.key)).all() == ["fresh"]
    # A second run finds nothing more to do.
    again = retention.purge_in_batches(sessions.begin, now=now, batch=2)
    assert (again.intents_purged, again.idempotency_keys_expired) == (0, 0)


def test_an_attempt_past_its_own_purge_after_is_purged_before_its_intent(ledger_db, cipher):
    _, sessions = ledger_db
    key = unique("class-opening:c-9081")
    now = datetime.now(UTC)
    with sessions.begin() as session:
        recorded = repo.record_intent(session, fields(session, cipher, key))
        make_attempt(session, cipher, recorded.intent_id, key, purge_after=now)
    with sessions.begin() as session:
        report = retention.purge(session, now=now + timedelta(seconds=1))
    assert (report.intents_purged, report.attempts_purged) == (0, 1)
    with sessions() as session:
        intent = session.get(Intent, recorded.intent_id)
        assert intent.sms_destination_ct is not None and intent.pii_purged_at is None
        (attempt,) = repo.attempts_of(session, recorded.intent_id)
        assert attempt.destination_ct is None and attempt.body_ct is None


def test_a_legal_hold_exempts_an_intent_from_purge_until_it_is_lifted(ledger_db, cipher):
    _, sessions = ledger_db
    held_key, free_key = unique("class-opening:c-1"), unique("class-opening:c-2")
    with sessions.begin() as session:
        held = _delivered_intent(session, cipher, held_key)
        free = _delivered_intent(session, cipher, free_key)
        result = retention.set_legal_hold(
            session, held_key, True, operator="dpo@x", reason="case 41", at=datetime.now(UTC)
        )
    assert result.changed and result.legal_hold and not result.pii_purged

    with sessions.begin() as session:
        report = retention.purge(session, now=_after_retention())
    assert report.intent_ids == [free] and report.held == 1
    with sessions() as session:
        assert len(_readable_ciphertexts(session, held)) == 8
        assert _readable_ciphertexts(session, free) == []
        action = session.execute(
            select(OperatorAction).where(OperatorAction.intent_id == held)
        ).scalar_one()
        assert (action.action, action.operator, action.reason) == ("legal-hold", "dpo@x", "case 41")
        assert timeline.timeline(session, held)["intent"]["legal_hold"] is True

    with sessions.begin() as session:
        again = retention.set_legal_hold(session, held, True)
        assert not again.changed
        lifted = retention.set_legal_hold(session, held, False)
        assert lifted.changed and not lifted.legal_hold
    with sessions.begin() as session:
        report = retention.purge(session, now=_after_retention())
    assert report.intent_ids == [held]
    with sessions() as session:
        assert _readable_ciphertexts(session, held) == []


def test_a_scheduled_intent_keeps_its_destination_until_its_send_time(ledger_db, cipher):
    _, sessions = ledger_db
    key = unique("class-opening:c-9081")
    send_at = datetime.now(UTC) + timedelta(days=60)
    with sessions.begin() as session:
        recorded = repo.record_intent(session, fields(session, cipher, key, send_at=send_at))
    # Retention counts from the send time, so the destination outlives the usual window.
    with sessions.begin() as session:
        report = retention.purge(session, now=_after_retention())
    assert recorded.intent_id not in report.intent_ids
    with sessions.begin() as session:
        report = retention.purge(session, now=send_at + timedelta(days=31))
    assert recorded.intent_id in report.intent_ids


def test_a_legal_hold_on_an_unknown_intent_is_not_found(ledger_db):
    _, sessions = ledger_db
    with sessions() as session, pytest.raises(NotFound):
        retention.set_legal_hold(session, "no-such:key", True)


def _pg_dump(url: str) -> str:
    from devstack.binaries import postgres_bin_dir

    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    done = subprocess.run(
        [str(postgres_bin_dir() / "pg_dump"), "--data-only", "--no-owner", "--dbname", conninfo],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_a_whole_database_dump_holds_no_destination_in_plaintext_before_or_after_purge(
    ledger_db, cipher
):
    url, sessions = ledger_db
    key = unique("class-opening:c-9081")
    with sessions.begin() as session:
        intent_id = _delivered_intent(session, cipher, key)
    with sessions() as session:
        ciphertexts = _readable_ciphertexts(session, intent_id)

    before = _pg_dump(url)
    assert key in before  # the dump does hold our rows...
    assert all(ct in before for ct in ciphertexts)  # ...encrypted,
    for secret in SECRETS:  # and never in plaintext
        assert secret not in before, secret

    with sessions.begin() as session:
        assert retention.purge(session, now=_after_retention()).intents_purged == 1
    after = _pg_dump(url)
    assert key in after
    for secret in (*SECRETS, *ciphertexts):
        assert secret not in after, secret
