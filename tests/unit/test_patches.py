"""Every patch the workflow asks for is one a new run is born with (docs/operations.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import worker
import workflows.notification as notification

SOURCE = Path(notification.__file__).read_text()


def asked_patches() -> set[str]:
    """The values of the names the workflow passes to `self._patched` or `workflow.patched`."""
    asked = set()
    for node in ast.walk(ast.parse(SOURCE)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("_patched", "patched")
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id.isupper()
        ):
            asked.add(getattr(notification, node.args[0].id))
    return asked


def test_every_patch_asked_for_is_in_patches():
    asked = asked_patches()
    assert len(asked) >= 7
    assert asked <= set(notification.PATCHES), asked - set(notification.PATCHES)


def test_the_workflow_asks_the_sdk_only_through_its_born_with_check():
    calls = SOURCE.count("workflow.patched(")
    assert calls == 1, "every patch goes through NotificationWorkflow._patched"


def test_the_worker_hands_the_patches_to_load_intent():
    assert worker.PATCHES is notification.PATCHES
    assert "workflow_patches=PATCHES" in Path(worker.__file__).read_text()
