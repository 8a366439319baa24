"""The authorize activity makes an attempt's token from the identity its intent's
workflow id was made from: a new intent's carries its namespace, one recorded before
namespaces keeps its bare key (docs/api.md, "How keys are scoped")."""

from __future__ import annotations

import uuid

from sqlalchemy import update

from activities.contracts import AuthorizeInput
from activities.ledger import LedgerActivities
from domain import keys
from ledger.models import Intent
from tests.activities import intents


def _key() -> str:
    return f"order-created:k-{uuid.uuid4().hex[:10]}"


async def test_a_new_intents_attempt_token_carries_its_namespace(committed, cipher) -> None:
    key = _key()
    token = await intents.prepared(
        committed, cipher, intents.demo_request(key, "+447400512011"), "sms"
    )
    assert token == f"{keys.DEFAULT_NAMESPACE}~{key}:sms:1"


async def test_an_intent_recorded_before_namespaces_keeps_bare_key_tokens(
    committed, cipher
) -> None:
    key = _key()
    request = intents.demo_request(key, "+447400512012")
    intent_id = intents.record(committed, cipher, request, consent="sms")
    with committed.begin() as session:
        # What migration 0019 leaves: the workflow id of the bare key.
        session.execute(
            update(Intent).where(Intent.id == intent_id).values(workflow_id=keys.workflow_id(key))
        )
    result = await LedgerActivities(committed, cipher).authorize(
        AuthorizeInput(intent_id, "sms", 1)
    )
    assert result.outcome == "allow", result
    assert result.attempt_token == f"{key}:sms:1"
