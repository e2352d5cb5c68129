"""A driver that loops (ActiveRecord 6.1 re-runs a statement PostgreSQL refuses, for ever) is a stall measured
once the witness counted LOOP_RUNS runs of the client's statements within one call, not at the step's bound;
a call that keeps one statement running, or returns, is no loop."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest

from leakcheck.model.target import Route
from leakcheck.model.verdicts import ServerId
from leakcheck.probes import scenario as scenario_module
from leakcheck.probes.outcomes import Stalled
from leakcheck.probes.scenario import Scenario, looping

SERVER = ServerId(7, "1")


@dataclass
class _Labelled:
    label: str


@dataclass
class _Witness:
    """What pg_stat_activity shows at each look: a new statement start each time (a loop), or the same one."""

    new_each_look: bool
    looks: itertools.count[int] = field(default_factory=itertools.count)

    def runs(self, tag_text: str, within: float) -> set[tuple[ServerId, str]]:
        n = next(self.looks)
        return {(SERVER, str(n if self.new_each_look else 0))}

    def holding(self, servers: set[ServerId]) -> list[tuple[ServerId, str]]:
        return []

    def busy(self, server: ServerId) -> str | None:
        return None


def _scenario(witness: _Witness) -> Scenario:
    return Scenario(a=_Labelled("A"), b=_Labelled("B"), route=Route.TRANSACTION,  # type: ignore[arg-type]
                    witness=witness)  # type: ignore[arg-type]


def test_fewer_runs_than_the_threshold_are_no_loop_and_as_many_are_one() -> None:
    runs = {(SERVER, str(i)) for i in range(99)}
    assert looping(runs, 100) is None
    assert looping(runs | {(SERVER, "99")}, 100) == "its statements 100 times on pid 7"


def test_a_call_whose_statement_starts_again_at_every_look_is_stalled_as_a_loop_before_its_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenario_module, "LOOP_WATCH", 0.01)
    monkeypatch.setattr(scenario_module, "LOOP_LOOK", 0.001)
    s = _scenario(_Witness(new_each_look=True))

    async def step() -> None:
        await asyncio.wait_for(s._bounded(s.a, "run", asyncio.sleep(60)), 5)

    with pytest.raises(Stalled, match="its statements 100 times on pid 7 within .* a loop"):
        asyncio.run(step())


def test_a_call_whose_one_statement_keeps_running_is_no_loop_and_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenario_module, "LOOP_WATCH", 0.01)
    monkeypatch.setattr(scenario_module, "LOOP_LOOK", 0.001)
    monkeypatch.setattr(scenario_module, "LOOP_IDLE_LOOK", 0.001)
    s = _scenario(_Witness(new_each_look=False))

    async def slow() -> int:
        await asyncio.sleep(0.5)  # some 500 looks, each showing the same statement
        return 7

    assert asyncio.run(s._bounded(s.a, "run", slow())) == 7


def _paces(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """The timeouts of the scenario's waits on its call: LOOP_WATCH, then one a look."""
    monkeypatch.setattr(scenario_module, "LOOP_WATCH", 0.01)
    paces: list[float | None] = []
    real = asyncio.wait

    async def wait(tasks: Any, timeout: float | None = None) -> Any:
        paces.append(timeout)
        return await real(tasks, timeout=timeout)

    monkeypatch.setattr(asyncio, "wait", wait)
    return paces


def test_while_a_calls_statements_keep_starting_again_the_witness_looks_again_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a loop spins (its agent, the pooler, the server) until the count is made: 100 looks at 10 ms each took
    # ActiveRecord's loops 3-4 s on a busy machine, 1-2 s at LOOP_AGAIN
    paces = _paces(monkeypatch)
    s = _scenario(_Witness(new_each_look=True))

    async def step() -> None:
        await s._bounded(s.a, "run", asyncio.sleep(60))

    with pytest.raises(Stalled, match="its statements 100 times"):
        asyncio.run(step())
    looks = paces[1:-1]  # (the last: the cancelled call's CANCEL_GRACE)
    assert len(looks) == 99 and set(looks) == {scenario_module.LOOP_AGAIN}


def test_a_call_whose_one_statement_keeps_running_is_looked_at_ever_more_slowly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    paces = _paces(monkeypatch)
    monkeypatch.setattr(scenario_module, "LOOP_QUIET", 0.1)
    s = _scenario(_Witness(new_each_look=False))

    async def slow() -> int:
        await asyncio.sleep(0.3)
        return 7

    assert asyncio.run(s._bounded(s.a, "run", slow())) == 7
    looks = [pace for pace in paces[1:] if pace is not None]
    order = [scenario_module.LOOP_AGAIN, scenario_module.LOOP_LOOK, scenario_module.LOOP_IDLE_LOOK]
    assert looks[0] == scenario_module.LOOP_AGAIN and looks[-1] == scenario_module.LOOP_IDLE_LOOK
    assert [order.index(pace) for pace in looks] == sorted(order.index(pace) for pace in looks), looks
