"""`herald`'s human output: tables with a header row, times with their offset in one zone,
and an intent's timeline in the order things happened."""

from __future__ import annotations

import argparse
import copy
import re
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from cli.dev import DEMO_SCENARIOS
from cli.main import parser
from ledger import timeline
from runtime.tables import Clock, table, timeline_text

T0 = datetime(2026, 12, 6, 18, 0, 0, tzinfo=UTC)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def resent_intent() -> dict[str, Any]:
    """An SMS undelivered, approved for a resend, and its second attempt. The approval was
    written 5 ms after the decision it led to (two activities at one moment, either order)."""
    decision = {"channel": "sms", "policy_version": "p1", "outcome": "allow", "rule": "allow",
                "reason": "ok", "inputs": {}, "next_eligible_at": None}  # fmt: skip
    attempt = {"channel": "sms", "state": "undelivered", "remote_id": "SM1", "message_id": None,
               "decision_id": 1, "template_key": "demo", "template_version": 1,
               "content_sha256": "ab" * 32, "segments": 1, "sender": "herald",
               "sender_address": None, "error_code": "30003", "submitted_at": None,
               "terminal_at": None, "pii_readable": True}  # fmt: skip
    return {
        "intent": {"id": "i-1", "business_key": "demo:k-1", "state": "undelivered",
                   "event_type": "demo", "category": "transactional", "region": "EU",
                   "channel_plan": {"mode": "fallback", "channels": ["sms"]},
                   "template_key": "demo", "template_version": None, "workflow_id": "w",
                   "send_at": None, "expires_at": None, "created_at": at(0),
                   "cancelled_at": None, "pii_purged_at": None, "legal_hold": False},
        "decisions": [{**decision, "id": 1, "decided_at": at(1)},
                      {**decision, "id": 2, "decided_at": at(10.000)}],
        "attempts": [{**attempt, "number": 1, "token": "demo:k-1:sms:1", "prepared_at": at(1.1)},
                     {**attempt, "number": 2, "token": "demo:k-1:sms:2", "prepared_at": at(10.1)}],
        "observations": [],
        "operator_actions": [
            {"action": "approve-resend", "operator": "desk", "reason": "retry",
             "outcome": "accepted", "at": at(10.005),
             "detail": {"channel": "sms", "after": "demo:k-1:sms:1=undelivered"}},
        ],
    }  # fmt: skip


def test_an_approval_comes_before_the_decision_it_led_to_even_when_written_after_it():
    events = [(r["event"], r["detail"].split(" ")[0]) for r in timeline.rows(resent_intent())]
    assert events == [
        ("decision", "allow"),
        ("attempt", "#1"),
        ("operator", "approve-resend"),
        ("decision", "allow"),
        ("attempt", "#2"),
    ]


def test_a_refused_resend_keeps_its_own_time():
    doc = resent_intent()
    doc["operator_actions"][0].update(outcome="refused", at=at(20))
    assert [r["event"] for r in timeline.rows(doc)][-1] == "operator"


def test_the_timeline_has_a_header_row_and_every_time_in_the_zone_named_at_the_top(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    try:
        text = timeline_text(resent_intent(), Clock.for_args(utc=False))
    finally:
        monkeypatch.undo()
        time.tzset()
    lines = text.splitlines()
    assert lines[0] == "times in the local zone (CET, UTC+01:00; --utc for UTC)"
    header = next(line for line in lines if line.split()[:2] == ["AT", "EVENT"])
    assert header.split() == ["AT", "EVENT", "CHANNEL", "DETAIL"]
    stamps = re.findall(r"\d{4}-\d\d-\d\dT[\d:.]+[+-]\d\d:\d\d", text)
    assert stamps and all(s.endswith("+01:00") for s in stamps), stamps
    assert "2026-12-06T19:00:10.005+01:00" in text
    # Columns aligned: every event row starts its EVENT column where the header does.
    column = header.index("EVENT")
    rows = [line for line in lines if re.match(r"\s+\d{4}-", line)]
    assert len(rows) == 5 and all(line[column - 1] == " " != line[column] for line in rows)
    assert "None" not in text and "datetime.datetime(" not in text


def test_utc_is_named_and_used():
    clock = Clock.for_args(utc=True)
    assert clock.heading() == "times in UTC"
    assert clock.at(datetime(2026, 1, 1, 13, 0, tzinfo=timezone(timedelta(hours=2)))) == (
        "2026-01-01T11:00:00.000+00:00"
    )
    assert clock.at(None) == "-"


def test_a_table_has_headers_aligned_columns_and_no_python_values():
    rows = [{"id": 1, "channels": ["sms", "email"], "live": True, "revoked_at": None},
            {"id": 22, "channels": [], "live": False, "revoked_at": None}]  # fmt: skip
    text = table(rows, ["id", "channels", "live", "revoked_at"])
    assert text.splitlines() == [
        "ID  CHANNELS   LIVE  REVOKED AT",
        "1   sms,email  yes   -",
        "22  -          no    -",
    ]


def _options(p: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _options(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):
            found.append((path, action))
    return found


def test_every_option_of_every_command_has_help_text():
    options = _options(parser(), "herald")
    assert len({path for path, _ in options}) > 20  # every command and sub-action was seen
    missing = [f"{path} {a.option_strings or a.dest}" for path, a in options if not a.help]
    assert missing == []


def test_the_demo_scenarios_and_jobs_the_parser_offers_are_the_real_ones():
    from activities.contracts import JOBS
    from cli.maint import MAINTENANCE_JOBS
    from scenarios import SCENARIOS

    assert list(DEMO_SCENARIOS) == list(SCENARIOS)
    assert MAINTENANCE_JOBS == JOBS


def test_an_unchanged_document_gives_the_same_rows():
    doc = resent_intent()
    assert timeline.rows(copy.deepcopy(doc)) == timeline.rows(doc)


def _parsers(p: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.ArgumentParser]]:
    """Every command and sub-action's parser, by its command line (`herald template show`)."""
    found = [(path, p)]
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _parsers(sub, f"{path} {name}")
    return found


def _examples(p: argparse.ArgumentParser) -> list[str]:
    text = p.epilog or ""
    if not text.startswith("example:\n"):
        return []
    return [each.strip() for each in text.split("\n", 1)[1].split("   |   ")]


def test_every_command_and_sub_action_has_an_example_of_itself_that_parses():
    import shlex

    built = parser()
    commands = _parsers(built, "herald")[1:]
    assert {"herald principals list", "herald template show", "herald schedules trigger"} <= {
        path for path, _ in commands
    }
    for path, sub in commands:
        examples = _examples(sub)
        assert examples, f"`{path} --help` has no example"
        for example in examples:
            words = shlex.split(example)
            while "=" in words[0]:  # HERALD_DATABASE_URL=... herald migrate
                words.pop(0)
            assert " ".join(words).startswith(path), f"{path}: {example}"
            try:
                built.parse_args(words[1:])
            except SystemExit:
                raise AssertionError(f"`{example}` does not parse") from None


def test_the_send_example_gives_every_variable_its_template_needs():
    import json
    import shlex

    from domain.templates import missing_variables
    from templates import load_packaged

    (send,) = [sub for path, sub in _parsers(parser(), "herald") if path == "herald send"]
    (example,) = _examples(send)
    args = parser().parse_args(shlex.split(example)[1:])
    variables = json.loads(args.vars)
    versions = [t for t in load_packaged() if t.key == args.template and t.channel == "sms"]
    assert versions
    for template in versions:
        assert missing_variables(template, variables) == []


def test_a_run_waiting_for_a_settlement_ends_naming_settle_not_approve_resend():
    # `send --wait` and `show --follow` once ended on an unknown SMS with the approve-resend
    # line, which the workflow then refused ("settle it first").
    from cli.intents import AWAITING_OPERATOR, _ending

    doc = copy.deepcopy(resent_intent())
    doc["attempts"] = doc["attempts"][:1]
    doc["attempts"][0]["state"] = "unknown"
    doc["intent"].update(state="unknown", awaiting="settlement", awaiting_until=at(3600))
    ending = _ending(doc, AWAITING_OPERATOR, Clock.for_args(True))
    assert "herald settle demo:k-1 --lookup" in ending and "approve-resend" not in ending
    # A run recorded before runs said what they wait for still gets the approve-resend line.
    doc["intent"].update(awaiting=None, awaiting_until=None)
    assert "herald approve-resend demo:k-1" in _ending(doc, AWAITING_OPERATOR, Clock.for_args(True))


def test_an_update_interrupted_by_ctrl_c_is_one_line_not_a_traceback():
    # Ctrl-C during `herald settle --lookup` once ended in two chained tracebacks: the SDK
    # turns the cancelled wait into WorkflowUpdateRPCTimeoutOrCancelledError.
    from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError

    import settings
    from cli.errors import operational_error

    line = operational_error(WorkflowUpdateRPCTimeoutOrCancelledError(), settings.Settings())
    assert line is not None and "\n" not in line
    assert line.startswith("stopped waiting for the workflow's answer")
