"""The notification workflow's activities as it calls them, in one place: their names
(tests fake them by name, the worker registers the same), timeouts, retry policies and the
task queue each runs on, and the waits between tries. Changing a value here changes the
commands a run records: a new build, never an edit under running runs (PINNED)."""

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import PERMANENT_ERRORS, ErrorType
    from domain import channels, settlement
    from domain.channels import Channel

# Activity names, so tests can fake them by name and the worker registers the same. A
# channel's own activities are named in its domain.channels entry.
LOAD_INTENT = "load_intent"
AUTHORIZE = "authorize"
SUBMIT_SMS = channels.SMS.send_activity
POLL_SMS = channels.SMS.poll_activity
SEND_EMAIL = channels.EMAIL.send_activity
RECORD_VERDICT = "record_verdict"
RECORD_OPERATOR_ACTION = "record_operator_action"
RECORD_SETTLEMENT = "record_settlement"
RECORD_WAITING = "record_waiting"

LOOKUP_WINDOW = settlement.LOOKUP_WINDOW

ALL_REFUSED_WAIT = timedelta(minutes=1)
"""How long to wait before trying the providers again when every one refused for its own
reasons and none said when it would take work again (an open circuit says)."""

MAX_REFUSED_WAIT = timedelta(minutes=15)
"""The longest wait between tries while the providers keep refusing for their own reasons
(docs/transports.md, "Account refusals"): each wait is at least twice the one before, up
to this, so an account refused for a whole day costs about a hundred tries (attempts in
the ledger, events in the history), not thousands, and a fixed account is used within
this long."""

MIN_DEFER = timedelta(seconds=1)
"""The shortest wait after a deferring policy decision: the local `authorize` runs on the
worker's clock, and one that defers to a moment the workflow clock has passed waits this
long rather than asking again in the same workflow task."""

SEND_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
"""The SMS submit heartbeats (activities.heartbeating): a worker that dies mid-submit is
noticed after 10 s, not after the 30 s start-to-close. Safe because a retried submit finds
the claim the dead one left and reconciles with the carrier before sending. The email
send has no such claim (a retry sends again, with the same Message-ID), so it keeps the
30 s start-to-close alone: a server restart that loses a few heartbeats must not start a
second send while the first is still talking to SMTP."""

LEDGER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
)
AUTHORIZE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=PERMANENT_ERRORS,
)


SUBMIT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=60),
    non_retryable_error_types=PERMANENT_ERRORS,
)
"""A submit retries until the submit window (`schedule_to_close`) closes; a permanent
error ends it at once."""

ACTIVITY_TIMEOUT = timedelta(seconds=30)
"""Every activity's start-to-close."""


def queue_of(channel: Channel) -> str | None:
    # Send and poll run on the channel's per-route queue, whose rate the server enforces
    # for the fleet; a channel without a suffix runs them on the workflow's own queue.
    if not channel.task_queue_suffix:
        return None
    return channel.task_queue(workflow.info().task_queue)


def channel_of(name: str) -> Channel:
    """The channel called `name`; an unknown one fails the run on purpose (a plan the
    intake accepted names only known channels, so this is a bug, not a business outcome)."""
    try:
        return channels.get(name)
    except channels.UnknownChannel as err:
        raise ApplicationError(
            str(err), type=ErrorType.UNKNOWN_CHANNEL, non_retryable=True
        ) from None
