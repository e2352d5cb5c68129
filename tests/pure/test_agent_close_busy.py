"""An agent still in a call the harness gave up on (a driver's loop, a pool that stalled) is stopped at once when
its client closes, not asked to close behind that call (CLOSE_TIMEOUT, then a stop's STOP_TIMEOUT), and never given
back for the slot's next probe."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from leakcheck.drivers.agents import client as client_module
from leakcheck.drivers.agents.client import AgentClient, _Lease


@dataclass
class _Agent:
    busy: bool
    stopped: list[float] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)

    def stop(self, grace: float = 5.0) -> None:
        self.stopped.append(grace)

    def request(self, op: str, timeout: float = 30.0, by: str = "", **fields: Any) -> dict[str, Any]:
        self.asked.append(op)
        return {"ok": True}


SLOT = ("activerecord", "lane-test", "A", None)


def _close(agent: _Agent) -> None:
    client = AgentClient("A", "", _Lease(SLOT, agent), None)  # type: ignore[arg-type]
    asyncio.run(client.close())


def test_an_agent_still_in_an_abandoned_call_is_stopped_at_once_and_not_given_back() -> None:
    agent = _Agent(busy=True)
    _close(agent)
    assert agent.stopped == [0] and agent.asked == []
    assert agent not in client_module._idle.get(SLOT, [])  # type: ignore[comparison-overlap]


def test_an_idle_agent_is_asked_to_close_and_given_back() -> None:
    agent = _Agent(busy=False)
    _close(agent)
    assert agent.asked == ["close"] and agent.stopped == []
    assert agent in client_module._idle.pop(SLOT)  # type: ignore[comparison-overlap]
