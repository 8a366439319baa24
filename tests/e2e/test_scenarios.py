"""The seed stories as end-to-end tests: each `herald demo` scenario on the session stack
(Temporal dev server, embedded Postgres, the worker in its own process, the ingress, the
carrier simulator and the SMTP sink; policy `demo`). A scenario raises ScenarioFailed,
with the reason, when the outcome differs from its story."""

from __future__ import annotations

import pytest

from scenarios import SCENARIOS, DemoContext
from tests.conftest import assert_no_python_repr, long_story

pytestmark = pytest.mark.e2e


@pytest.fixture
def demo(stack):  # type: ignore[no-untyped-def]
    """The scenario's context; what it printed is read afterwards as a person would."""
    printed: list[str] = []
    yield DemoContext(
        stack.client,
        stack.addresses,
        stack.cfg.data_path,
        sink=stack.sink,
        retention_days=stack.cfg.pii_retention_days,
        artifact_store=stack.cfg.artifact_store,
        out=printed.append,
    )
    assert printed  # the story said something
    assert_no_python_repr("\n".join(printed))


async def test_the_happy_sms_path_ends_delivered(demo):
    await SCENARIOS["sms"](demo)


async def test_a_lost_answer_ends_delivered_once_and_a_later_cancel_recalls_nothing(demo):
    await SCENARIOS["class-opening"](demo)


async def test_an_order_alert_goes_by_both_channels_and_survives_rollback_and_retention(demo):
    await SCENARIOS["order-created"](demo)


async def test_a_scheduled_alert_cancel_sends_nothing_before_send_at_and_stops_polls_after(demo):
    await SCENARIOS["scheduled-alert"](demo)


async def test_itinerary_change_falls_back_honours_opt_outs_and_skips_the_wait_on_bad_numbers(demo):
    await SCENARIOS["itinerary-change"](demo)


async def test_a_session_report_is_emailed_as_a_verified_attachment_and_never_enters_sms(demo):
    await SCENARIOS["session-report"](demo)


@long_story
async def test_a_provider_outage_fails_over_once_per_message_and_the_circuit_recovers(demo):
    await SCENARIOS["provider-outage"](demo)


async def test_email_events_deliver_suppress_a_bounce_and_a_complaint_and_replay_changes_nothing(
    demo,
):
    await SCENARIOS["email-events"](demo)


@long_story
async def test_an_ambiguous_send_is_settled_by_a_person_and_only_then_resent(demo):
    await SCENARIOS["ambiguous-settled"](demo)


async def test_an_adopters_template_version_is_approved_by_another_sent_and_rolled_back(demo):
    await SCENARIOS["template-rollout"](demo)
