"""Herald's Worker Deployment in Temporal (Worker Versioning): which build is current or
ramping, which builds still have pinned runs open, and the two changes an operator makes
(docs/operations.md, "Deploying a new build").

Spoken through the SDK's workflow_service RPCs, since the production image has no
`temporal` CLI. Used by the worker (a first install makes its own build current) and by
`herald deploy`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    CountWorkflowExecutionsRequest,
    DescribeTaskQueueRequest,
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
    SetWorkerDeploymentRampingVersionRequest,
)
from temporalio.client import Client
from temporalio.common import WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode

log = logging.getLogger("herald.deployments")

IDENTITY = "herald"
FIRST_CURRENT_WITHIN_SECONDS = 60.0
"""How long a worker of a deployment with no current build tries to make its own build
current (the version is registered by the server once the worker's pollers reach it)."""


class DeploymentError(RuntimeError):
    """Something an operator can fix, in one line (an unknown build, no such deployment, a
    server without Worker Versioning)."""


@dataclass(frozen=True)
class Build:
    """One version of the deployment, as `herald deploy status` shows it."""

    build_id: str
    status: str
    """current, ramping, draining, drained or inactive (the server's words, lower case)."""
    drainage: str
    """draining, drained or empty: the server's own check, refreshed every few minutes."""
    last_polled: datetime | None = None
    """When a worker of this build last polled the workflow task queue (None: none seen)."""


@dataclass(frozen=True)
class Deployment:
    name: str
    current: str | None
    ramping: str | None
    ramp_percent: float
    builds: list[Build] = field(default_factory=list)

    def build(self, build_id: str) -> Build:
        for build in self.builds:
            if build.build_id == build_id:
                return build
        known = ", ".join(b.build_id for b in self.builds) or "none"
        raise DeploymentError(
            f"no build {build_id!r} in deployment {self.name!r} (known: {known}); a build is "
            "known once one of its workers has polled"
        )


def _unversioned(err: RPCError) -> bool:
    return err.status in (RPCStatusCode.UNIMPLEMENTED, RPCStatusCode.PERMISSION_DENIED) or (
        "versioning" in str(err).lower() and "disabled" in str(err).lower()
    )


def _problem(err: RPCError, deployment: str) -> DeploymentError:
    if _unversioned(err):
        return DeploymentError(
            "this Temporal server has no Worker Versioning (it needs server 1.29.1 or later): "
            f"{err.message}"
        )
    if err.status == RPCStatusCode.NOT_FOUND:
        return DeploymentError(
            f"no Worker Deployment {deployment!r} on this server: no worker of it has polled "
            "yet (HERALD_WORKER_DEPLOYMENT names it)"
        )
    return DeploymentError(f"Temporal refused: {err.message}")


def _short(enum_name: str, prefix: str) -> str:
    return enum_name.removeprefix(prefix).lower() if enum_name.startswith(prefix) else ""


async def describe(client: Client, deployment: str, *, task_queue: str | None = None) -> Deployment:
    """The deployment's routing and every build it knows; with `task_queue`, also when a
    worker of each build last polled that queue's workflow tasks."""
    from temporalio.api.enums.v1 import VersionDrainageStatus, WorkerDeploymentVersionStatus

    try:
        info = (
            await client.workflow_service.describe_worker_deployment(
                DescribeWorkerDeploymentRequest(
                    namespace=client.namespace, deployment_name=deployment
                )
            )
        ).worker_deployment_info
    except RPCError as err:
        raise _problem(err, deployment) from err
    polled = await _last_polled(client, task_queue) if task_queue else {}
    routing = info.routing_config
    builds = [
        Build(
            build_id=summary.deployment_version.build_id,
            status=_short(
                WorkerDeploymentVersionStatus.Name(summary.status),
                "WORKER_DEPLOYMENT_VERSION_STATUS_",
            ),
            drainage=_short(
                VersionDrainageStatus.Name(summary.drainage_info.status),
                "VERSION_DRAINAGE_STATUS_",
            ),
            last_polled=polled.get(summary.deployment_version.build_id),
        )
        for summary in info.version_summaries
    ]
    builds.sort(key=lambda b: b.build_id)
    return Deployment(
        name=deployment,
        current=routing.current_deployment_version.build_id or None,
        ramping=routing.ramping_deployment_version.build_id or None,
        ramp_percent=routing.ramping_version_percentage,
        builds=builds,
    )


async def _last_polled(client: Client, task_queue: str) -> dict[str, datetime]:
    """build id -> the latest poll of the queue's workflow tasks the server remembers (it
    forgets a poller a few minutes after its last poll)."""
    try:
        answer = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
    except RPCError:
        return {}
    seen: dict[str, datetime] = {}
    for poller in answer.pollers:
        build = poller.deployment_options.build_id
        if not build:
            continue
        at = poller.last_access_time.ToDatetime(tzinfo=UTC)
        if build not in seen or at > seen[build]:
            seen[build] = at
    return seen


async def pinned_runs(client: Client, deployment: str, build_id: str) -> int:
    """How many open workflow runs are pinned to this build (the visibility store's
    count: what keeps the build's workers needed)."""
    version = f"{deployment}:{build_id}"
    try:
        answer = await client.workflow_service.count_workflow_executions(
            CountWorkflowExecutionsRequest(
                namespace=client.namespace,
                query=(
                    f"TemporalWorkerDeploymentVersion = {_quoted(version)} AND "
                    "TemporalWorkflowVersioningBehavior = 'Pinned' AND "
                    "ExecutionStatus = 'Running'"
                ),
            )
        )
    except RPCError as err:
        raise _problem(err, deployment) from err
    return int(answer.count)


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


async def waiting_runs(
    client: Client, deployment: str, build_id: str, *, workflow_type: str, state: str
) -> list[str]:
    """The ids of open runs of `workflow_type` pinned to this build whose HeraldState is
    `state` (awaiting-operator)."""
    from activities.contracts import STATE_ATTRIBUTE

    version = f"{deployment}:{build_id}"
    query = (
        f"WorkflowType = {_quoted(workflow_type)} AND ExecutionStatus = 'Running' AND "
        f"TemporalWorkerDeploymentVersion = {_quoted(version)} AND "
        f"{STATE_ATTRIBUTE} = {_quoted(state)}"
    )
    try:
        return [execution.id async for execution in client.list_workflows(query)]
    except RPCError as err:
        raise _problem(err, deployment) from err


async def set_current(client: Client, deployment: str, build_id: str) -> None:
    try:
        await client.workflow_service.set_worker_deployment_current_version(
            SetWorkerDeploymentCurrentVersionRequest(
                namespace=client.namespace,
                deployment_name=deployment,
                build_id=build_id,
                identity=IDENTITY,
            )
        )
    except RPCError as err:
        raise _problem(err, deployment) from err


async def set_ramping(client: Client, deployment: str, build_id: str, percent: float) -> None:
    try:
        await client.workflow_service.set_worker_deployment_ramping_version(
            SetWorkerDeploymentRampingVersionRequest(
                namespace=client.namespace,
                deployment_name=deployment,
                build_id=build_id,
                percentage=percent,
                identity=IDENTITY,
            )
        )
    except RPCError as err:
        raise _problem(err, deployment) from err


async def make_current_if_none(
    client: Client,
    version: WorkerDeploymentVersion,
    *,
    always: bool = False,
    within: float = FIRST_CURRENT_WITHIN_SECONDS,
) -> bool:
    """Make this worker's build the deployment's current one when the deployment has none
    (a first install: `make demo`, compose, the first deploy), or `always` (`herald dev`,
    whose code is the current code). Any later build waits for an operator's `herald
    deploy promote`. Retries while the server has not yet registered the version (its
    pollers reach the server a moment after the worker starts); True when it set it."""
    deadline = time.monotonic() + within
    pause = 0.2
    while True:
        try:
            if not always:
                found = await describe(client, version.deployment_name)
                if found.current is not None:
                    return False
            await set_current(client, version.deployment_name, version.build_id)
            log.info(
                "made build %s the current version of deployment %s",
                version.build_id,
                version.deployment_name,
            )
            return True
        except DeploymentError as err:
            cause = err.__cause__
            # Not registered yet, a concurrent change, or the server's per-deployment
            # rate limit (several workers starting at once): try again, more slowly.
            passing = isinstance(cause, RPCError) and cause.status in (
                RPCStatusCode.NOT_FOUND,
                RPCStatusCode.FAILED_PRECONDITION,
                RPCStatusCode.ABORTED,
                RPCStatusCode.RESOURCE_EXHAUSTED,
            )
            if not passing or time.monotonic() > deadline:
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, 2.0)
