"""The workflow sandbox Herald's workers run in: the SDK's, without its per-payload detour.

The SDK's sandboxed instance answers every "which serialization context does this payload
belong to?" by executing a code string inside the sandbox: compiled afresh, the importer
swapped in and out. The worker asks that several times per workflow task (once per
payload sequence, on each of the three decode and three encode passes), and in
`herald bench` those detours were about a tenth of the worker's Python time.

The answer only matters to a payload codec, external payload storage or a context-aware
converter; Herald's workers use the default data converter with none of them, where a
context changes nothing. `ContextFreeSandbox` answers the question outside the sandbox
("no context", as the SDK does for a context-free converter) and leaves everything else
to the SDK's sandbox: the workflow's own module is still imported afresh for each run
(the pure modules in `PASSTHROUGH` are shared) and its code still runs under the same
restrictions. `sandbox_runner(data_converter)` refuses a converter
that would need the contexts, so adding a codec later cannot silently lose them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import temporalio.converter
import temporalio.workflow
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

PASSTHROUGH = (
    "domain",
    "activities.contracts",
    "workflows.notification.options",
    "workflows.notification.web_ui",
    "workflows.notification.state",
    "workflows.notification.attempt",
    "workflows.notification.operators",
)
"""Modules the sandbox shares with the worker instead of importing them afresh for every
workflow run (and every replay after an eviction). Everything else a workflow imports
outside `imports_passed_through()` is executed again per run: in
`python -m bench.sandbox_import` the notification workflow's step modules cost about
1,200 Python calls and 1.2 ms of CPU per run (docs/bench.md, "The workflow as a
package").

Passing a module through gives up what the sandbox gives a fresh import: its
module-level objects are no longer new for each run, and the names it imported are the
worker's own modules, not the sandbox's restricted proxies, so a `datetime.now()` in a
step method would not be refused at run time (`temporalio.workflow` still resolves the
running workflow, so `workflow.now()` and the activity calls work as before). That is
safe for the workflow modules in this list because they need neither, and
tests/workflows/test_sandbox.py reads their source to keep it so: they import only
`datetime`'s types, `enum`, `typing`, `temporalio`, `domain`, the contracts and each
other (never time, random, uuid, os, threading or I/O, and they call no `now()` but
`workflow.now()`), bind no mutable object at module or class level and declare no
`global`. The step modules (`state`, `attempt`, `operators`) hold mixin classes whose
state lives on the workflow object, created in `IntentRun.__init__` for each run;
`options` and `web_ui` hold constants (the few of a mutable type are listed in that
test: nothing mutates them). The class itself (`workflow.py`) is still imported afresh
for every run, as the SDK intends for a workflow's own module."""


class _ContextFreeInstance(WorkflowInstance):
    """A sandboxed workflow instance whose payloads carry no serialization context."""

    def __init__(
        self,
        inner: WorkflowInstance,
        no_store_context: temporalio.converter.StorageDriverStoreContext,
    ) -> None:
        self._inner = inner
        self._no_store_context = no_store_context

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        return self._inner.activate(act)

    def get_serialization_context(self, command_info: Any) -> None:
        return None

    def get_external_store_context(
        self, command_info: Any
    ) -> temporalio.converter.StorageDriverStoreContext:
        return self._no_store_context

    def get_info(self) -> temporalio.workflow.Info:
        return self._inner.get_info()

    def get_thread_id(self) -> int | None:
        return self._inner.get_thread_id()


class ContextFreeSandbox(WorkflowRunner):
    """The SDK's sandboxed runner, for a data converter that needs no serialization context."""

    def __init__(self, sandbox: SandboxedWorkflowRunner) -> None:
        self._sandbox = sandbox
        # Without external storage the worker ignores the store context (and the SDK's own
        # instance would answer "no target" for the commands Herald's workflows issue).
        self._no_store_context = temporalio.converter.StorageDriverStoreContext(target=None)

    @property
    def restrictions(self) -> SandboxRestrictions:
        return self._sandbox.restrictions

    def prepare_workflow(self, defn: temporalio.workflow._Definition) -> None:
        self._sandbox.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _ContextFreeInstance(self._sandbox.create_instance(det), self._no_store_context)

    def set_worker_level_failure_exception_types(
        self, types: Sequence[type[BaseException]]
    ) -> None:
        self._sandbox.set_worker_level_failure_exception_types(types)


def needs_contexts(converter: temporalio.converter.DataConverter) -> list[str]:
    """What in `converter` would read a payload's serialization context (empty: nothing)."""
    reasons = []
    if converter.payload_codec is not None:
        reasons.append("a payload codec")
    if converter.external_storage is not None:
        reasons.append("external payload storage")
    if not _is_default(converter.payload_converter_class, "payload_converter_class"):
        reasons.append(f"the payload converter {converter.payload_converter_class.__name__}")
    if not _is_default(converter.failure_converter_class, "failure_converter_class"):
        reasons.append(f"the failure converter {converter.failure_converter_class.__name__}")
    return reasons


def _is_default(cls: type, field: str) -> bool:
    return cls is getattr(temporalio.converter.DataConverter.default, field)


def sandbox_runner(
    data_converter: temporalio.converter.DataConverter | None = None,
) -> WorkflowRunner:
    """The runner for Herald's workflows; `data_converter` is the client's (default: the
    SDK's default converter)."""
    converter = data_converter or temporalio.converter.DataConverter.default
    reasons = needs_contexts(converter)
    if reasons:
        raise ValueError(
            "the context-free sandbox cannot serve a data converter with "
            + ", ".join(reasons)
            + "; use the SDK's SandboxedWorkflowRunner instead"
        )
    return ContextFreeSandbox(
        SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
        )
    )
