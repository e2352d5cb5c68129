"""A driver's refusal of a value its server reported (pgjdbc closes its connection on a DateStyle that does
not begin with ISO) is not applicable only when the application that set the value refuses it; another
application's value reaching a driver is that application's lost connection: breaks, never "not applicable".
Measured with real drivers, a mixed pair (--pairs) through PgBouncer 1.18: psycopg and pgjdbc."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from leakcheck.drivers.agents import client as agents
from leakcheck.model.target import Application, Driver, Route, Target
from leakcheck.model.verdicts import Fact, Observation, Verdict
from leakcheck.probes.base import probe, said
from leakcheck.probes.scenario import Scenario
from leakcheck.probes.settings import setting
from leakcheck.provision.native import NativeBackend
from leakcheck.run.runner import run_probe
from tests.support.servers import TEST_BOUNCER, TEST_PG, Measure

pytestmark = pytest.mark.servers


@pytest.fixture(autouse=True)
def _stop_agents() -> Iterator[None]:
    yield
    agents.stop_all()


@probe("datestyle_reaches_b", "A's DateStyle reported to B's driver")
async def datestyle_reaches_b(s: Scenario) -> Observation:
    b_before = await s.observe(s.b, "read DateStyle", setting("DateStyle"))  # B has acted
    await s.change(s.a, "SET DateStyle", "SET DateStyle = 'SQL, DMY'")
    mine = await s.observe(s.a, "read DateStyle", setting("DateStyle"))
    # A's value reported to B's driver, as through a pooler that does not track DateStyle (PgBouncer does, so B's
    # own statement on the server they share puts it there)
    told = await s.run(s.b, "A's DateStyle reported", "SELECT set_config('DateStyle', 'SQL, DMY', false)")
    return Observation(evidence=f"B read {said(b_before)}; A set 'SQL, DMY' (read {said(mine)}); B was told it: {told}",
                       leaked=not told.failed)


def _pair(native: NativeBackend, measure: Measure, a: str, b: str) -> Target:
    return Target(measure.pg(TEST_PG[0]), measure.bouncer(TEST_BOUNCER[0]), Route.TRANSACTION, Driver(a),
                  b=Application(Driver(b)))


def test_a_datestyle_b_s_driver_refuses_is_b_s_broken_connection_not_not_applicable(
        native: NativeBackend, measure: Measure) -> None:
    outcome = run_probe(native, datestyle_reaches_b, _pair(native, measure, "psycopg", "pgjdbc"))
    assert outcome.verdict is Verdict.BREAKS, outcome.evidence
    assert {Fact.BROKE, Fact.DISCONNECTED} <= set(outcome.facts), outcome
    assert "B's driver refused to go on" in outcome.evidence and "DateStyle" in outcome.evidence, outcome.evidence


def test_a_driver_refusing_the_datestyle_its_own_application_set_after_b_acted_is_not_applicable(
        native: NativeBackend, measure: Measure) -> None:
    outcome = run_probe(native, datestyle_reaches_b, _pair(native, measure, "pgjdbc", "psycopg"))
    assert outcome.verdict is Verdict.NOT_APPLICABLE, outcome.evidence
    assert "A's driver refused to go on" in outcome.evidence, outcome.evidence
