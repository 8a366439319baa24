"""The policy versions a story activates for itself (scenarios/base.py's
`demo_policy_variant`): the demo policy with the numbers the story names changed, and
nothing else. Pure: no stack, no database."""

from __future__ import annotations

import dataclasses

import pytest

import policies
import templates
from domain.policy import load_policy
from domain.templates import parse_catalog
from scenarios import template_rollout
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


def test_the_template_review_version_is_the_demo_policy_with_a_review_of_the_clinics_key() -> None:
    demo = load_policy(policies.load_packaged("demo"))
    reviewed = load_policy(template_rollout.review_policy())
    assert reviewed.version == template_rollout.REVIEWED != demo.version
    assert reviewed.review.covers_template(template_rollout.KEY)
    assert not demo.review.covers_template(template_rollout.KEY)
    # Nothing else differs (the document's hash does: it is another document).
    same = {"version", "description", "review", "source_sha256"}
    assert dataclasses.replace(reviewed, **{f: getattr(demo, f) for f in same}) == demo


def test_the_rollout_story_imports_a_template_herald_does_not_package() -> None:
    assert template_rollout.KEY not in {t.key for t in templates.load_packaged()}
    for text in (template_rollout.EARLIER, template_rollout.NEW):
        parsed = parse_catalog(template_rollout.catalog(text, 7).text)
        assert {(t.key, t.version, t.channel) for t in parsed} == {
            (template_rollout.KEY, 7, "sms"),
            (template_rollout.KEY, 7, "email"),
        }
        assert all(t.schema for t in parsed)  # declared variables, not inferred
