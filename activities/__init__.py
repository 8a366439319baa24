"""Activities: each step of a notification that touches the world."""

from datetime import UTC, datetime


def now_utc() -> datetime:
    """The wall clock for activity code (workflows use `workflow.now()`; domain code is
    handed its `now`)."""
    return datetime.now(UTC)
