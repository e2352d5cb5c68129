"""A client's close cut short (the runner's CLOSE_WAIT, or a probe's own bound) stops its agent rather than leaving
it neither given back nor stopped, running until the run's end; and the runner's bound keeps a probe whose step
stalled to its bound, then closed three clients slowly, inside PROBE_TIMEOUT (a measured stall, not an error)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from leakcheck.drivers.agents import client as client_module
from leakcheck.drivers.agents import process
from leakcheck.drivers.agents.client import ABANDONED_END, CLOSE_BOUND, CLOSE_TIMEOUT, AgentClient, _Lease
from leakcheck.probes.scenario import CANCEL_GRACE, STEP_BOUND
from leakcheck.run import runner


def test_an_agent_s_close_bound_counts_its_own_waits_and_its_stop() -> None:
    # the close's own waits, then a stop at its default grace (the close request's fault stops the agent so)
    assert CLOSE_BOUND >= ABANDONED_END + CLOSE_TIMEOUT + process.STOP_TIMEOUT + 2 * process.TERM_TIMEOUT


def test_a_stalled_step_and_three_slow_closes_still_end_within_the_probe_s_bound() -> None:
    assert STEP_BOUND + CANCEL_GRACE + 3 * runner.CLOSE_WAIT < runner.PROBE_TIMEOUT
    assert "CLOSE_WAIT" in inspect.getsource(runner._close)


@dataclass
class _Slow:
    """An agent whose abandoned call answers only after the close was cut short."""

    busy: bool = True
    stopped: list[float] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def idle_within(self, seconds: float) -> bool:
        time.sleep(0.2)
        return True

    def stop(self, grace: float = 5.0) -> None:
        self.stopped.append(grace)
        self.done.set()

    def request(self, op: str, timeout: float = 30.0, by: str = "", **fields: Any) -> dict[str, Any]:
        return {"ok": True}


def test_an_agent_whose_close_is_cut_short_is_stopped_not_left_running() -> None:
    agent = _Slow()
    slot = ("activerecord", "lane-close-bound", "A", None)
    client = AgentClient("A", "", _Lease(slot, agent), None)  # type: ignore[arg-type]

    async def cut_short() -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(client.close(), 0.05)

    asyncio.run(cut_short())
    assert agent.done.wait(2.0) and agent.stopped == [0]
    assert agent not in client_module._idle.get(slot, [])  # type: ignore[comparison-overlap]
