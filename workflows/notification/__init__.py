"""NotificationWorkflow: the whole life of one notification intent, deterministic.

It carries ids only. Every decision comes from `domain`; every side effect is an
activity that acts on the ledger or a transport and returns a fact. The package's rooms:
`workflow.py` (the class: its messages and the life of one intent), `attempt.py` (one
attempt: authorize, submit, follow), `operators.py` (the operator window: cancel, resend,
settle), `state.py` (what a run holds), `options.py` (the activities as the workflow
calls them) and `web_ui.py` (what the Temporal Web UI shows).
The names others use are re-exported here (`from workflows.notification import
NotificationWorkflow`).
"""

from workflows.notification.operators import SETTLEMENT_REFUSED
from workflows.notification.options import (
    ALL_REFUSED_WAIT,
    AUTHORIZE,
    AUTHORIZE_RETRY,
    LEDGER_RETRY,
    LOAD_INTENT,
    LOOKUP_WINDOW,
    MAX_REFUSED_WAIT,
    MIN_DEFER,
    PERMANENT_ERRORS,
    POLL_SMS,
    RECORD_OPERATOR_ACTION,
    RECORD_SETTLEMENT,
    RECORD_VERDICT,
    RECORD_WAITING,
    SEND_EMAIL,
    SEND_HEARTBEAT_TIMEOUT,
    SUBMIT_SMS,
)
from workflows.notification.web_ui import (
    CHANNEL,
    CHANNELS_USED,
    COARSE_STATE,
    EVENT_TYPE,
    OUTCOME,
    REGION,
    STATE,
)
from workflows.notification.workflow import (
    APPROVE_RESEND,
    CANCEL,
    LOOKUP,
    SETTLE,
    TEMPORAL_CANCEL_OPERATOR,
    NotificationWorkflow,
)

__all__ = [
    "ALL_REFUSED_WAIT",
    "APPROVE_RESEND",
    "AUTHORIZE",
    "AUTHORIZE_RETRY",
    "CANCEL",
    "CHANNEL",
    "CHANNELS_USED",
    "COARSE_STATE",
    "EVENT_TYPE",
    "LEDGER_RETRY",
    "LOAD_INTENT",
    "LOOKUP",
    "LOOKUP_WINDOW",
    "MAX_REFUSED_WAIT",
    "MIN_DEFER",
    "OUTCOME",
    "PERMANENT_ERRORS",
    "POLL_SMS",
    "RECORD_OPERATOR_ACTION",
    "RECORD_SETTLEMENT",
    "RECORD_VERDICT",
    "RECORD_WAITING",
    "REGION",
    "SEND_EMAIL",
    "SEND_HEARTBEAT_TIMEOUT",
    "SETTLE",
    "SETTLEMENT_REFUSED",
    "STATE",
    "SUBMIT_SMS",
    "TEMPORAL_CANCEL_OPERATOR",
    "NotificationWorkflow",
]
