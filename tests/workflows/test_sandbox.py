"""Herald's workflow runner (runtime.sandbox) keeps the SDK sandbox's restrictions and
refuses a data converter whose payloads would need a serialization context."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
import temporalio.converter
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowFailureError
from temporalio.worker import Worker

from runtime.sandbox import needs_contexts, sandbox_runner
from tests.workflows.clock_workflow import WallClockWorkflow


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
