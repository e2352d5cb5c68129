"""Both backends give the same verdict for every probe and driver on the same versions: PgBouncer for
every probe, Odyssey and pgpool-II for a handful (the ones whose state each pooler handles differently)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from leakcheck.model.target import NATIVE_DRIVERS, Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.verdicts import Verdict
from leakcheck.model.versions import parse_spec
from leakcheck.probes import PROBES, select
from leakcheck.probes.base import Probe
from leakcheck.provision.base import Backend
from leakcheck.provision.containers.backend import ContainersBackend
from leakcheck.provision.native import NativeBackend
from leakcheck.run.runner import run_probe
from tests.containers.test_containers_backend import _engine_or_skip, _template

pytestmark = pytest.mark.containers

PG = os.environ.get("LEAKCHECK_CROSS_PG", "16,18").split(",")
BOUNCER = os.environ.get("LEAKCHECK_CROSS_BOUNCER", "1.24,1.26").split(",")
POOLER_PG = os.environ.get("LEAKCHECK_CROSS_POOLER_PG", "16")
#: KIND:VERSION pairs compared on POOLER_PG for the probes below (--pooler's syntax).
POOLERS = os.environ.get("LEAKCHECK_CROSS_POOLERS", "odyssey:1.5,pgpool:4.3").split(",")
POOLER_PROBES = select("statement_timeout,custom_setting,set_local,sql_prepare,protocol_prepare,temp_table")


@pytest.fixture(scope="module")
def backends(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    _engine_or_skip()
    pg_image = _template(request.config, "leakcheck_pg_image", "LEAKCHECK_PG_IMAGE") or "postgres:{version}"
    bouncer_image = _template(request.config, "leakcheck_bouncer_image", "LEAKCHECK_BOUNCER_IMAGE")
    odyssey_image = _template(request.config, "leakcheck_odyssey_image", "LEAKCHECK_ODYSSEY_IMAGE")
    pgpool_image = _template(request.config, "leakcheck_pgpool_image", "LEAKCHECK_PGPOOL_IMAGE")
    containers = ContainersBackend(pg_image=pg_image, bouncer_image=bouncer_image, odyssey_image=odyssey_image,
                                   pgpool_image=pgpool_image)
    with NativeBackend() as native, containers:
        yield {"native": native, "containers": containers, "images": {"odyssey": odyssey_image, "pgpool": pgpool_image}}


def _target(
    backend: Backend, pg: str, bouncer: str, driver: Driver, kind: PoolerKind = PoolerKind.PGBOUNCER,
    route: Route = Route.TRANSACTION,
) -> Target:
    version = backend.resolve_pooler(kind, parse_spec(bouncer, "--pooler"))
    return Target(backend.resolve_pg(parse_spec(pg, "--pg")), Pooler(kind, version), route, driver)


def _same_verdict(backends: dict[str, Any], probe: Probe, native_target: Target, container_target: Target) -> None:
    # The same releases on both sides, or the comparison means nothing.
    assert (native_target.pg, native_target.pooler) == (container_target.pg, container_target.pooler)
    native = run_probe(backends["native"], probe, native_target)
    contained = run_probe(backends["containers"], probe, container_target)
    # Two errors are equal verdicts but no comparison: neither backend measured anything.
    assert native.verdict is not Verdict.ERROR, f"native could not measure: {native.evidence}"
    assert contained.verdict is not Verdict.ERROR, f"containers could not measure: {contained.evidence}"
    assert contained.verdict is native.verdict, f"native: {native.evidence}\ncontainers: {contained.evidence}"
    # Two "not applicable" agree, but compare a refusal, not a measured verdict: shown as a skip, never a pass.
    if native.verdict is Verdict.NOT_APPLICABLE:
        pytest.skip(f"not applicable on both backends, nothing measured to compare: {native.evidence}")


@pytest.mark.parametrize("driver", list(NATIVE_DRIVERS), ids=str)
@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.id)
@pytest.mark.parametrize("bouncer", BOUNCER)
@pytest.mark.parametrize("pg", PG)
def test_the_containers_backend_gives_the_native_verdict(
    backends: dict[str, Any], pg: str, bouncer: str, probe: Probe, driver: Driver
) -> None:
    native_target = _target(backends["native"], pg, bouncer, driver)
    container_target = _target(backends["containers"], pg, bouncer, driver)
    _same_verdict(backends, probe, native_target, container_target)


@pytest.mark.parametrize("driver", list(NATIVE_DRIVERS), ids=str)
@pytest.mark.parametrize("probe", POOLER_PROBES, ids=lambda p: p.id)
@pytest.mark.parametrize("route", [Route.TRANSACTION, Route.SESSION], ids=str)
@pytest.mark.parametrize("pooler", POOLERS)
def test_odyssey_and_pgpool_in_containers_give_the_native_verdict(
    backends: dict[str, Any], pooler: str, route: Route, probe: Probe, driver: Driver
) -> None:
    # The session route (the negative control) is measured through the pooler too: for pgpool-II, whose
    # subject route is not applicable to these probes (it shares no server between connected clients),
    # it is where the containers serve the probes at all.
    kind, _, version = pooler.partition(":")
    if kind == "pgpool" and route is Route.TRANSACTION:
        pytest.skip("pgpool-II shares no server between connected clients: every probe is not applicable there, "
                    "so its subject route compares nothing (its session route is compared)")
    if not backends["images"][kind]:
        pytest.skip(f"give --{kind}-image (or LEAKCHECK_{kind.upper()}_IMAGE; scripts/ci-docker.sh run sets it)")
    native_target = _target(backends["native"], POOLER_PG, version, driver, PoolerKind(kind), route)
    container_target = _target(backends["containers"], POOLER_PG, version, driver, PoolerKind(kind), route)
    _same_verdict(backends, probe, native_target, container_target)
