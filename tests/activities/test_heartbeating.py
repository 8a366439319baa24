"""Sending activities heartbeat while they run, and stop when they return."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.testing import ActivityEnvironment

import activities
from activities import heartbeating


async def test_an_activity_heartbeats_while_it_runs_and_not_after(monkeypatch) -> None:
    monkeypatch.setattr(activities, "HEARTBEAT_EVERY_SECONDS", 0.01)
    beats: list[object] = []
    three = asyncio.Event()

    def on_heartbeat(*details: object) -> None:
        beats.append(details)
        if len(beats) >= 3:
            three.set()

    @heartbeating
    async def send(token: str) -> str:
        await asyncio.wait_for(three.wait(), 10)  # returns only once it has heartbeaten
        return f"sent {token}"

    env = ActivityEnvironment()
    env.on_heartbeat = on_heartbeat
    assert await env.run(send, "t-1") == "sent t-1"
    after = len(beats)
    # Ten heartbeat intervals later no beat has been added: the beating task was stopped.
    await asyncio.sleep(0.1)
    assert len(beats) == after >= 3


async def test_an_error_from_the_activity_still_stops_the_heartbeats(monkeypatch) -> None:
    monkeypatch.setattr(activities, "HEARTBEAT_EVERY_SECONDS", 0.01)
    beats: list[object] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *d: beats.append(d)

    @heartbeating
    async def send() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("carrier said no")

    with pytest.raises(RuntimeError, match="carrier said no"):
        await env.run(send)
    after = len(beats)
    await asyncio.sleep(0.1)
    assert len(beats) == after
