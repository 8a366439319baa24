"""What the Temporal Web UI shows of a notification run, in one place: the search
attributes operators filter on, the coarse state a phase maps to, and how summaries write
moments and durations. The wording of each summary stays beside the step it describes."""

from datetime import UTC, datetime

from temporalio import workflow
from temporalio.common import SearchAttributeKey

with workflow.unsafe.imports_passed_through():
    from activities.contracts import STATE_ATTRIBUTE

STATE = SearchAttributeKey.for_keyword(STATE_ATTRIBUTE)
CHANNEL = SearchAttributeKey.for_keyword("HeraldChannel")
REGION = SearchAttributeKey.for_keyword("HeraldRegion")
EVENT_TYPE = SearchAttributeKey.for_keyword("HeraldEventType")
OUTCOME = SearchAttributeKey.for_keyword("HeraldOutcome")
"""Set once, when the run ends: delivered, sent, denied, failed, undelivered, unknown,
cancelled or expired (domain.intents)."""
CHANNELS_USED = SearchAttributeKey.for_keyword_list("HeraldChannelsUsed")
"""The channels an attempt was prepared on, set when the run ends (empty when none was)."""
# Phases as operators filter on them in the Web UI (HeraldState).
COARSE_STATE = {
    "starting": "pending",
    "authorizing": "sending",
    "submitting": "sending",
    "observing": "sending",
}


def utc(moment: datetime) -> str:
    """A moment as the summaries write it: UTC, to the second, e.g. 2026-12-06T18:00:00Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"
