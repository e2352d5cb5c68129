"""A PgBouncer fleet on the containers backend: one published port, a container and a socket per
process, peering, a rolling upgrade, a lost container, and nothing left after exit or Ctrl-C.

Images as in test_containers_backend.py ($LEAKCHECK_PG_IMAGE / $LEAKCHECK_BOUNCER_IMAGE, which
scripts/ci-docker.sh run sets); the rolling upgrade needs a --bouncer-image template for 1.26.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

docker = pytest.importorskip("docker")
pytest.importorskip("testcontainers")
if TYPE_CHECKING:
    from docker.client import DockerClient

from leakcheck.model.errors import ProvisionError  # noqa: E402
from leakcheck.model.target import Driver, Pooler, PoolerKind, Route, Target  # noqa: E402
from leakcheck.model.verdicts import Verdict  # noqa: E402
from leakcheck.model.versions import parse_spec  # noqa: E402
from leakcheck.probes import PROBES  # noqa: E402
from leakcheck.provision.base import Endpoint  # noqa: E402
from leakcheck.provision.containers.backend import ContainersBackend  # noqa: E402
from leakcheck.provision.containers.engine import connect  # noqa: E402
from leakcheck.provision.pgbouncer.admin import show_version  # noqa: E402
from leakcheck.run.runner import pool_settings, pooler_lane, run_probe  # noqa: E402

pytestmark = pytest.mark.containers

CANCEL_ROUTED = next(p for p in PROBES if p.id == "cancel_routed")


@pytest.fixture(scope="module")
def engine() -> Iterator[DockerClient]:
    try:
        connect().client.close()
    except ProvisionError as exc:
        pytest.skip(f"{exc}; scripts/ci-docker.sh start runs one")
    client = docker.from_env()
    yield client
    client.close()


def _backend() -> ContainersBackend:
    return ContainersBackend(pg_image=os.environ.get("LEAKCHECK_PG_IMAGE") or "postgres:{version}",
                             bouncer_image=os.environ.get("LEAKCHECK_BOUNCER_IMAGE") or None)


@pytest.fixture(scope="module")
def backend(engine: DockerClient) -> Iterator[ContainersBackend]:
    with _backend() as running:
        yield running


def fleet_target(backend: ContainersBackend, peering: str, releases: tuple[str, ...] = ("1.24", "1.24")) -> Target:
    pg = backend.resolve_pg(parse_spec("16", "--pg"))
    versions = tuple(backend.resolve_pooler(PoolerKind.PGBOUNCER, parse_spec(r, "--bouncer")) for r in releases)
    pooler = Pooler(PoolerKind.PGBOUNCER, versions[0], (("peering", peering),), fleet=versions)
    return Target(pg, pooler, Route.TRANSACTION, Driver.ASYNCPG)


@contextlib.contextmanager
def _using(backend: ContainersBackend, target: Target) -> Iterator[Endpoint]:
    """The cell's fleet, as a probe of cancel_routed gets it."""
    settings = pool_settings(CANCEL_ROUTED, target)
    assert target.pooler is not None and settings is not None
    with backend.pooler(target.pg, target.pooler, settings, pooler_lane(target)) as endpoint:
        yield endpoint


def _leftovers(engine: DockerClient, run_id: str) -> list[str]:
    label = {"label": f"org.leakcheck.run={run_id}"}
    return [c.name for c in engine.containers.list(all=True, filters=label)] + [
        n.name for n in engine.networks.list(filters=label)]


def _folders(run_id: str) -> list[Path]:
    return list(Path(os.environ.get("TMPDIR", "/tmp")).glob(f"leakcheck-fleet-{run_id}-*"))


def test_a_routed_cancel_between_containers_is_lost_without_peering_and_acts_with_it(
    backend: ContainersBackend,
) -> None:
    lost = run_probe(backend, CANCEL_ROUTED, fleet_target(backend, "no"))
    cancelled = run_probe(backend, CANCEL_ROUTED, fleet_target(backend, "yes"))
    assert (lost.verdict, cancelled.verdict) == (Verdict.LOST, Verdict.ISOLATED), (lost.evidence, cancelled.evidence)


def test_a_rolling_upgrade_runs_each_release_in_its_own_container_behind_one_published_port(
    backend: ContainersBackend, engine: DockerClient,
) -> None:
    if not os.environ.get("LEAKCHECK_BOUNCER_IMAGE"):
        pytest.skip("PgBouncer 1.26 needs an image template ($LEAKCHECK_BOUNCER_IMAGE; scripts/ci-docker.sh sets it)")
    target = fleet_target(backend, "yes", ("1.24", "1.26"))
    with _using(backend, target) as endpoint:
        versions = [show_version(member) for member in endpoint.members]
    assert [v.split()[1][:4] for v in versions] == ["1.24", "1.26"], versions
    [fleet] = [f for (_, pooler, _, _), f in backend._fleets.items() if pooler == target.pooler]
    ports = [engine.containers.get(c._name).attrs["NetworkSettings"]["Ports"] for c in fleet.containers]
    assert [bool(p) for p in ports] == [True, False], ports  # one port published, the second shares it


def test_a_fleet_that_lost_a_container_is_an_error_naming_it_and_nothing_is_left_after_exit(
    engine: DockerClient,
) -> None:
    with _backend() as backend:
        run_id = backend.engine.run_id
        target = fleet_target(backend, "yes")
        with _using(backend, target):
            pass
        [second] = [c for c in engine.containers.list(filters={"label": f"org.leakcheck.run={run_id}"})
                    if c.name.endswith("-2") and "fleet" in c.name]
        second.kill()
        outcome = run_probe(backend, CANCEL_ROUTED, target)
        assert outcome.verdict is Verdict.ERROR and "process 2 of the fleet" in outcome.evidence, outcome.evidence
        assert _folders(run_id)
    assert _leftovers(engine, run_id) == [] and _folders(run_id) == []


def test_a_ctrl_c_inside_a_fleet_s_use_leaves_no_container_network_or_folder(engine: DockerClient) -> None:
    run_id = ""
    with pytest.raises(KeyboardInterrupt), _backend() as backend:
        run_id = backend.engine.run_id
        with _using(backend, fleet_target(backend, "no")):
            assert len(_leftovers(engine, run_id)) >= 3  # PostgreSQL, its network, two PgBouncers
            raise KeyboardInterrupt
    assert run_id and _leftovers(engine, run_id) == [] and _folders(run_id) == []
