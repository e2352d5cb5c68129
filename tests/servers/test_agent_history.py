"""A verdict does not depend on which probes an agent process ran before (issue 18).

pgx v4 names its statements `lrupsc_N_M`, N a counter of the whole process (one statement cache per
connection). On the shared route only A's agent connects (B is A), so agents reused from probe to probe
would drift apart and A's and B's names stop colliding; the catalogue marks such a driver, and its agent
serves a later probe only where its close said its counter is back where a fresh process's is (pgx v4's
sets it back once its connection is closed), so every probe sees two identical application processes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from leakcheck.drivers.agents import client as agents
from leakcheck.drivers.clients import connect
from leakcheck.model.target import Driver, Route
from leakcheck.model.verdicts import Verdict
from leakcheck.provision.postgres.fixtures import APP_ROLE
from tests.support.servers import TEST_PG, Measure

pytestmark = pytest.mark.servers

PGX = Driver("pgx")


@pytest.fixture(autouse=True)
def _stop_agents() -> Iterator[None]:
    agents.stop_all()
    yield
    agents.stop_all()


def test_pgx_protocol_prepare_after_a_shared_route_probe_on_the_same_thread_measures_what_a_fresh_lane_does(
        measure: Measure) -> None:
    fresh = measure("protocol_prepare", TEST_PG[0], "1.18", PGX)
    control = measure("protocol_prepare", TEST_PG[0], "1.18", PGX, Route.SHARED)
    after = measure("protocol_prepare", TEST_PG[0], "1.18", PGX)
    assert fresh.verdict not in (Verdict.ERROR, Verdict.NOT_APPLICABLE), fresh.evidence
    assert control.verdict is not Verdict.ERROR, control.evidence
    assert after.verdict is fresh.verdict, (fresh.evidence, after.evidence)


def test_a_pgx_agent_serves_the_threads_next_probe_and_names_its_statements_as_a_fresh_one(measure: Measure) -> None:
    direct = measure.backend.postgres(measure.pg(TEST_PG[0])).as_user(APP_ROLE)

    async def probe() -> tuple[int, object]:
        agents.next_probe()  # as the runner does when a probe starts
        client = await connect(PGX, "A", direct)
        try:
            await client.prepared("SELECT 1")
            return client.agent_pid, await client.query("SELECT array_agg(name) FROM pg_prepared_statements")
        finally:
            await client.close()

    (first, names), (second, again) = asyncio.run(probe()), asyncio.run(probe())
    assert names == again == [(["lrupsc_1_0"],)], (names, again)
    assert first == second  # one process served both: no start and stop for the second
