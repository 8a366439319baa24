"""A worker of another build, for tests/e2e/test_rollout.py: the Herald worker as
`python -m worker` runs it, whose NotificationWorkflow (`--build-b`) adds one command at
the start of every run (a memo upsert naming the build), under the same workflow name.
Two processes of this module, with and without the flag, are two builds whose commands
differ, as a real new release's would."""

from __future__ import annotations

import sys

from temporalio import workflow
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from activities.contracts import NotificationInput, NotificationResult

from workflows.notification import NotificationWorkflow

BUILD_MEMO = "rollout_build"
"""The memo build B's runs set first: the command build A never makes."""


@workflow.defn(name="NotificationWorkflow", versioning_behavior=VersioningBehavior.PINNED)
class NotificationWorkflowB(NotificationWorkflow):
    @workflow.run
    async def run(self, input: NotificationInput) -> NotificationResult:
        workflow.upsert_memo({BUILD_MEMO: "b"})
        return await super().run(input)


if __name__ == "__main__":
    import settings as settings_module
    import worker
    from runtime.loop import run

    if "--build-b" in sys.argv[1:]:
        worker.NotificationWorkflow = NotificationWorkflowB  # type: ignore[misc]
    run(worker.main(settings_module.load()))
