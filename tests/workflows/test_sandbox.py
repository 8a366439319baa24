"""Herald's workflow runner (runtime.sandbox) keeps the SDK sandbox's restrictions,
refuses a data converter whose payloads would need a serialization context, imports only
the workflow class afresh for each run, and shares only workflow modules that neither
read the clock, randomness or the world nor keep state between runs (what the sandbox
would have caught in them, read from their source)."""

from __future__ import annotations

import ast
import dataclasses
import datetime
import enum
import importlib
import inspect
import textwrap
import types
import typing
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
import temporalio.converter
import temporalio.workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowFailureError
from temporalio.worker import Worker

from bench.sandbox_import import details, fresh_modules
from runtime.sandbox import PASSTHROUGH, needs_contexts, sandbox_runner
from tests.workflows.clock_workflow import WallClockWorkflow
from worker import NotificationWorkflow


class _Rot13Codec(temporalio.converter.PayloadCodec):
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


class _OwnPayloadConverter(temporalio.converter.DefaultPayloadConverter):
    pass


async def test_a_workflow_reading_the_wall_clock_is_still_refused(time_env: Any) -> None:
    queue = f"sandbox-{uuid.uuid4().hex[:8]}"
    client = time_env.client
    async with Worker(
        client,
        task_queue=queue,
        workflows=[WallClockWorkflow],
        workflow_runner=sandbox_runner(client.data_converter),
    ):
        with pytest.raises(WorkflowFailureError) as failure:
            await client.execute_workflow(
                WallClockWorkflow.run, {"echo": "hi"}, id=queue, task_queue=queue
            )
    assert "datetime.datetime.now" in str(failure.value.cause)


def test_the_default_converter_needs_no_context() -> None:
    assert needs_contexts(temporalio.converter.DataConverter.default) == []


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"payload_codec": _Rot13Codec()}, "a payload codec"),
        (
            {"payload_converter_class": _OwnPayloadConverter},
            "the payload converter _OwnPayloadConverter",
        ),
    ],
)
def test_a_converter_that_may_read_contexts_is_refused_by_name(
    change: dict[str, Any], named: str
) -> None:
    converter = dataclasses.replace(temporalio.converter.DataConverter.default, **change)
    with pytest.raises(ValueError, match=named):
        sandbox_runner(converter)


# What the sandbox would have caught in a module it imports afresh, checked on the source
# of every workflow module it passes through instead (runtime.sandbox.PASSTHROUGH).
PASSED_THROUGH_WORKFLOW_MODULES = [m for m in PASSTHROUGH if m.startswith("workflows.")]
PURE_IMPORTS: tuple[str, ...] = ("__future__", "datetime", "enum", "typing", "collections.abc")
PURE_IMPORTS += (
    "dataclasses",
    "temporalio",
    "domain",
    "activities.contracts",
    "workflows.notification",
)
"""What a passed-through workflow module may import: the standard library's pure parts
(datetime for its types: reading its clock is refused below), the SDK, the domain, the
contracts and its siblings. Not time, random, uuid, os, threading, io or anything doing I/O."""
IMPURE_CALLS = {"now", "utcnow", "today", "fromtimestamp", "open", "print", "input", "hash"}
"""Calls whose answer differs between a run and its replay (or that do I/O); `now` only
as `workflow.now()`."""
KNOWN_MUTABLE = {
    "workflows.notification.options.LEDGER_RETRY": "the SDK's RetryPolicy, never mutated",
    "workflows.notification.options.AUTHORIZE_RETRY": "the SDK's RetryPolicy, never mutated",
    "workflows.notification.options.SUBMIT_RETRY": "the SDK's RetryPolicy, never mutated",
    "workflows.notification.web_ui.COARSE_STATE": "a dict the workflow only reads",
}
"""Module-level values of a mutable type in passed-through modules (from before the step
modules were passed through): shared by every run, so safe only while nothing writes
them. Each must still exist; a tuple, frozenset or MappingProxyType would empty this."""


def impure_uses(source: str) -> list[str]:
    """Imports and calls in `source` a module shared by every run must not make."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            # A relative import is a sibling in the package, checked as itself.
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            for name in names:
                if not any(name == p or name.startswith(p + ".") for p in PURE_IMPORTS):
                    found.append(f"line {node.lineno} imports {name}")
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            of_workflow = isinstance(func, ast.Attribute) and ast.unparse(func.value) == "workflow"
            if called in IMPURE_CALLS and not (called == "now" and of_workflow):
                found.append(f"line {node.lineno} calls {ast.unparse(func)}()")
        if isinstance(node, ast.Global | ast.Nonlocal):
            found.append(f"line {node.lineno} declares {', '.join(node.names)} global")
    return found


def is_immutable(value: object) -> bool:
    """True for a value no run can change for the next one."""
    if value is None or isinstance(
        value, str | bytes | int | float | complex | enum.Enum | datetime.timedelta
    ):
        return True
    if isinstance(value, type) or typing.get_origin(value) is not None:
        return True  # a class (its own attributes are checked where it is defined), a hint
    if isinstance(value, datetime.datetime | datetime.date | datetime.tzinfo | range):
        return True
    if isinstance(value, tuple | frozenset):
        return all(is_immutable(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value).__dataclass_params__.frozen and all(  # type: ignore[attr-defined]
            is_immutable(getattr(value, f.name)) for f in dataclasses.fields(value)
        )
    return False


def mutable_bindings(module: types.ModuleType, source: str) -> list[str]:
    """Names `module` (whose code is `source`) binds by assignment, at module level or in
    a class body, to a value of a mutable type (imports are checked where they come from)."""
    module_name = module.__name__
    tree = ast.parse(source)
    found = []
    for node in tree.body:
        scopes = [(module, module_name, [node])]
        if isinstance(node, ast.ClassDef):
            cls = getattr(module, node.name)
            scopes = [(cls, f"{module_name}.{node.name}", node.body)]
        for owner, prefix, statements in scopes:
            for statement in statements:
                targets: list[ast.expr] = []
                if isinstance(statement, ast.Assign):
                    targets = statement.targets
                elif isinstance(statement, ast.AnnAssign | ast.AugAssign):
                    targets = [statement.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name) and not is_immutable(
                            vars(owner).get(name.id)
                        ):
                            found.append(f"{prefix}.{name.id}")
    return found


def mutable_bindings_of(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    return mutable_bindings(module, inspect.getsource(module))


async def test_a_run_imports_afresh_only_the_workflow_class_and_its_packages() -> None:
    # A workflow instance is built on a running event loop (the worker's); this test's.
    # A new step module of the package shows up here until it joins PASSTHROUGH, where the
    # two tests below read its source.
    defn = temporalio.workflow._Definition.must_from_class(NotificationWorkflow)
    assert fresh_modules(sandbox_runner(), details(defn)) == [
        "workflows",
        "workflows.notification",
        "workflows.notification.workflow",
    ]


@pytest.mark.parametrize("module_name", PASSED_THROUGH_WORKFLOW_MODULES)
def test_a_passed_through_workflow_module_does_nothing_a_replay_could_see_differently(
    module_name: str,
) -> None:
    source = inspect.getsource(importlib.import_module(module_name))
    assert impure_uses(source) == []


@pytest.mark.parametrize("module_name", PASSED_THROUGH_WORKFLOW_MODULES)
def test_a_passed_through_workflow_module_holds_no_state_a_run_could_leave_to_the_next(
    module_name: str,
) -> None:
    unknown = [name for name in mutable_bindings_of(module_name) if name not in KNOWN_MUTABLE]
    assert unknown == []


def test_every_known_mutable_binding_still_exists() -> None:
    found = {n for m in PASSED_THROUGH_WORKFLOW_MODULES for n in mutable_bindings_of(m)}
    assert set(KNOWN_MUTABLE) - found == set()


def test_the_state_check_sees_mutable_module_and_class_attributes() -> None:
    source = textwrap.dedent(
        """
        from datetime import timedelta
        WAIT = timedelta(seconds=1)
        NAMES = ("a", "b")
        SEEN: dict[str, int] = {}
        class Steps:
            LIMIT = 3
            done = []
            def __init__(self):
                self.mine = []
        """
    )
    module = types.ModuleType("workflows.notification.example")
    exec(source, vars(module))
    assert mutable_bindings(module, source) == [
        "workflows.notification.example.SEEN",
        "workflows.notification.example.Steps.done",
    ]


def test_the_purity_check_sees_the_clock_randomness_io_and_globals() -> None:
    source = (
        "import time\nimport random as r\nfrom uuid import uuid4\nfrom os import environ\n"
        "from datetime import datetime\nfrom temporalio import workflow\n"
        "def step():\n    global seen\n    print(datetime.now(), workflow.now())\n"
    )
    assert sorted(impure_uses(source)) == [
        "line 1 imports time",
        "line 2 imports random",
        "line 3 imports uuid",
        "line 4 imports os",
        "line 8 declares seen global",
        "line 9 calls datetime.now()",
        "line 9 calls print()",
    ]
