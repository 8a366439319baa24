"""NotificationWorkflow with one command changed, for the replay guard's own test
(test_replay.py): `authorize` scheduled as an ordinary activity where every recorded run
ran it as a local one.

Kept in a module of its own: the sandbox imports a workflow's module afresh for every run."""

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        AuthorizeInput,
        AuthorizeResult,
        NotificationInput,
        NotificationResult,
    )
    from workflows.notification import AUTHORIZE, AUTHORIZE_RETRY, NotificationWorkflow


@workflow.defn(name="NotificationWorkflow")
class AuthorizeAsAnActivity(NotificationWorkflow):
    @workflow.run
    async def run(self, input: NotificationInput) -> NotificationResult:
        return await super().run(input)

    async def _authorize(self, request: AuthorizeInput, *, summary: str) -> AuthorizeResult:
        return await workflow.execute_activity(
            AUTHORIZE,
            request,
            result_type=AuthorizeResult,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=AUTHORIZE_RETRY,
            summary=summary,
        )
