"""A driver that loops (ActiveRecord 6.1 re-runs a statement PostgreSQL refuses, for ever) is a stall measured
once the witness counted LOOP_RUNS runs of the client's statements within one call, not at the step's bound;
a call that keeps one statement running, or returns, is no loop. Once measured, the loop is ended (the witness
ends the backends its statements run on) and its call waited for, within LOOP_END."""

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
    ended: list[str] = field(default_factory=list)  #: the tags whose backends it ended
    #: set when it ends them: the looping call fails and returns (None: the call goes on regardless)
    call_ends: asyncio.Event | None = None

    def runs(self, tag_text: str, within: float) -> set[tuple[ServerId, str]]:
        n = next(self.looks)
        return {(SERVER, str(n if self.new_each_look else 0))}

    def holding(self, servers: set[ServerId]) -> list[tuple[ServerId, str]]:
        return []

    def busy(self, server: ServerId) -> str | None:
        return None

    def end_runs(self, tag_text: str, servers: set[ServerId]) -> int:
        assert servers == {SERVER}  # only the backends the loop was counted on
        self.ended.append(tag_text)
        if self.call_ends is not None:
            self.call_ends.set()
        return 1


async def _loop_call(witness: _Witness) -> None:
    """A driver's loop that runs until the witness ends its backends."""
    witness.call_ends = asyncio.Event()
    await witness.call_ends.wait()


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
        await asyncio.wait_for(s._bounded(s.a, "run", _loop_call(s.witness)), 5)  # type: ignore[arg-type]

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
        await s._bounded(s.a, "run", _loop_call(s.witness))  # type: ignore[arg-type]

    with pytest.raises(Stalled, match="its statements 100 times"):
        asyncio.run(step())
    looks = paces[1:-2]  # (the last two: the wait for the ended call, and the cancelled call's CANCEL_GRACE)
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


def test_once_a_loop_is_measured_the_witness_ends_its_backends_and_its_call_returns_before_the_scenario_goes_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # an agent whose call returned is free when its client closes: given back to its slot, not stopped (a new
    # agent booted for the lane's next probe); the verdict is the loop's, taken before
    monkeypatch.setattr(scenario_module, "LOOP_WATCH", 0.01)
    witness = _Witness(new_each_look=True)
    s = _scenario(witness)
    returned: list[bool] = []

    async def loop_then_fail() -> None:
        await _loop_call(witness)
        returned.append(True)
        raise ConnectionError("the server closed the connection")

    async def step() -> None:
        await s._bounded(s.a, "run", loop_then_fail())

    with pytest.raises(Stalled, match="its statements 100 times .* a loop"):
        asyncio.run(step())
    assert witness.ended == [f"/* leakcheck {s.token} A */"] and returned == [True]


def test_a_loop_that_goes_on_after_its_backends_were_ended_is_left_after_loop_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenario_module, "LOOP_WATCH", 0.01)
    monkeypatch.setattr(scenario_module, "LOOP_END", 0.05)
    witness = _Witness(new_each_look=True)
    s = _scenario(witness)

    async def step() -> None:
        await asyncio.wait_for(s._bounded(s.a, "run", asyncio.sleep(60)), 5)

    with pytest.raises(Stalled, match="a loop"):
        asyncio.run(step())
    assert len(witness.ended) >= 2  # ended again at each look while the call went on


def test_a_loop_whose_end_fails_is_still_the_measured_stall_and_its_call_is_left(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # ending the loop is the harness's clean-up after the verdict: the witness failing there (its server went
    # away: the runner's watcher tells that apart) must not turn the measured loop into a harness error
    monkeypatch.setattr(scenario_module, "LOOP_WATCH", 0.01)
    witness = _Witness(new_each_look=True)

    def broken(tag_text: str, servers: set[ServerId]) -> int:
        raise OSError("the witness's connection was closed")

    witness.end_runs = broken  # type: ignore[method-assign]
    s = _scenario(witness)

    async def step() -> None:
        await asyncio.wait_for(s._bounded(s.a, "run", asyncio.sleep(60)), 5)

    with pytest.raises(Stalled, match="a loop"):
        asyncio.run(step())
