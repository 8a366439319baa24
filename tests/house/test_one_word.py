"""One word for each thing: a shared helper exists once, an exception name means one class,
and the error types the activities raise are the enum the workflow matches on. Checked on
the source with `ast`, so a new copy fails here rather than in review."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from activities.contracts import PERMANENT_ERRORS, ErrorType
from domain import intents

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [
    "domain",
    "workflows",
    "activities",
    "starter",
    "api",
    "ledger",
    "cli",
    "runtime",
    "devstack",
    "transports",
    "scenarios",
    "bench",
]


def _modules() -> list[tuple[str, ast.Module]]:
    found = []
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            found.append((str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path))))
    return found


MODULES = _modules()


def test_no_module_keeps_its_own_time_format_or_transaction_wrapper():
    copies = [
        f"{name}: {node.name}"
        for name, tree in MODULES
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name in {"_iso", "_tx", "tx", "_in_transaction"}
    ]
    assert copies == [], "use domain.clocks.iso_utc and ledger.transactions.Transactions"


def test_each_exception_name_names_one_class():
    where: dict[str, list[str]] = defaultdict(list)
    for name, tree in MODULES:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(base, ast.Name)
                and base.id.endswith(("Error", "Exception"))
                or isinstance(base, ast.Attribute)
                and base.attr.endswith("Error")
                for base in node.bases
            ):
                where[node.name].append(name)
    assert {cls: files for cls, files in where.items() if len(files) > 1} == {}


def _application_error_types() -> list[tuple[str, ast.expr]]:
    found = []
    for name, tree in MODULES:
        if not name.startswith("activities/"):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "ApplicationError"
            ):
                found += [(name, kw.value) for kw in node.keywords if kw.arg == "type"]
    return found


def test_every_activity_error_type_is_a_member_of_the_enum():
    raised = _application_error_types()
    assert len(raised) >= 10  # the walk found the activities' raises
    spelled = [
        f"{name}: {ast.unparse(value)}"
        for name, value in raised
        if not (isinstance(value, ast.Attribute) and ast.unparse(value.value) == "ErrorType")
        and not isinstance(value, ast.Name)  # a parameter typed ErrorType (email's _fail)
    ]
    assert spelled == []
    members = {
        value.attr
        for _, value in raised
        if isinstance(value, ast.Attribute) and ast.unparse(value.value) == "ErrorType"
    }
    assert members <= set(ErrorType.__members__)


def test_the_workflow_retries_exactly_the_errors_that_are_not_permanent():
    from workflows import notification

    assert notification.PERMANENT_ERRORS is PERMANENT_ERRORS
    assert set(PERMANENT_ERRORS) < {e.value for e in ErrorType}
    # UnknownChannel (a bug, not a provider's answer) and DataKeyUnreadable (activities.
    # key_errors) are raised non-retryable where they are met; they stay out of the list
    # so the recorded retry policies do not change.
    retried = {e for e in ErrorType if e.value not in PERMANENT_ERRORS} - {
        ErrorType.UNKNOWN_CHANNEL,
        ErrorType.DATA_KEY_UNREADABLE,
    }
    assert retried == {
        ErrorType.TRANSIENT_PROVIDER_ERROR,
        ErrorType.AMBIGUOUS_SUBMISSION,
        ErrorType.RECONCILE_PENDING,
        ErrorType.PROVIDER_NOT_CONFIGURED,
    }


def test_the_cli_waits_for_the_domains_final_states():
    from cli import intents as cli_intents

    assert cli_intents.FINAL_STATES is intents.FINAL_STATES
    assert intents.REACHED < intents.FINAL_STATES
    on_the_way = set(intents.IntentState) - intents.FINAL_STATES
    assert on_the_way == {
        intents.IntentState.PENDING,
        intents.IntentState.SCHEDULED,
        intents.IntentState.DEFERRED,
        intents.IntentState.SENDING,
    }
