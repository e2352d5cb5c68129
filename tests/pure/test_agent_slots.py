"""Agents are reused per lane thread and client label, except those of a driver that names its
statements from a counter of the whole process (catalogue `names_per_process`, pgx, tokio-postgres)
which may have named one: they serve that probe only, so every probe starts with counters where a fresh
process's are, whatever the lane ran before. Real processes (a Python program speaking the agent
protocol's hello), no server."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakcheck.drivers.agents import client as agents
from leakcheck.drivers.agents.catalogue import Shipped
from leakcheck.drivers.agents.process import AgentProcess
from leakcheck.drivers.agents.spec import AgentSpec

_AGENT = ("import sys, json\n"
          "for line in sys.stdin:\n"
          "    answer = {'id': json.loads(line)['id'], 'ok': True, 'protocol': 1, 'driver': 'fake'}\n"
          "    print(json.dumps(answer), flush=True)\n")


def _start() -> AgentProcess:
    return AgentProcess("fake", [sys.executable, "-c", _AGENT], Path("/"))


@pytest.fixture(autouse=True)
def _stop_agents() -> Iterator[None]:
    agents.stop_all()
    yield
    agents.stop_all()


def _leased(shipped: Shipped) -> AgentProcess:
    slot = agents._slot(shipped, "A")
    agent = agents._lease(_start, slot)
    agents._give_back(slot, agent)
    return agent


def test_an_agent_whose_driver_names_statements_per_process_serves_one_probe_then_ends() -> None:
    pgx_like = Shipped(AgentSpec("fake", "python", ()), "false", names_per_process=True)
    agents.next_probe()
    first = _leased(pgx_like)
    assert _leased(pgx_like) is first  # the same probe reconnects through the same process
    agents.next_probe()
    second = _leased(pgx_like)
    assert second is not first and not first.alive


def test_an_agent_whose_driver_names_statements_per_connection_is_reused_by_the_next_probe() -> None:
    per_connection = Shipped(AgentSpec("fake", "python", ()), "false")
    agents.next_probe()
    first = _leased(per_connection)
    agents.next_probe()
    assert _leased(per_connection) is first and first.alive


def _client(hello: str) -> agents.AgentClient:
    """A client of a fake agent whose hello adds `hello` (JSON members), connected (every answer ok)."""
    import asyncio

    from leakcheck.provision.base import Endpoint

    program = _AGENT.replace("'driver': 'fake'}", "'driver': 'fake', " + hello + "}")
    shipped = Shipped(AgentSpec("fake", "python", ()), "false")
    start = lambda: AgentProcess("fake", [sys.executable, "-c", program], Path("/"))  # noqa: E731
    return asyncio.run(agents.AgentClient.open(shipped, start, "B", Endpoint("127.0.0.1", 1)))


def test_an_agent_whose_driver_drops_notifications_makes_reading_them_not_applicable_in_its_words() -> None:
    from leakcheck.model.errors import NotApplicable

    dropping = _client("'no_notifications': 'its connection drops them'")
    with pytest.raises(NotApplicable, match="the fake agent receives no notifications: its connection drops them"):
        _ = dropping.notifications
    assert _client("'ops': []").notifications == []


def _named_per_process(named: str) -> tuple[Shipped, object]:
    """A driver whose names count per process, and the start of a fake agent of it whose answers add `named`."""
    program = _AGENT.replace("'driver': 'fake'}", "'driver': 'fake'" + named + "}")
    tokio_like = Shipped(AgentSpec("fake", "python", ()), "false", names_per_process=True)
    return tokio_like, lambda: AgentProcess("fake", [sys.executable, "-c", program], Path("/"))


def _served(shipped: Shipped, start: object) -> AgentProcess:
    """The agent process of one client of label A, connected and closed."""
    import asyncio

    from leakcheck.provision.base import Endpoint

    async def one() -> AgentProcess:
        client = await agents.AgentClient.open(shipped, start, "A", Endpoint("127.0.0.1", 1))  # type: ignore[arg-type]
        await client.close()
        return client._lease.agent

    return asyncio.run(one())


def test_an_agent_that_names_per_process_and_says_it_named_none_serves_the_next_probe_too() -> None:
    shipped, start = _named_per_process(", 'named': False")
    agents.next_probe()
    first = _served(shipped, start)
    agents.next_probe()
    assert _served(shipped, start) is first and first.alive


def test_an_agent_that_names_per_process_and_may_have_named_one_serves_only_that_probe() -> None:
    for named in (", 'named': True", ""):  # its word, or no word (pgx v4's agent)
        shipped, start = _named_per_process(named)
        agents.next_probe()
        first = _served(shipped, start)
        assert _served(shipped, start) is first  # the same probe reconnects through the same process
        agents.next_probe()
        assert _served(shipped, start) is not first and not first.alive
