"""Both backends give the same verdict for every probe and driver on the same versions."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from leakcheck.probes import PROBES, Probe
from leakcheck.provision.base import Backend
from leakcheck.provision.containers import ContainersBackend
from leakcheck.provision.native import NativeBackend
from leakcheck.runner import run_probe
from leakcheck.verdicts import Driver, Pooler, PoolerKind, Route, Target, Verdict
from leakcheck.versions import parse_spec

from .test_containers_backend import _engine_or_skip, _template

pytestmark = pytest.mark.containers

PG = os.environ.get("LEAKCHECK_CROSS_PG", "16,18").split(",")
BOUNCER = os.environ.get("LEAKCHECK_CROSS_BOUNCER", "1.24,1.26").split(",")


@pytest.fixture(scope="module")
def backends(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    _engine_or_skip()
    pg_image = _template(request.config, "leakcheck_pg_image", "LEAKCHECK_PG_IMAGE") or "postgres:{version}"
    bouncer_image = _template(request.config, "leakcheck_bouncer_image", "LEAKCHECK_BOUNCER_IMAGE")
    with NativeBackend() as native, ContainersBackend(pg_image=pg_image, bouncer_image=bouncer_image) as containers:
        yield {"native": native, "containers": containers}


def _target(backend: Backend, pg: str, bouncer: str, driver: Driver) -> Target:
    version = backend.resolve_pooler(PoolerKind.PGBOUNCER, parse_spec(bouncer, "--bouncer"))
    return Target(backend.resolve_pg(parse_spec(pg, "--pg")), Pooler(PoolerKind.PGBOUNCER, version),
                  Route.TRANSACTION, driver)


@pytest.mark.parametrize("driver", list(Driver), ids=str)
@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.id)
@pytest.mark.parametrize("bouncer", BOUNCER)
@pytest.mark.parametrize("pg", PG)
def test_the_containers_backend_gives_the_native_verdict(
    backends: dict[str, Any], pg: str, bouncer: str, probe: Probe, driver: Driver
) -> None:
    native_target = _target(backends["native"], pg, bouncer, driver)
    container_target = _target(backends["containers"], pg, bouncer, driver)
    # The same releases on both sides, or the comparison means nothing.
    assert (native_target.pg, native_target.pooler) == (container_target.pg, container_target.pooler)
    native = run_probe(backends["native"], probe, native_target)
    contained = run_probe(backends["containers"], probe, container_target)
    # Two errors are equal verdicts but no comparison: neither backend measured anything.
    assert native.verdict is not Verdict.ERROR, f"native could not measure: {native.evidence}"
    assert contained.verdict is not Verdict.ERROR, f"containers could not measure: {contained.evidence}"
    assert contained.verdict is native.verdict, f"native: {native.evidence}\ncontainers: {contained.evidence}"
