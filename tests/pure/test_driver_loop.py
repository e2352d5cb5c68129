"""A driver that loops (ActiveRecord 6.1 re-runs a statement PostgreSQL refuses, for ever) is a stall measured
once the witness counted LOOP_RUNS runs of the client's statements within one call, not at the step's bound;
a call that keeps one statement running, or returns, is no loop."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

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
