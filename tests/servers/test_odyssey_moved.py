"""Odyssey hands out its server connections in its own order; the *_moved probes place A and B
themselves (Scenario.keep_a_home), so each gives one measured verdict from run to run."""

from __future__ import annotations

import pytest

from leakcheck.model.target import Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.verdicts import ServerId, Verdict
from leakcheck.model.versions import parse_spec
from leakcheck.probes import PROBES
from leakcheck.probes.base import Probe
from leakcheck.provision.native import NativeBackend
from leakcheck.run.runner import run_probe
from tests.support.servers import DRIVERS, TEST_PG, Measure

pytestmark = pytest.mark.servers

MOVED = [p for p in PROBES if p.id.endswith("_moved")]
RUNS = 5


@pytest.mark.parametrize("driver", DRIVERS, ids=str)
@pytest.mark.parametrize("probe", MOVED, ids=lambda p: p.id)
def test_a_moved_probe_gives_odyssey_one_measured_verdict_in_five_runs(
    native: NativeBackend, measure: Measure, probe: Probe, driver: Driver
) -> None:
    odyssey = Pooler(PoolerKind.ODYSSEY, native.resolve_pooler(PoolerKind.ODYSSEY, parse_spec("1.5", "--pooler")))
    target = Target(measure.pg(TEST_PG[0]), odyssey, Route.TRANSACTION, driver)
    earlier: set[ServerId] = set()  # as a matrix run does: fresh server connections for every probe
    runs = [run_probe(native, probe, target, earlier) for _ in range(RUNS)]
    seen = {o.verdict for o in runs}
    assert len(seen) == 1, [f"{o.verdict}: {o.evidence}" for o in runs]
    assert seen <= {Verdict.ISOLATED, Verdict.LEAKS, Verdict.LOST, Verdict.BREAKS}, runs[0].evidence
