"""The fault tier: kill, restart and flood the real parts, then check the invariants against
the carrier simulator's own counts. Bounded in count and time; loopback only."""

from __future__ import annotations

import asyncio

import pytest

from domain.states import RANK, TERMINAL, AttemptState
from ledger import reconcile
from tests.faults.conftest import Faults

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

NORMAL = "+447400001{:03d}"
TIMEOUT = "+447400000001"  # accepted, then the answer is withheld


def assert_invariants(faults: Faults, key: str, *, expect: str = "delivered") -> dict:  # type: ignore[type-arg]
    """No state regressed, nothing lost, the outcome is terminal or under review."""
    doc = faults.timeline(key)
    attempt = doc["attempts"][0]
    applied = [
        AttemptState(o["normalized_status"])
        for o in doc["observations"]
        if o["applied"] and o["normalized_status"]
    ]
    known = [s for s in applied if s != AttemptState.UNKNOWN]
    assert all(RANK[a] <= RANK[b] for a, b in zip(known, known[1:], strict=False)), applied
    state = AttemptState(attempt["state"])
    if state not in TERMINAL:
        with faults.client.sessions() as session:
            kinds = {r.subject for r in reconcile.find(session, now=_far_future())}
        assert f"attempt:{attempt['token']}" in kinds or any(attempt["token"] in k for k in kinds)
    else:
        assert attempt["state"] == expect, doc
    return doc


def _far_future():  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime, timedelta

    return datetime.now(UTC) + timedelta(days=1)


async def test_kill_9_of_the_worker_mid_submit_still_sends_exactly_once(faults):
    ref = await faults.notify(TIMEOUT)
    token = faults.token(ref.business_key)
    await faults.until_submitted(token)
    # The provider has it; the worker dies before it could record the answer.
    await asyncio.to_thread(faults.restart_worker)
    result = await asyncio.wait_for(faults.handle(ref.workflow_id).result(), 120)
    assert result.outcome == "delivered"
    assert await faults.submissions(token) == 1
    assert_invariants(faults, ref.business_key)


@pytest.mark.parametrize(
    ("part", "phone"), [("temporal", NORMAL.format(1)), ("postgres", NORMAL.format(2))]
)
async def test_a_restart_mid_workflow_loses_nothing(faults, part, phone):
    """The Temporal dev server (SQLite kept) or the ledger Postgres restarts after the
    submission, while the receipt is still on its way."""
    await faults.script(phone, "delayed_receipt")
    ref = await faults.notify(phone)
    token = faults.token(ref.business_key)
    await faults.until_submitted(token)
    server = getattr(faults.stack, part)
    assert server is not None
    await asyncio.to_thread(server.restart)
    result = await asyncio.wait_for(faults.handle(ref.workflow_id).result(), 120)
    assert result.outcome == "delivered"
    assert await faults.submissions(token) == 1
    doc = assert_invariants(faults, ref.business_key)
    assert doc["decisions"] and doc["attempts"][0]["remote_id"]


async def test_a_429_storm_is_ridden_out_with_one_submission_each(faults):
    phones = [NORMAL.format(10 + i) for i in range(8)]
    for phone in phones:
        await faults.script(phone, "rate_limit", count=3)
    refs = [await faults.notify(phone) for phone in phones]
    results = await asyncio.wait_for(
        asyncio.gather(*(faults.handle(r.workflow_id).result() for r in refs)), 180
    )
    assert [r.outcome for r in results] == ["delivered"] * len(refs)
    for ref in refs:
        token = faults.token(ref.business_key)
        assert await faults.submissions(token) == 1
        assert await faults.requests(token) >= 4  # three 429s were really answered
        assert_invariants(faults, ref.business_key)


async def test_ten_duplicate_receipts_change_the_state_once(faults):
    await faults.script(NORMAL.format(30), "duplicate_receipts", count=10)
    ref = await faults.notify(NORMAL.format(30))
    result = await asyncio.wait_for(faults.handle(ref.workflow_id).result(), 60)
    assert result.outcome == "delivered"
    token = faults.token(ref.business_key)

    async def all_receipts_in() -> bool:
        webhook = [
            o for o in faults.timeline(ref.business_key)["observations"] if o["source"] == "webhook"
        ]
        return len(webhook) >= 2

    await faults.until(all_receipts_in)
    doc = assert_invariants(faults, ref.business_key)
    delivered = [
        o for o in doc["observations"] if o["normalized_status"] == "delivered" and o["applied"]
    ]
    assert len(delivered) == 1
    assert await faults.submissions(token) == 1


async def test_out_of_order_receipts_never_move_state_backward(faults):
    await faults.script(NORMAL.format(31), "out_of_order")
    ref = await faults.notify(NORMAL.format(31))
    result = await asyncio.wait_for(faults.handle(ref.workflow_id).result(), 60)
    assert result.outcome == "delivered"

    async def late_sent_arrived() -> bool:
        return any(
            o["raw_status"] == "sent" and o["source"] == "webhook"
            for o in faults.timeline(ref.business_key)["observations"]
        )

    await faults.until(late_sent_arrived)
    doc = assert_invariants(faults, ref.business_key)
    late = [
        o for o in doc["observations"] if o["raw_status"] == "sent" and o["source"] == "webhook"
    ]
    assert late and not any(o["applied"] for o in late)
    assert doc["attempts"][0]["state"] == "delivered"


async def test_fifty_concurrent_starts_of_one_business_key_make_one_intent_and_one_send(faults):
    key = "demo:f-fifty-" + __import__("uuid").uuid4().hex[:6]
    refs = await asyncio.gather(*(faults.notify(NORMAL.format(40), key=key) for _ in range(50)))
    assert len({r.intent_id for r in refs}) == 1
    assert sum(1 for r in refs if not r.existed) == 1
    result = await asyncio.wait_for(faults.handle(refs[0].workflow_id).result(), 60)
    assert result.outcome == "delivered"
    assert await faults.submissions(faults.token(key)) == 1
    runs = [
        w
        async for w in faults.client.temporal.list_workflows(
            f"WorkflowId = '{refs[0].workflow_id}'"
        )
    ]
    assert len(runs) == 1
