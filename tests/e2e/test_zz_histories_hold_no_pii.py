"""After every end-to-end test and scenario has run on the stack: no phone number, email
address or message body in any workflow history or search attribute. Named to run last."""

from __future__ import annotations

import re

import pytest

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
        checked += 1
    assert checked >= 3
