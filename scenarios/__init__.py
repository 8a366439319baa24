"""The seed stories as runnable scenarios (`herald demo SCENARIO`, tests/e2e/test_scenarios.py).

Each scenario drives the running stack through public interfaces only (the Herald client,
the ingress, the carrier simulator's scripted faults and `/_sim` endpoints, the SMTP
sink, the ledger timeline), prints its timeline, and raises :class:`ScenarioFailed` when
the outcome differs from its story. docs/scenarios.md says what each one proves.
"""

from __future__ import annotations

from scenarios import (
    ambiguous_settled,
    class_opening,
    email_events,
    itinerary_change,
    order_created,
    provider_outage,
    scheduled_alert,
    session_report,
    sms,
    template_rollout,
)
from scenarios.base import DemoContext, Scenario, ScenarioFailed, expect

SCENARIOS: dict[str, Scenario] = {
    "sms": sms.run,
    "class-opening": class_opening.run,
    "order-created": order_created.run,
    "scheduled-alert": scheduled_alert.run,
    "itinerary-change": itinerary_change.run,
    "session-report": session_report.run,
    "provider-outage": provider_outage.run,
    "email-events": email_events.run,
    "ambiguous-settled": ambiguous_settled.run,
    "template-rollout": template_rollout.run,
}
"""In the order `herald demo` (no argument) runs them."""

__all__ = ["SCENARIOS", "DemoContext", "Scenario", "ScenarioFailed", "expect"]
