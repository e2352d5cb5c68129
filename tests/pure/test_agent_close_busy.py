"""An agent still in a call the harness gave up on (a driver's loop, a pool that stalled) is given ABANDONED_END
for that call's answer when its client closes: a call the harness freed (it ended the server connection a
stalled pool was held by, or closed the holding client) answers within milliseconds, and its agent is then
closed and given back for the slot's next probe. One whose call does not end is stopped, not asked to close
behind that call (CLOSE_TIMEOUT, then a stop's STOP_TIMEOUT), and never given back."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from leakcheck.drivers.agents import client as client_module
from leakcheck.drivers.agents.client import ABANDONED_END, AgentClient, _Lease


@dataclass
class _Agent:
    busy: bool
    #: seconds until the call in flight answers (None: never)
    answers_in: float | None = None
    stopped: list[float] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)
    waited: list[float] = field(default_factory=list)

    def idle_within(self, seconds: float) -> bool:
        self.waited.append(seconds)
        return self.answers_in is not None and self.answers_in <= seconds

    def stop(self, grace: float = 5.0) -> None:
        self.stopped.append(grace)

    def request(self, op: str, timeout: float = 30.0, by: str = "", **fields: Any) -> dict[str, Any]:
        self.asked.append(op)
        return {"ok": True}


SLOT = ("activerecord", "lane-test", "A", None)


def _close(agent: _Agent) -> None:
    client = AgentClient("A", "", _Lease(SLOT, agent), None)  # type: ignore[arg-type]
    asyncio.run(client.close())


def test_an_agent_still_in_an_abandoned_call_that_does_not_end_is_stopped_and_not_given_back() -> None:
    agent = _Agent(busy=True)
    _close(agent)
    assert agent.waited == [ABANDONED_END] and agent.stopped == [0] and agent.asked == []
    assert agent not in client_module._idle.get(SLOT, [])  # type: ignore[comparison-overlap]


def test_an_agent_whose_abandoned_call_answers_soon_after_is_closed_and_given_back() -> None:
    agent = _Agent(busy=True, answers_in=0.03)  # a pool the harness freed: the waiting call went on
    _close(agent)
    assert agent.asked == ["close"] and agent.stopped == []
    assert agent in client_module._idle.pop(SLOT)  # type: ignore[comparison-overlap]


def test_an_idle_agent_is_asked_to_close_and_given_back() -> None:
    agent = _Agent(busy=False)
    _close(agent)
    assert agent.asked == ["close"] and agent.stopped == [] and agent.waited == []
    assert agent in client_module._idle.pop(SLOT)  # type: ignore[comparison-overlap]
