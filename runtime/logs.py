"""Structured logs: one JSON object per line, with ids and without PII.

Every Herald process (the worker, `herald api`, `herald relay`) calls
:func:`configure_logging` once at start-up. Each line carries `ts`, `level`, `logger` and
`message`, plus whatever ids the record has: the Temporal SDK's activity and workflow
loggers attach `temporal_activity` / `temporal_workflow` details (workflow id, run id,
activity type, attempt, task queue), which are lifted to top-level keys so a log query can
filter on `workflow_id` directly.

Nothing here knows a destination. As a last line of defence, anything in a message or a
traceback that looks like an E.164 number or an email address is masked and the line is
marked `"redacted": true`; a test runs a scenario and requires that no line needed it.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import IO, Any
from urllib.parse import parse_qsl, quote

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}

# Details the Temporal SDK puts on records (ids and names only, no payloads).
_TEMPORAL_KEYS = (
    "workflow_id",
    "run_id",
    "workflow_run_id",
    "workflow_type",
    "activity_id",
    "activity_type",
    "attempt",
    "task_queue",
    "namespace",
)

# Extras of our own that are ids, safe to log as they are.
SAFE_EXTRAS = frozenset({"intent_id", "attempt_token", "job", "schedule_id", "error_type"})

# A number with its `+` (literal or percent-encoded), or a bare run of 9 to 15 digits
# standing alone (`447400952999` in a path): ids next to it (uuids, versions, hosts) are
# joined by `-`, `.` or letters and are left alone.
_PHONE = re.compile(r"(?:\+|%2B)\d{7,15}\b|(?<![\w.-])\d{9,15}(?![\w.-])", re.IGNORECASE)
# `@` literal or percent-encoded (`ana%40example.com` in a URL); the local part may hold
# percent-escapes of its own.
_EMAIL = re.compile(r"[\w.+%-]+(?:@|%40)[\w-]+(?:\.[\w-]+)+", re.IGNORECASE)
_AT = re.compile(r"@|%40", re.IGNORECASE)
# One-click unsubscribe links are capabilities: keep them out of access logs.
_UNSUBSCRIBE = re.compile(r"(/v1/unsubscribe/)[^\s\"?]+")


def _mask_address(match: re.Match[str]) -> str:
    # A Message-ID (`<32 hex of the token's hash@domain>`) is an id, not an address.
    local = _AT.split(match.group(0), maxsplit=1)[0]
    if re.fullmatch(r"[0-9a-f]{32}", local):
        return match.group(0)
    return "<email>"


def redact(text: str) -> tuple[str, bool]:
    """Mask phone numbers and email addresses; say whether anything was masked."""
    masked = _PHONE.sub("<phone>", text)
    masked = _EMAIL.sub(_mask_address, masked)
    return masked, masked != text


def query_names_only(target: str) -> str:
    """A request target with the query's values dropped: `/v1/intents?since=&limit=`.

    Values are what a caller chose to put in a URL (an address, a token someone pasted
    there); the names are enough to tell requests apart."""
    path, has_query, query = target.partition("?")
    if not has_query:
        return path
    names = [quote(name, safe="") for name, _ in parse_qsl(query, keep_blank_values=True)]
    return path + "?" + "&".join(f"{name}=" for name in names)


class AccessLogFilter(logging.Filter):
    """uvicorn's access line (`client - "GET <target> HTTP/1.1" 200`) with the target's
    query values dropped (see :func:`query_names_only`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            record.args = (args[0], args[1], query_names_only(args[2]), args[3], args[4])
        return True


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object (no newlines inside it)."""

    def format(self, record: logging.LogRecord) -> str:
        message, redacted = redact(record.getMessage())
        message = _UNSUBSCRIBE.sub(r"\1<token>", message)
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        if not hasattr(record, "temporal_activity"):
            # A plain module logger (a transport's) called from inside an activity: the
            # activity's context is still current in this thread, so its ids are known.
            doc.update(_current_activity_ids())
        for key in ("temporal_workflow", "temporal_activity"):
            details = getattr(record, key, None)
            if isinstance(details, dict):
                for name in _TEMPORAL_KEYS:
                    if name in details and name not in doc:
                        doc["run_id" if name == "workflow_run_id" else name] = details[name]
        for key, value in record.__dict__.items():
            if key in SAFE_EXTRAS:
                doc[key] = value
        if record.exc_info:
            exc, exc_redacted = redact(self.formatException(record.exc_info))
            doc["exc"] = exc
            redacted = redacted or exc_redacted
        if redacted:
            doc["redacted"] = True
        return json.dumps(doc, default=str, ensure_ascii=False)


def _current_activity_ids() -> dict[str, Any]:
    from temporalio import activity

    if not activity.in_activity():
        return {}
    info = activity.info()
    return {
        "workflow_id": info.workflow_id,
        "run_id": info.workflow_run_id,
        "workflow_type": info.workflow_type,
        "activity_type": info.activity_type,
        "activity_id": info.activity_id,
        "attempt": info.attempt,
        "task_queue": info.task_queue,
    }


def configure_logging(level: int = logging.INFO, stream: IO[str] | None = None) -> None:
    """Send every logger (ours, the Temporal SDK's, uvicorn's) through one JSON handler."""
    from temporalio import activity, workflow

    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # uvicorn configures its own handlers unless told not to (log_config=None); make
    # its loggers propagate here either way.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        named = logging.getLogger(name)
        named.handlers.clear()
        named.propagate = True
        named.disabled = False
        named.setLevel(logging.NOTSET)
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, AccessLogFilter) for f in access.filters):
        access.addFilter(AccessLogFilter())
    # httpx logs every request URL at INFO: noise, and a URL is the wrong place for facts.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    # The SDK's ids go into structured fields, not appended to the message text.
    activity.logger.activity_info_on_message = False
    workflow.logger.workflow_info_on_message = False
    logging.captureWarnings(True)


def core_log_forwarding(metrics_address: str | None = None) -> Any:
    """A Temporal Runtime whose Rust core logs into Python logging (hence JSON) and, given
    an address, serves the SDK's own Prometheus metrics there (task latencies, polls,
    activity and workflow counts; labels are task queues and types, never PII)."""
    from temporalio.runtime import (
        LogForwardingConfig,
        LoggingConfig,
        PrometheusConfig,
        Runtime,
        TelemetryConfig,
        TelemetryFilter,
    )

    return Runtime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(
                filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
                forwarding=LogForwardingConfig(logger=logging.getLogger("temporalio.core")),
            ),
            metrics=PrometheusConfig(bind_address=metrics_address) if metrics_address else None,
        )
    )
