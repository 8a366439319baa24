"""The ordinary SMS receipt is served by `api.ingress.fast_receipts` (no routing or dependency
stack), with the same handler and the same answers; anything unusual goes on to the app's
route, its body limit and its unknown-parameter rule."""

from __future__ import annotations

from typing import Any

import pytest

import api.ingress.fast_receipts as fast
from tests.api.conftest import attempt_state, post_signed, submitted_attempt
from tests.api.test_receipts import path_for, receipt

pytestmark = pytest.mark.ledger


@pytest.fixture
def served_fast(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The tokens of the receipts the fast path handled (the route calls the handler
    through api.ingress.twilio, so it is not counted)."""
    tokens: list[str | None] = []
    original = fast.receive_sms_receipt

    async def spy(request: Any, ingress: Any, token: str | None) -> Any:
        tokens.append(token)
        return await original(request, ingress, token)

    monkeypatch.setattr(fast, "receive_sms_receipt", spy)
    return tokens


async def test_an_ordinary_receipt_is_served_by_the_fast_path(http, committed, cipher, served_fast):
    sent = submitted_attempt(committed, cipher)
    answer = await post_signed(http, path_for(sent.token), receipt(sent.remote_id, "delivered"))
    assert answer.status_code == 204
    assert attempt_state(committed, sent.attempt_id) == "delivered"
    assert served_fast == [sent.token]


async def test_its_refusals_are_the_apps_json_answers(http, served_fast):
    unsigned = await http.post(
        "/v1/receipts/sms",
        content="MessageSid=SM1&MessageStatus=delivered",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert unsigned.status_code == 403
    assert unsigned.json() == {"detail": "missing X-Twilio-Signature"}
    not_a_form = await http.post(
        "/v1/receipts/sms", content="{}", headers={"Content-Type": "application/json"}
    )
    assert not_a_form.status_code == 400 and "Content-Type must be" in not_a_form.json()["detail"]
    assert len(served_fast) == 2


async def test_an_unusual_query_goes_on_to_the_route(http, committed, cipher, served_fast):
    sent = submitted_attempt(committed, cipher)
    surprise = await post_signed(
        http, path_for(sent.token) + "&surprise=1", receipt(sent.remote_id, "delivered")
    )
    assert surprise.status_code == 422
    assert surprise.json()["detail"][0]["type"] == "unknown_parameter"
    long_token = await post_signed(http, path_for("t" * 241), receipt(sent.remote_id, "delivered"))
    assert long_token.status_code == 422
    assert served_fast == []
    assert attempt_state(committed, sent.attempt_id) == "submitted"


async def test_a_token_with_a_control_character_is_refused_by_the_route(
    http, committed, cipher, served_fast
):
    # A NUL would reach Postgres on the fast path (a DataError, a 500): the route says why.
    sent = submitted_attempt(committed, cipher)
    answer = await post_signed(http, path_for(sent.token + "\x00"), receipt(sent.remote_id, "sent"))
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["type"] == "control_character"
    assert served_fast == [] and attempt_state(committed, sent.attempt_id) == "submitted"
