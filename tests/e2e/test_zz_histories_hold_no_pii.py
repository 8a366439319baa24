"""No phone number, email address or message body in any workflow history or search
attribute on the stack: the intents this test sends itself (so it proves something in a
parallel run too, where its worker process may have run no other end-to-end test) and,
named to run last, every run the other tests left on the same stack."""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.e2e.test_end_to_end import PHONE, notify

pytestmark = pytest.mark.e2e

# Shapes of what the tests and scenarios send: E.164 numbers, addresses, body phrases.
FORBIDDEN = [
    re.compile(r"\+\d{10,14}"),
    re.compile(r"\b447400\d{6}\b"),
    re.compile(r"[\w.+-]+@[\w-]+\.example\b"),
    re.compile(r"seat opened|Herald demo \d|order \w+ is confirmed", re.IGNORECASE),
]


async def test_no_workflow_history_on_the_stack_holds_pii(stack):
    client = stack.client.temporal
    own = []
    for _ in range(3):
        _, handle = await notify(stack, PHONE)
        own.append(handle)
    await asyncio.wait_for(asyncio.gather(*(h.result() for h in own)), 60)
    seen = set()
    checked = 0
    async for execution in client.list_workflows():
        history = await client.get_workflow_handle(
            execution.id, run_id=execution.run_id
        ).fetch_history()
        text = history.to_json()
        for pattern in FORBIDDEN:
            assert not pattern.search(text), (execution.id, pattern.pattern)
        attributes = str(execution.typed_search_attributes)
        assert not any(p.search(attributes) for p in FORBIDDEN)
        seen.add(execution.id)
        checked += 1
    assert {h.id for h in own} <= seen
