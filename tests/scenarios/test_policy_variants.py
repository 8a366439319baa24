"""The policy versions a story activates for itself (scenarios/base.py's
`demo_policy_variant`): the demo policy with the numbers the story names changed, and
nothing else. Pure: no stack, no database."""

from __future__ import annotations

import dataclasses

import pytest

import policies
from domain.policy import load_policy
from scenarios.ambiguous_settled import HORIZON_SECONDS, SHORT_HORIZON, short_horizon_policy
from scenarios.base import demo_policy_variant


def test_the_short_horizon_version_is_the_demo_policy_with_its_horizon_alone_changed() -> None:
    demo = load_policy(policies.load_packaged("demo"))
    short = load_policy(short_horizon_policy())
    assert short.version == SHORT_HORIZON != demo.version
    assert short.rules == demo.rules and short.settlement == demo.settlement
    assert short.fallbacks.keys() == demo.fallbacks.keys()
    for where, rule in demo.fallbacks.items():
        assert short.fallbacks[where].sms_poll_horizon_seconds == HORIZON_SECONDS < 60
        assert short.fallbacks[where] == dataclasses.replace(
            rule, sms_poll_horizon_seconds=HORIZON_SECONDS
        )


def test_a_line_the_demo_policy_no_longer_has_is_refused_naming_it() -> None:
    # Replaced silently, the variant would be the demo policy under another name.
    with pytest.raises(ValueError, match="'sms_poll_horizon_seconds = 61'"):
        demo_policy_variant(
            "x-1", "x", replace={"sms_poll_horizon_seconds = 61": "sms_poll_horizon_seconds = 5"}
        )
