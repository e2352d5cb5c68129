"""The agent protocol's optional `cancel_key` op on real servers: node-postgres and pgx answer the
BackendKeyData their driver holds, so `cancel_routed` runs through them on a PgBouncer fleet; an
agent whose hello does not offer it makes the probe *not applicable*, saying so."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from leakcheck.drivers.agents import client as agents
from leakcheck.drivers.agents.client import AgentClient
from leakcheck.drivers.clients import connect
from leakcheck.model.target import Driver
from leakcheck.model.verdicts import Verdict
from leakcheck.provision.native import NativeBackend
from leakcheck.provision.postgres.fixtures import APP_ROLE
from leakcheck.run.runner import run_probe
from tests.servers.test_fleet import CANCEL_ROUTED, fleet_target
from tests.support.servers import TEST_PG, Measure

pytestmark = pytest.mark.servers

ANSWERING = [Driver("node-postgres"), Driver("pgx")]


@pytest.fixture(autouse=True)
def _stop_agents() -> Iterator[None]:
    yield
    agents.stop_all()


@pytest.mark.parametrize("driver", ANSWERING, ids=str)
def test_an_agent_that_offers_cancel_key_answers_its_backends_pid_and_a_key(measure: Measure, driver: Driver) -> None:
    async def run() -> tuple[tuple[int, int], int]:
        direct = measure.backend.postgres(measure.pg(TEST_PG[0])).as_user(APP_ROLE)
        client = await connect(driver, "A", direct)
        assert isinstance(client, AgentClient)
        try:
            return await client.cancel_key(), (await client.query("SELECT pg_backend_pid()"))[0][0]
        finally:
            await client.close()

    (pid, key), backend_pid = asyncio.run(run())
    # directly, BackendKeyData's pid is the backend's own: the agent answered what its driver was given
    assert pid == backend_pid and key != 0 and -2**31 <= key < 2**31


@pytest.mark.parametrize("driver", ANSWERING, ids=str)
def test_an_agents_cancel_sent_to_the_other_process_is_lost_without_peering_and_acts_with_it(
        native: NativeBackend, driver: Driver) -> None:
    lost = run_probe(native, CANCEL_ROUTED, fleet_target(native, "no", driver))
    cancelled = run_probe(native, CANCEL_ROUTED, fleet_target(native, "yes", driver))
    assert (lost.verdict, cancelled.verdict) == (Verdict.LOST, Verdict.ISOLATED), (lost.evidence, cancelled.evidence)


def test_cancel_routed_through_an_agent_that_does_not_offer_cancel_key_is_not_applicable_saying_so(
        native: NativeBackend) -> None:
    outcome = run_probe(native, CANCEL_ROUTED, fleet_target(native, "yes", Driver("postgres-js")))
    assert outcome.verdict is Verdict.NOT_APPLICABLE, outcome.evidence
    assert "the postgres-js agent does not answer cancel_key" in outcome.evidence, outcome.evidence
