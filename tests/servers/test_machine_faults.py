"""A failure the machine caused is an error, never a verdict, and never reaches a baseline.

The machine fault is real: B's sort spills to disk under `SET LOCAL temp_file_limit = '64kB'`,
so PostgreSQL refuses it with 53400 (configuration_limit_exceeded, class 53 "insufficient
resources", the class of 53100 disk_full), after B has read A's leaked setting, as in issue 16.
"""

from __future__ import annotations

import pytest

from leakcheck.gate import record
from leakcheck.gate.baseline import Expectation
from leakcheck.gate.expectations import key
from leakcheck.model.target import Driver, Route
from leakcheck.model.verdicts import Observation, Verdict
from leakcheck.probes import PROBES
from leakcheck.probes.base import Login, probe
from leakcheck.probes.scenario import Scenario
from leakcheck.probes.settings import setting
from tests.support.servers import DRIVERS, TEST_BOUNCER, TEST_PG, Measure

pytestmark = pytest.mark.servers

_SORT = "SELECT count(*)::text FROM (SELECT g FROM generate_series(1, 200000) g ORDER BY g DESC) s"


@probe("temp_space_runs_out", "B reads A's setting, then its sort runs out of temporary space", login=Login.SUPERUSER)
async def temp_space_runs_out(s: Scenario) -> Observation:
    # A: a custom setting; B: reads it (a leak through a pool of one), then sorts on a tiny temp limit.
    await s.change(s.a, "SET leakcheck.tenant", "SET leakcheck.tenant = 'tenant_a'")
    seen = await s.observe(s.b, "read leakcheck.tenant", setting("leakcheck.tenant"))
    sorted_ = await s.transaction(s.b, "sort", "SET LOCAL work_mem = '64kB'", "SET LOCAL temp_file_limit = '64kB'",
                                  _SORT)
    return Observation(evidence=f"B read {seen!r}; its sort gave {sorted_}", leaked=seen == "tenant_a",
                       broke=str(sorted_) if sorted_.failed else None)


@pytest.mark.parametrize("driver", DRIVERS, ids=str)
def test_running_out_of_temporary_space_is_an_error_never_breaks(measure: Measure, driver: Driver) -> None:
    outcome = measure(temp_space_runs_out, TEST_PG[0], TEST_BOUNCER[0], driver)
    assert outcome.verdict is Verdict.ERROR, outcome.evidence
    assert "the machine failed, not the feature" in outcome.evidence
    assert "53400" in outcome.evidence


@pytest.mark.parametrize("driver", DRIVERS, ids=str)
def test_a_machine_fault_never_reaches_a_baseline(measure: Measure, driver: Driver) -> None:
    outcome = measure(temp_space_runs_out, TEST_PG[0], TEST_BOUNCER[0], driver)
    previous = {key(outcome): Expectation(Verdict.ISOLATED)}
    written = record.plan(previous, [outcome])  # --record and --update both write through plan
    assert written.verdicts == previous
    assert written.unrecorded == {key(outcome): "error"}
    assert record.plan({}, [outcome]).verdicts == {}


@pytest.mark.parametrize("driver", DRIVERS, ids=str)
def test_a_session_ended_by_the_leaked_idle_timeout_is_still_a_leak(measure: Measure, driver: Driver) -> None:
    idle = next(p for p in PROBES if p.id == "idle_in_transaction_timeout")
    outcome = measure(idle, TEST_PG[0], None, driver, Route.SHARED)  # B drives A's session: it is ended
    assert outcome.verdict is Verdict.LEAKS, outcome.evidence
    assert "after idling 0.15 s in a transaction B's next statement gave " in outcome.evidence
