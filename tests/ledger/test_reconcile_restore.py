"""After a restore, the ledger and Temporal disagree, and reconciliation files each
difference once: an open intent whose started workflow Temporal does not have (Temporal
restored older than the ledger), and a running workflow whose intent the ledger does not
have (the ledger restored older than Temporal)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, select, update
from sqlalchemy.orm import Session, sessionmaker

from domain.keys import workflow_id
from ledger import migrate, reconcile, review_items
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.models import Intent, OperatorAction, ReviewItem
from ledger.templates import seed_packaged
from tests.conftest import fresh_database, key_id
from tests.ledger.conftest import fields

pytestmark = pytest.mark.ledger

NOW = datetime.now(UTC)
HOUR_AGO = NOW - timedelta(hours=1)


@pytest.fixture
def sessions(pg_url: str) -> Iterator[sessionmaker[Session]]:
    """A fresh database of our own: reconciliation looks at every open intent in it."""
    url = fresh_database(pg_url, "herald_restore")
    migrate.upgrade(url)
    engine = create_engine(url)
    made = sessionmaker(engine, expire_on_commit=False)
    with made.begin() as session:
        seed_packaged(session, "default")
    yield made
    engine.dispose()


def _open_intent(sessions: sessionmaker[Session], cipher: FieldCipher, *, started: bool) -> str:
    """A pending intent recorded an hour ago; `started`: the relay marked its start."""
    with sessions.begin() as s:
        recorded = repo.record_intent(s, fields(s, cipher, f"restore:{key_id()}"))
        s.execute(update(Intent).where(Intent.id == recorded.intent_id).values(created_at=HOUR_AGO))
        if started:
            repo.mark_outbox_started(s, [recorded.intent_id], HOUR_AGO)
        return recorded.workflow_id


async def test_reconcile_files_each_difference_a_restore_leaves_once(
    sessions: sessionmaker[Session], cipher: FieldCipher
) -> None:
    running_here = _open_intent(sessions, cipher, started=True)
    lost_in_temporal = _open_intent(sessions, cipher, started=True)
    relay_will_start = _open_intent(sessions, cipher, started=False)
    lost_in_ledger = workflow_id(f"restore:{key_id()}")
    just_started = workflow_id(f"restore:{key_id()}")
    temporal = {running_here: "RUNNING"}  # what Temporal holds after the restore

    async def describe(wid: str) -> reconcile.WorkflowStatus | None:
        return (temporal[wid], None) if wid in temporal else None

    async def running(limit: int) -> list[tuple[str, datetime | None]]:
        # A workflow started a moment ago may belong to an intent just committed: graced.
        return [(running_here, HOUR_AGO), (lost_in_ledger, HOUR_AGO), (just_started, NOW)]

    rows = await reconcile.reconcile_workflows(sessions, describe, now=NOW, running=running)
    found = sorted((row.kind, row.subject) for row in rows)
    with sessions() as s:
        missing_id = s.scalar(select(Intent.id).where(Intent.workflow_id == lost_in_temporal))
        relay_id = s.scalar(select(Intent.id).where(Intent.workflow_id == relay_will_start))
    assert found == [
        (review_items.INTENT_WITHOUT_WORKFLOW, f"intent:{missing_id}"),
        (review_items.WORKFLOW_WITHOUT_INTENT, f"workflow:{lost_in_ledger}"),
    ]

    again = await reconcile.reconcile_workflows(sessions, describe, now=NOW, running=running)
    assert [row.kind for row in again] == [review_items.WORKFLOW_WITHOUT_INTENT]
    with sessions() as s:
        filed = sorted(tuple(r) for r in s.execute(select(ReviewItem.kind, ReviewItem.subject)))
        marks = s.execute(
            select(OperatorAction.intent_id, OperatorAction.action, OperatorAction.operator)
        )
        assert [tuple(m) for m in marks] == [(missing_id, reconcile.WORKFLOW_MISSING, "reconciler")]
    assert filed == found  # each once
    assert relay_id not in {subject.partition(":")[2] for _, subject in filed}
