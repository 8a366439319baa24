"""`herald bench` starts its stack again on other ports when one it picked was taken
before it could bind it (free_port's race), and only then."""

from __future__ import annotations

from typing import Any

import pytest

from bench import stack
from devstack import PortInUse


def _starts(monkeypatch: pytest.MonkeyPatch, outcomes: list[Any]) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    async def once(**kwargs: Any) -> Any:
        calls.append(kwargs)
        outcome = outcomes[len(calls) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(stack, "_start_bench_once", once)
    return calls


async def test_a_taken_port_starts_the_stack_again_on_other_ports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken = PortInUse("127.0.0.1", 41234, "HERALD_API_PORT")
    calls = _starts(monkeypatch, [taken, taken, "the bench"])
    said: list[str] = []
    assert await stack.start_bench(sms_rate=5.0, log=said.append, workers=2) == "the bench"
    assert len(calls) == 3 and all(c["workers"] == 2 and c["sms_rate"] == 5.0 for c in calls)
    assert (
        said
        == [
            "127.0.0.1:41234 is already in use (another `herald dev`? "
            "HERALD_API_PORT moves it); starting again on other ports"
        ]
        * 2
    )


async def test_a_port_taken_every_time_is_reported_after_the_last_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken = PortInUse("127.0.0.1", 41234, "HERALD_API_PORT")
    calls = _starts(monkeypatch, [taken] * stack.START_ATTEMPTS)
    with pytest.raises(PortInUse):
        await stack.start_bench(sms_rate=5.0, log=lambda _: None)
    assert len(calls) == stack.START_ATTEMPTS


async def test_any_other_start_failure_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _starts(monkeypatch, [RuntimeError("worker exited: bad sender"), "the bench"])
    with pytest.raises(RuntimeError, match="bad sender"):
        await stack.start_bench(sms_rate=5.0, log=lambda _: None)
    assert len(calls) == 1
