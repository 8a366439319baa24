"""An activity whose data key ring cannot read the intent stops it once: a review item, the
metric, and a non-retryable error (activities/key_errors.py), never a retry without end."""

from __future__ import annotations

import base64
import uuid

import pytest
from sqlalchemy import select
from temporalio.exceptions import ApplicationError

from activities.contracts import AuthorizeInput, ErrorType
from activities.ledger import LedgerActivities
from ledger import review_items
from ledger.crypto import FieldCipher
from ledger.metrics import REGISTRY
from ledger.models import Attempt, ReviewItem
from tests.activities import intents

pytestmark = pytest.mark.ledger

MISSING_KID = "k9:" + base64.b64encode(b"9" * 32).decode()
"""A ring without the test key `t1` the intents are written under."""
OTHER_KEY_SAME_KID = "t1:" + base64.b64encode(b"o" * 32).decode()
"""Another key under the id `t1`: its ciphertexts do not open (AES-GCM's InvalidTag)."""


def errors_counted() -> float:
    return REGISTRY.get_sample_value("herald_data_key_errors_total", {"step": "authorize"}) or 0.0


@pytest.mark.parametrize(
    ("ring", "problem"),
    [
        (MISSING_KID, "no data key 't1' in the ring"),
        (OTHER_KEY_SAME_KID, "does not open under the data key"),
    ],
    ids=["kid-missing", "another-key"],
)
async def test_an_authorize_that_cannot_read_the_intent_stops_it_with_a_review_item(  # type: ignore[no-untyped-def]
    committed, cipher, ring, problem
):
    key = f"class-opening:c-9081:m-{uuid.uuid4().hex[:8]}"
    intent_id = intents.record(
        committed, cipher, intents.demo_request(key, "+447400000155"), consent="sms"
    )
    before = errors_counted()
    with pytest.raises(ApplicationError) as stopped:
        await LedgerActivities(committed, FieldCipher(ring)).authorize(
            AuthorizeInput(intent_id, "sms", 1)
        )
    assert stopped.value.type == ErrorType.DATA_KEY_UNREADABLE
    assert stopped.value.non_retryable  # whatever the workflow's retry policy says
    assert problem in stopped.value.message and "+44" not in stopped.value.message
    with committed() as session:
        item = session.execute(
            select(ReviewItem).where(ReviewItem.subject == f"intent:{intent_id}")
        ).scalar_one()
        assert item.kind == review_items.DATA_KEY_UNREADABLE and item.intent_id == intent_id
        assert item.detail is not None and item.detail["step"] == "authorize"
        assert problem in item.detail["problem"]
        # Nothing was prepared: the decision's transaction rolled back with the error.
        assert (
            session.execute(select(Attempt).where(Attempt.intent_id == intent_id)).first() is None
        )
    assert errors_counted() == before + 1
