"""When a fallback plan moves on: what "reached" means per channel, and the rule itself."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.fallback import FAILURES, REACHED, reached, should_fall_back
from domain.states import AttemptState

S = AttemptState
CHANNELS = sorted(REACHED)
# Every result a channel can end with: the attempt states, and the two that are not one.
RESULTS = [s.value for s in AttemptState] + ["denied", "expired"]


def test_an_accepted_email_reaches_the_person() -> None:
    assert reached("email", "sent")
    assert not should_fall_back("email", "sent", on_permanent_failure=True, on_unresolved=True)


def test_an_sms_only_sent_has_not_reached_the_person() -> None:
    assert not reached("sms", "sent")
    assert should_fall_back("sms", "sent", on_permanent_failure=False, on_unresolved=True)


def test_a_delivered_sms_stops_the_plan() -> None:
    assert not should_fall_back("sms", "delivered", on_permanent_failure=True, on_unresolved=True)


@pytest.mark.parametrize("state", ["failed", "undelivered"])
@pytest.mark.parametrize("channel", CHANNELS)
def test_after_a_bounce_or_permanent_failure_the_policy_decides(channel: str, state: str) -> None:
    assert should_fall_back(channel, state, on_permanent_failure=True, on_unresolved=True)
    assert not should_fall_back(channel, state, on_permanent_failure=False, on_unresolved=True)


@pytest.mark.parametrize("state", ["unknown", "denied"])
@pytest.mark.parametrize("channel", CHANNELS)
def test_an_unresolved_or_denied_channel_is_followed_by_the_next(channel: str, state: str) -> None:
    assert should_fall_back(channel, state, on_permanent_failure=False, on_unresolved=True)


def test_an_unknown_channel_raises() -> None:
    with pytest.raises(ValueError, match="unknown channel"):
        reached("fax", "delivered")


@given(st.sampled_from(CHANNELS), st.sampled_from(RESULTS), st.booleans())
def test_a_channel_that_reached_the_person_is_never_followed(
    channel: str, state: str, on_permanent_failure: bool
) -> None:
    if reached(channel, state):
        assert not should_fall_back(
            channel, state, on_permanent_failure=on_permanent_failure, on_unresolved=True
        )


@given(st.sampled_from(CHANNELS), st.sampled_from(RESULTS), st.booleans())
def test_the_policy_flag_matters_only_after_a_failure(
    channel: str, state: str, on_permanent_failure: bool
) -> None:
    with_flag = should_fall_back(
        channel, state, on_permanent_failure=on_permanent_failure, on_unresolved=True
    )
    without = should_fall_back(
        channel, state, on_permanent_failure=not on_permanent_failure, on_unresolved=True
    )
    assert (with_flag != without) == (state in FAILURES)


@given(st.sampled_from(RESULTS))
def test_whatever_reaches_over_sms_reaches_over_email(state: str) -> None:
    # Email's evidence ends earlier (no receipts), so its "reached" is the wider set.
    if reached("sms", state):
        assert reached("email", state)


@given(st.sampled_from(CHANNELS), st.sampled_from(RESULTS))
def test_a_failure_never_counts_as_reached(channel: str, state: str) -> None:
    if state in FAILURES or state in ("unknown", "denied", "expired", "prepared"):
        assert not reached(channel, state)


@pytest.mark.parametrize("channel", CHANNELS)
def test_an_unknown_channel_ends_the_plan_when_the_policy_has_no_fallback_window(
    channel: str,
) -> None:
    # It may have reached the person; a policy without a window sends no second message.
    assert not should_fall_back(channel, "unknown", on_permanent_failure=True, on_unresolved=False)
    # A denied channel sent nothing: the next one is still authorized on its own.
    assert should_fall_back(channel, "denied", on_permanent_failure=False, on_unresolved=False)


@given(st.sampled_from(CHANNELS), st.sampled_from(RESULTS), st.booleans(), st.booleans())
def test_the_window_flag_matters_only_for_unknown(
    channel: str, state: str, on_permanent_failure: bool, on_unresolved: bool
) -> None:
    def rule(unresolved: bool) -> bool:
        return should_fall_back(
            channel, state, on_permanent_failure=on_permanent_failure, on_unresolved=unresolved
        )

    assert (rule(on_unresolved) != rule(not on_unresolved)) == (state == "unknown")
