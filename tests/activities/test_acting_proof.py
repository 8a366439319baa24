"""The workflow's ledger activity records an operator action under the principal a Herald
surface proved, and a request without that proof as an unauthenticated Temporal caller
with the identity it claimed (domain.proof)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import select

from activities.contracts import OperatorActionInput
from activities.ledger import LedgerActivities
from domain import proof
from ledger import timeline
from ledger.models import OperatorAction
from tests.activities import intents

pytestmark = pytest.mark.ledger


def recorded(committed, cipher) -> str:  # type: ignore[no-untyped-def]
    key = f"acting-proof:{uuid.uuid4().hex[:8]}"
    return intents.record(committed, cipher, intents.demo_request(key, "+447400000124"))


def actions(committed, intent_id: str) -> list[OperatorAction]:  # type: ignore[no-untyped-def]
    with committed() as session:
        return list(
            session.execute(
                select(OperatorAction).where(OperatorAction.intent_id == intent_id)
            ).scalars()
        )


async def test_a_proven_cancel_names_its_principal(committed, cipher):  # type: ignore[no-untyped-def]
    intent_id = recorded(committed, cipher)
    claim = proof.ActingClaim("cancel", intent_id, "ops-1", "operator", "filled")
    made = proof.sign(cipher.action_key, claim, now=datetime.now(UTC))
    await LedgerActivities(committed, cipher).record_operator_action(
        OperatorActionInput(
            intent_id, "cancel", "ops-1", "filled", "accepted", operator_role="operator", proof=made
        )
    )
    (action,) = actions(committed, intent_id)
    assert (action.operator, action.operator_role) == ("ops-1", "operator")


async def test_a_cancel_through_temporal_claiming_root_is_not_recorded_as_root(committed, cipher):  # type: ignore[no-untyped-def]
    # What `temporal workflow update execute --name cancel --input '{"operator":"root"}'`
    # hands the activity: the operator it claimed, no proof.
    intent_id = recorded(committed, cipher)
    await LedgerActivities(committed, cipher).record_operator_action(
        OperatorActionInput(intent_id, "cancel", "root", "", "accepted", operator_role="admin")
    )
    (action,) = actions(committed, intent_id)
    assert action.operator == proof.UNAUTHENTICATED and action.operator_role is None
    assert action.detail["claimed_operator"] == "root"
    row = {"operator": action.operator, "operator_role": None, "detail": action.detail}
    shown = timeline.acting_operator(row)
    assert shown == "an unauthenticated Temporal caller (claimed 'root')"
    assert "by root" not in shown and "Cancelled by root" not in shown


async def test_a_proof_for_another_principal_or_reason_does_not_hold(committed, cipher):  # type: ignore[no-untyped-def]
    intent_id = recorded(committed, cipher)
    claim = proof.ActingClaim("cancel", intent_id, "ops-1", "operator", "filled")
    made = proof.sign(cipher.action_key, claim, now=datetime.now(UTC))
    await LedgerActivities(committed, cipher).record_operator_action(
        OperatorActionInput(
            intent_id, "cancel", "root", "filled", "accepted", operator_role="admin", proof=made
        )
    )
    (action,) = actions(committed, intent_id)
    assert action.operator == proof.UNAUTHENTICATED
    assert action.detail["proof"] == "invalid"


async def test_a_settlement_signed_by_the_client_is_recorded_under_its_principal(  # type: ignore[no-untyped-def]
    committed, cipher
):
    from datetime import timedelta

    from activities.contracts import SettlementInput
    from domain.principals import Principal, Role
    from domain.states import AttemptState
    from ledger import observations
    from ledger import repository as repo
    from ledger.observations import ObservationFacts
    from starter.client import HeraldClient

    key = f"acting-proof:{uuid.uuid4().hex[:8]}"
    request = intents.demo_request(key, "+447400000125")
    token = await intents.prepared(committed, cipher, request, "sms")
    now = datetime.now(UTC)
    with committed.begin() as session:
        observations.record_observation(
            session,
            ObservationFacts("horizon", "unknown", AttemptState.UNKNOWN, now, f"h:{token}"),
            token=token,
        )
        intent_id = repo.get_intent(session, key).id
    by = Principal("ops-2", Role.OPERATOR)
    rule, reason, reference = "carrier-ticket-not-delivered", "ticket says lost", "T-5"
    # Exactly what HeraldClient.settle attaches to the workflow's `settle` update.
    made = HeraldClient(None, committed, cipher)._prove(  # type: ignore[arg-type]
        "settle", intent_id, by, reason, f"sms|{rule}|{reference}"
    )
    recorded = await LedgerActivities(committed, cipher).record_settlement(
        SettlementInput(
            intent_id,
            token,
            rule,
            reason,
            reference,
            "ops-2",
            "operator",
            made,
            now + timedelta(hours=1),
        )  # fmt: skip
    )
    assert recorded.refused == "" and recorded.operator == "ops-2"
    (action,) = [a for a in actions(committed, intent_id) if a.action == "settle"]
    assert (action.operator, action.operator_role, action.outcome) == (
        "ops-2",
        "operator",
        "accepted",
    )


async def test_a_bulk_settle_whose_count_changed_settles_nothing(committed, cipher):  # type: ignore[no-untyped-def]
    from domain.principals import Principal, Role
    from starter.client import HeraldClient

    client = HeraldClient(None, committed, cipher)  # type: ignore[arg-type]
    done = await client.settle_set(
        rule="carrier-ticket-not-delivered",
        reason="batch",
        reference="T-1",
        by=Principal("ops-3", Role.OPERATOR),
        confirm=10**6,
        event_type="no-such-event",
    )
    assert done.members == 0 and done.settled == []
    assert done.refused_all.startswith("the set has 0 member(s) now, not 1000000")


async def test_a_settlement_through_temporal_without_proof_is_recorded_as_unauthenticated(  # type: ignore[no-untyped-def]
    committed, cipher
):
    from datetime import timedelta

    from activities.contracts import SettlementInput
    from domain.states import AttemptState
    from ledger import observations
    from ledger import repository as repo
    from ledger.observations import ObservationFacts

    key = f"acting-proof:{uuid.uuid4().hex[:8]}"
    token = await intents.prepared(
        committed, cipher, intents.demo_request(key, "+447400000126"), "sms"
    )
    now = datetime.now(UTC)
    with committed.begin() as session:
        observations.record_observation(
            session,
            ObservationFacts("horizon", "unknown", AttemptState.UNKNOWN, now, f"h:{token}"),
            token=token,
        )
        intent_id = repo.get_intent(session, key).id
    # `temporal workflow update execute --name settle --input '{"operator": "root", ...}'`
    recorded = await LedgerActivities(committed, cipher).record_settlement(
        SettlementInput(
            intent_id,
            token,
            "carrier-ticket-not-delivered",
            "lost",
            "T-9",
            "root",
            "admin",
            "",
            now + timedelta(hours=1),
        )  # fmt: skip
    )
    assert recorded.refused == "" and recorded.operator == proof.UNAUTHENTICATED
    (action,) = [a for a in actions(committed, intent_id) if a.action == "settle"]
    assert action.operator == proof.UNAUTHENTICATED and action.operator_role is None
    assert action.detail["claimed_operator"] == "root" and action.detail["proof"] == "none"


async def test_an_action_is_recorded_at_the_time_the_workflow_took_it(committed, cipher):  # type: ignore[no-untyped-def]
    intent_id = recorded(committed, cipher)
    taken = datetime(2026, 12, 7, 14, 58, 14, 250_000, tzinfo=UTC)
    await LedgerActivities(committed, cipher).record_operator_action(
        OperatorActionInput(
            intent_id, "lookup", "ops-1", "", "accepted", requested_at=taken.isoformat()
        )
    )
    (action,) = actions(committed, intent_id)
    assert action.at == taken
