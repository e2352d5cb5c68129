"""The harness never calls a state isolated without proof, and its controls never cry wolf."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import cast

import pytest

from leakcheck.clients import Driver
from leakcheck.ini import PoolSettings
from leakcheck.probes import PROBES, Probe
from leakcheck.provision.base import Backend, Endpoint
from leakcheck.provision.native import NativeBackend
from leakcheck.runner import Target, run_probe
from leakcheck.verdicts import Route, Verdict
from leakcheck.versions import Version

from .conftest import DRIVERS, TEST_BOUNCER, TEST_PG, Measure

pytestmark = pytest.mark.integration


class NoPooler:
    """Hands out the direct PostgreSQL address where a PgBouncer was asked for."""

    def __init__(self, real: NativeBackend) -> None:
        self.real = real

    def postgres(self, pg: Version) -> Endpoint:
        return self.real.postgres(pg)

    @contextlib.contextmanager
    def bouncer(self, pg: Version, bouncer: Version, settings: PoolSettings) -> Iterator[Endpoint]:
        yield self.real.postgres(pg)


@pytest.mark.parametrize("driver", DRIVERS, ids=str)
@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.id)
def test_without_a_shared_server_a_probe_is_an_error_never_isolated(
    native: NativeBackend, measure: Measure, probe: Probe, driver: Driver
) -> None:
    pg = measure.pg(TEST_PG[0])
    fake = cast(Backend, NoPooler(native))
    outcome = run_probe(fake, probe, Target(pg, pg, Route.TRANSACTION, driver))
    assert outcome.verdict is Verdict.ERROR, outcome.evidence
    assert "did not share the server" in outcome.evidence


@pytest.mark.parametrize("route", [Route.DIRECT, Route.SESSION], ids=str)
@pytest.mark.parametrize("driver", DRIVERS, ids=str)
@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.id)
def test_every_probe_is_isolated_on_the_controls(measure: Measure, probe: Probe, driver: Driver, route: Route) -> None:
    bouncer = None if route is Route.DIRECT else TEST_BOUNCER[-1]
    outcome = measure(probe, TEST_PG[0], bouncer, driver, route)
    assert outcome.verdict is Verdict.ISOLATED, outcome.evidence
