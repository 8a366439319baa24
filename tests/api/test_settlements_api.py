"""The settlement routes: the active policy's rules, and a settlement that goes through
the intent's workflow (here none runs, so it is refused with the reason and recorded)."""

from __future__ import annotations

import pytest

from tests.api.conftest import BEARER, submitted_attempt
from tests.api.test_principals_api import tokens  # noqa: F401 - the fixture


async def test_the_settlement_rules_are_the_active_policys(http):
    answer = await http.get("/v1/settlement-rules", headers=BEARER)
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    names = {r["name"] for r in doc["rules"]}
    assert "carrier-confirmed-not-delivered" in names and doc["window_seconds"] > 0
    email = (await http.get("/v1/settlement-rules?channel=email", headers=BEARER)).json()
    assert email["rules"] and all(r["evidence"] != "provider_lookup" for r in email["rules"])


async def test_a_settlement_when_the_workflow_has_finished_is_409_and_recorded(
    http, committed, cipher
):
    sent = submitted_attempt(committed, cipher)
    body = {"rule": "carrier-ticket-not-delivered", "reason": "ticket", "reference": "T-1"}
    answer = await http.post(f"/v1/intents/{sent.intent_id}/settle", json=body, headers=BEARER)
    assert answer.status_code == 409, answer.text
    refused = answer.json()
    assert refused["accepted"] is False and "settlement window is closed" in refused["message"]
    doc = (await http.get(f"/v1/intents/{sent.intent_id}", headers=BEARER)).json()
    [action] = doc["operator_actions"]
    assert (action["action"], action["outcome"]) == ("settle", "refused")
    assert action["operator"] == refused["operator"]


@pytest.mark.parametrize(
    ("action", "body", "says"),
    [
        ("settle", {"rule": "carrier-ticket-not-delivered", "reason": "r"}, "window is closed"),
        ("approve-resend", {"reason": "r"}, "record a new intent instead"),
        ("cancel", {"reason": "r"}, "already finished"),
    ],
)
async def test_an_action_racing_the_workflows_end_answers_as_for_a_finished_one(
    http, committed, cipher, temporal, action, body, says
):
    # Running when looked at, closed when the update reaches it ("already completed").
    temporal.closes_at_update = True
    sent = submitted_attempt(committed, cipher)
    answer = await http.post(f"/v1/intents/{sent.intent_id}/{action}", json=body, headers=BEARER)
    assert answer.status_code in (200, 409), answer.text
    assert says in answer.json()["message"]
    assert sent.workflow_id in temporal.closed  # the update was asked: the race happened


async def test_a_viewer_and_an_app_cannot_settle_or_look_up(http, tokens):  # noqa: F811
    body = {"rule": "carrier-ticket-not-delivered", "reason": "r", "reference": "T"}
    for credential in ("viewer", "app"):
        for path, payload in (("settle", body), ("lookup", {"channel": "sms"})):
            answer = await http.post(
                f"/v1/intents/k:1/{path}", json=payload, headers=tokens.header(credential)
            )
            assert answer.status_code == 403, (credential, path, answer.text)
            assert answer.json()["needed_role"] == "operator"


async def test_an_unknown_intent_is_404(http):
    answer = await http.post(
        "/v1/intents/no-such:k/settle", json={"rule": "x", "reason": "r"}, headers=BEARER
    )
    assert answer.status_code == 404
