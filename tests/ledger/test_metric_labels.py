"""Seed-metric labels: bounded values only, and what preparing an attempt means."""

from __future__ import annotations

import pytest

from ledger.metrics import attempt_role, label


@pytest.mark.parametrize(
    "raw,shown",
    [
        ("sms", "sms"),
        ("default", "default"),
        ("itinerary-change", "itinerary-change"),
        (3, "3"),
        (None, "none"),
        ("+447400000100", "other"),  # a phone number never becomes a label
        ("447400000100", "other"),
        ("someone@example.com", "other"),
        ("a region with spaces", "other"),
        ("x" * 41, "other"),
    ],
)
def test_a_label_value_is_an_identifier_or_other(raw: object, shown: str) -> None:
    assert label(raw) == shown


def test_a_later_channel_of_a_fallback_plan_is_a_fallback() -> None:
    plan = {"mode": "fallback", "channels": ["sms", "email"]}
    assert attempt_role(plan, "sms", 1) == "first"
    assert attempt_role(plan, "email", 1) == "fallback"
    assert attempt_role(plan, "sms", 2) == "resend"


def test_every_channel_of_an_all_channels_plan_is_a_first_attempt() -> None:
    plan = {"mode": "all", "channels": ["email", "sms"]}
    assert attempt_role(plan, "email", 1) == attempt_role(plan, "sms", 1) == "first"
    assert attempt_role(None, "sms", 1) == "first"
