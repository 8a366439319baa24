"""Logs are one JSON object per line, carry Temporal ids, and never carry PII.

The formatter is checked on its own; then a real scenario runs through the embedded
stack (the worker in its own process, `herald api` as a process of its own) and both
logs are read back line by line.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from devstack import free_port
from devstack.processes import ChildProcess
from ledger.models import Consent
from runtime.logs import JsonFormatter, configure_logging

ROOT = Path(__file__).resolve().parents[2]
PHONE = "+447400000100"
EMAIL = "ada.lovelace@example.org"
BODY_FRAGMENT = "bodyfrag"
FIRST_NAME = "Adalind"
# Both end up in the rendered SMS and email bodies only.
VARIABLES = {"order_id": f"o-{BODY_FRAGMENT}-77", "first_name": FIRST_NAME}


def record(message: str, **extra) -> logging.LogRecord:  # type: ignore[no-untyped-def]
    rec = logging.makeLogRecord({"name": "t", "levelno": 20, "levelname": "INFO", "msg": message})
    rec.__dict__.update(extra)
    return rec


def test_a_record_becomes_one_json_line_with_the_temporal_ids_lifted():
    details = {
        "activity_type": "submit_sms",
        "workflow_id": "intent-1",
        "workflow_run_id": "r-1",
        "attempt": 2,
    }
    line = JsonFormatter().format(
        record("sent", temporal_activity=details, intent_id="i-1", destination="secret")
    )
    doc = json.loads(line)
    assert "\n" not in line
    assert doc["message"] == "sent" and doc["level"] == "INFO"
    assert doc["activity_type"] == "submit_sms" and doc["workflow_id"] == "intent-1"
    assert doc["run_id"] == "r-1" and doc["attempt"] == 2
    assert doc["intent_id"] == "i-1"
    assert "destination" not in doc  # unknown extras are never dumped
    assert "redacted" not in doc


def test_a_phone_number_or_address_that_slips_into_a_message_is_masked_and_flagged():
    doc = json.loads(JsonFormatter().format(record(f"to {PHONE} and {EMAIL}")))
    assert PHONE not in doc["message"] and EMAIL not in doc["message"]
    assert doc["redacted"] is True


def test_a_traceback_is_kept_inside_the_json_line():
    try:
        raise ValueError(f"refused {PHONE}")
    except ValueError:
        rec = record("failed")
        rec.exc_info = sys.exc_info()
    doc = json.loads(JsonFormatter().format(rec))
    assert "ValueError" in doc["exc"] and PHONE not in doc["exc"]


def test_configure_logging_routes_every_logger_through_the_json_handler():
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging(stream=stream)
        logging.getLogger("uvicorn.access").info("GET /v1/unsubscribe/abc.def HTTP/1.1 200")
        logging.getLogger("herald.test").warning("hello")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [d["logger"] for d in lines] == ["uvicorn.access", "herald.test"]
    assert "abc.def" not in lines[0]["message"]  # unsubscribe links are capabilities


def parse_json_lines(path: Path) -> list[dict]:
    docs = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            docs.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise AssertionError(f"{path.name}:{n} is not JSON: {line[:200]}") from err
    return docs


def assert_no_pii(path: Path) -> None:
    text = path.read_text()
    for secret in (
        PHONE,
        PHONE[1:],
        "7400000100",
        EMAIL,
        "ada.lovelace",
        BODY_FRAGMENT,
        FIRST_NAME,
    ):
        assert secret not in text, f"{secret!r} in {path.name}"
    flagged = [d for d in parse_json_lines(path) if d.get("redacted")]
    assert not flagged, f"{path.name}: lines needed masking: {flagged[:3]}"


@pytest.mark.e2e
async def test_a_scenario_leaves_json_logs_with_ids_and_no_pii_in_worker_and_api(stack, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    recipient = f"m-{suffix}"
    with stack.client.sessions.begin() as session:
        for channel in ("sms", "email"):
            session.add(
                Consent(
                    recipient_ref=recipient,
                    channel=channel,
                    purpose="service",
                    source="test",
                    granted_at=datetime.now(UTC),
                )
            )
    api_port = free_port()
    api_log = tmp_path / "api.log"
    api = ChildProcess(
        "api",
        [sys.executable, "-m", "cli", "api", "--port", str(api_port)],
        log_path=api_log,
        env={**os.environ, **stack.env(), "HERALD_API_PORT": str(api_port)},
        cwd=ROOT,
    )
    api.start()
    try:
        base = f"http://127.0.0.1:{api_port}"
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            for _ in range(150):
                try:
                    if (await http.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.2)
            else:
                raise AssertionError(api_log.read_text()[-2000:])
            token = stack.cfg.token_file.read_text()
            answer = await http.post(
                "/v1/intents",
                headers={"Authorization": f"Bearer {token}"},
                json={
                    "business_key": f"order-created:o-{suffix}",
                    "recipient_ref": recipient,
                    "template_key": "order-created",
                    "template_version": 1,
                    "phone": PHONE,
                    "email": EMAIL,
                    "channels": ["sms", "email"],
                    "mode": "all",  # both transports run, and log
                    "variables": VARIABLES,
                },
            )
            assert answer.status_code == 201, answer.text
            workflow_id = answer.json()["workflow_id"]
            handle = stack.client.temporal.get_workflow_handle(workflow_id)
            await asyncio.wait_for(handle.result(), 60)
            timeline = await http.get(
                f"/v1/intents/{answer.json()['intent_id']}",
                headers={"Authorization": f"Bearer {token}"},
            )
            assert timeline.status_code == 200
            attempts = timeline.json()["attempts"]
            assert {a["channel"] for a in attempts} == {"sms", "email"}, [
                (d.get("rule"), d.get("reason")) for d in timeline.json()["decisions"]
            ]
    finally:
        await asyncio.to_thread(api.stop)

    worker_log = stack.cfg.data_path / "worker.log"
    for path in (worker_log, api_log):
        assert_no_pii(path)
    worker_lines = parse_json_lines(worker_log)
    api_lines = parse_json_lines(api_log)
    assert any(d["logger"].startswith("uvicorn") for d in api_lines)
    assert any(d["logger"] == "herald.worker" for d in worker_lines)
    # Lines written inside this workflow's activities carry its id and the activity type.
    ours = [d for d in worker_lines if d.get("workflow_id") == workflow_id]
    assert ours, "no worker log line carries the workflow id"
    assert all("activity_type" in d or "workflow_type" in d for d in ours)
