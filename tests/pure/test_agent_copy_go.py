"""An agent's COPY pause ends on the harness's evidence: once `settled` has seen the server fail the COPY, the
client sends the agent a `go` beside its running copy_in (docs/agent-protocol.md), and the evidence keeps that
only where the agent's answer says its pause ended on it; without a sighting, or to an agent whose hello does
not offer `go`, none is sent and the pause runs to its bound."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

from leakcheck.drivers.agents.catalogue import shipped
from leakcheck.drivers.agents.client import AgentClient, _Lease
from leakcheck.drivers.interface import CopyIn


@dataclass
class _Agent:
    """What client.py asks of an agent process: a copy_in that pauses until a `go` (or `pause_ms`), as the
    shipped agents do, answered with the copy's own error."""

    ops: tuple[str, ...]
    hears: bool = True  # whether its pause ends on a `go` (a broken agent's does not)
    asked: list[str] = field(default_factory=list)
    went: threading.Event = field(default_factory=threading.Event)

    @property
    def hello(self) -> dict[str, Any]:
        return {"ops": list(self.ops)}

    driver = "fake"
    about = "the fake agent"

    def request(self, op: str, timeout: float = 30.0, by: str = "", **fields: Any) -> dict[str, Any]:
        self.asked.append(op)
        if op == "go":
            if self.hears:
                self.went.set()
            return {"ok": True}
        assert op == "copy_in"
        ended_on_go = self.went.wait(fields["pause_ms"] / 1000)
        failed = {"ok": False, "error": {"sqlstate": "22P04", "class": "Fake", "message": "missing data"}}
        return {**failed, "go": True} if ended_on_go else failed


def _copy(settled: float | None, after: float = 0.0) -> CopyIn:
    async def wait() -> float | None:
        await asyncio.sleep(after)
        return settled

    return CopyIn(sql="COPY t FROM STDIN", table="t", columns=("a",), first="x\n", rows="r\n", times=1, pause=0.2,
                  settled=wait)


def _run(agent: _Agent, copy: CopyIn) -> str:
    client = AgentClient("A", "", _Lease(("fake", "lane-test", "A", None), agent),  # type: ignore[arg-type]
                         shipped("ruby-pg"))  # type: ignore[arg-type]
    try:
        asyncio.run(client.copy_in(copy))
    except Exception as exc:  # the copy's own error, as a statement's
        return type(exc).__name__
    return "ok"


def test_an_agent_that_offers_go_is_sent_one_once_the_server_was_seen_to_fail_the_copy() -> None:
    agent, copy = _Agent(("copy_in", "go")), _copy(0.03)
    assert _run(agent, copy) == "ServerError"  # the copy's 22P04, still the call's error
    assert agent.asked == ["copy_in", "go"] and copy.seen == [0.03]


def test_a_go_the_agent_s_pause_did_not_end_on_is_not_evidence() -> None:
    agent, copy = _Agent(("copy_in", "go"), hears=False), _copy(0.03)
    _run(agent, copy)
    assert agent.asked == ["copy_in", "go"] and copy.seen == []  # the evidence then says its 1 s bound


def test_no_go_is_sent_when_the_server_was_not_seen_to_fail_the_copy() -> None:
    agent, copy = _Agent(("copy_in", "go")), _copy(None)
    _run(agent, copy)
    assert agent.asked == ["copy_in"] and copy.seen == []


def test_an_agent_whose_hello_does_not_offer_go_pauses_to_its_bound_and_is_sent_none() -> None:
    agent, copy = _Agent(("copy_in",)), _copy(0.03)
    _run(agent, copy)
    assert agent.asked == ["copy_in"] and copy.seen == []
