"""A client's step is bounded even when its driver does not let a cancelled call go (psycopg 3.1's COPY
waits for a server that never answers): the scenario goes on after the step's bound and a grace."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from leakcheck.model.target import Route
from leakcheck.probes import scenario as scenario_module
from leakcheck.probes.scenario import Scenario


@dataclass
class _Labelled:
    label: str


async def _deaf_to_cancel() -> None:
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        await asyncio.sleep(60)  # a driver that waits for the server before it lets the call go


def test_a_call_its_driver_will_not_let_go_ends_the_step_at_its_bound_and_a_grace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenario_module, "STEP_BOUND", 0.2)
    monkeypatch.setattr(scenario_module, "CANCEL_GRACE", 0.2)
    a = _Labelled("A")
    scenario = Scenario(a=a, b=_Labelled("B"), route=Route.TRANSACTION)  # type: ignore[arg-type]

    async def step() -> None:
        await asyncio.wait_for(scenario._bounded(a, "COPY", _deaf_to_cancel()), 5)  # type: ignore[arg-type]

    with pytest.raises(TimeoutError, match="A's 'COPY' did not return within 0 s"):
        asyncio.run(step())


def test_a_call_that_returns_in_time_gives_its_result() -> None:
    a = _Labelled("A")
    scenario = Scenario(a=a, b=_Labelled("B"), route=Route.TRANSACTION)  # type: ignore[arg-type]

    async def quick() -> int:
        return 7

    assert asyncio.run(scenario._bounded(a, "SELECT", quick())) == 7  # type: ignore[arg-type]
