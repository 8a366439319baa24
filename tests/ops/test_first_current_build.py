"""Which build a worker makes current at start (runtime/deployments.py): its own where the
deployment has none (a first install), never over an operator's choice, except `herald
dev`'s worker, which always does. Against the dev server, with bare workers of each build."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import Worker, WorkerDeploymentConfig

from devstack import free_port
from devstack.temporal import TemporalDevServer
from runtime import deployments

pytestmark = pytest.mark.e2e

DEPLOYMENT = "herald-first"


@workflow.defn(name="Nothing", versioning_behavior=VersioningBehavior.PINNED)
class Nothing:
    @workflow.run
    async def run(self) -> None:
        return None


@pytest.fixture(scope="module")
def server() -> Iterator[TemporalDevServer]:
    dev = TemporalDevServer(None, port=free_port(), ui_port=None)
    dev.start()
    yield dev
    dev.stop()


@pytest.fixture
async def client(server: TemporalDevServer) -> AsyncIterator[Client]:
    yield await Client.connect(server.address)


def versioned(client: Client, build: str) -> Worker:
    return Worker(
        client,
        task_queue="first-current",
        workflows=[Nothing],
        deployment_config=WorkerDeploymentConfig(
            version=WorkerDeploymentVersion(DEPLOYMENT, build), use_worker_versioning=True
        ),
    )


async def test_the_first_build_becomes_current_a_later_one_only_when_told(client: Client) -> None:
    first = WorkerDeploymentVersion(DEPLOYMENT, "1.0.0+aaaaaaa")
    later = WorkerDeploymentVersion(DEPLOYMENT, "1.1.0+bbbbbbb")
    async with versioned(client, first.build_id), versioned(client, later.build_id):
        # No current build yet: the first worker's own becomes current once registered.
        assert await deployments.make_current_if_none(client, first)
        # A later build leaves the current one alone (an operator promotes it)...
        assert not await deployments.make_current_if_none(client, later)
        assert (await deployments.describe(client, DEPLOYMENT)).current == first.build_id
        # ...except in `herald dev`, where the worker's code is the current code.
        assert await deployments.make_current_if_none(client, later, always=True)
        assert (await deployments.describe(client, DEPLOYMENT)).current == later.build_id


async def test_an_unknown_deployment_is_one_line_naming_it(client: Client) -> None:
    with pytest.raises(deployments.DeploymentError, match="no Worker Deployment 'nobody'"):
        await deployments.describe(client, "nobody")
