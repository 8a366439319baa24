"""What the Temporal Web UI shows of a notification run, in one place: the search
attributes operators filter on, the coarse state a phase maps to, and how summaries write
moments and durations. The wording of each summary stays beside the step it describes."""

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate

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


class Phase(StrEnum):
    """Where a run is in the life of its intent; the projection's `phase` says it, with the
    channel for the steps of one channel (`authorizing:sms`)."""

    STARTING = "starting"
    SCHEDULED = "scheduled"
    AUTHORIZING = "authorizing"
    DEFERRED = "deferred"
    SUBMITTING = "submitting"
    OBSERVING = "observing"
    AWAITING_OPERATOR = "awaiting-operator"
    FINISHED = "finished"

    @property
    def coarse(self) -> str:
        """The phase as operators filter on it in the Web UI (HeraldState)."""
        return COARSE_STATE.get(self, self.value)


COARSE_STATE = {
    Phase.STARTING: "pending",
    Phase.AUTHORIZING: "sending",
    Phase.SUBMITTING: "sending",
    Phase.OBSERVING: "sending",
}
"""The phases whose HeraldState is not their own name."""


def show_phase(
    phase: Phase,
    *,
    details: str,
    channel: str | None = None,
    state: str | None = None,
    extra: list[SearchAttributeUpdate[Any]] | None = None,
) -> str:
    """Say the phase in words (the Web UI's "Current Details", which is no history event)
    and return it as the projection names it; upsert search attributes only when what
    operators filter on changes (each upsert is a history event). HeraldChannel follows
    the channel being authorized (`state` overrides the phase's HeraldState at the end)."""
    workflow.set_current_details(details)
    coarse = state or phase.coarse
    info = workflow.info().typed_search_attributes
    pairs: list[SearchAttributeUpdate[Any]] = list(extra or [])
    if info.get(STATE) != coarse:
        pairs.append(STATE.value_set(coarse))
    if phase == Phase.AUTHORIZING and channel is not None and info.get(CHANNEL) != channel:
        pairs.append(CHANNEL.value_set(channel))
    if pairs:
        workflow.upsert_search_attributes(pairs)
    return f"{phase}:{channel}" if channel is not None else phase.value


def utc(moment: datetime) -> str:
    """A moment as the summaries write it: UTC, to the second, e.g. 2026-12-06T18:00:00Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"
