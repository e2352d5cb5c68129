"""A PgBouncer fleet on real servers: one port, a socket per process, peering, a lost process."""

from __future__ import annotations

import os
import signal

import pytest

from leakcheck.drivers.agents import client as agents
from leakcheck.model.target import Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.verdicts import Verdict
from leakcheck.model.versions import parse_spec
from leakcheck.probes import PROBES
from leakcheck.provision.native import NativeBackend
from leakcheck.provision.pgbouncer.fleet import BouncerFleet
from leakcheck.run.runner import pool_settings, pooler_lane, run_probe

pytestmark = pytest.mark.servers

CANCEL_ROUTED = next(p for p in PROBES if p.id == "cancel_routed")
TIMEZONE = next(p for p in PROBES if p.id == "timezone")
CANCEL_OWN = next(p for p in PROBES if p.id == "cancel_own")


def fleet_target(backend: NativeBackend, peering: str, driver: Driver = Driver.ASYNCPG) -> Target:
    pg = backend.resolve_pg(parse_spec("16", "--pg"))
    version = backend.resolve_pooler(PoolerKind.PGBOUNCER, parse_spec("1.24", "--bouncer"))
    pooler = Pooler(PoolerKind.PGBOUNCER, version, (("peering", peering),), fleet=(version, version))
    return Target(pg, pooler, Route.TRANSACTION, driver)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_cancel_that_reaches_the_other_process_is_lost_without_peering_and_acts_with_it(
    native: NativeBackend,
) -> None:
    lost = run_probe(native, CANCEL_ROUTED, fleet_target(native, "no"))
    cancelled = run_probe(native, CANCEL_ROUTED, fleet_target(native, "yes"))
    assert (lost.verdict, cancelled.verdict) == (Verdict.LOST, Verdict.ISOLATED), (lost.evidence, cancelled.evidence)


def test_a_session_state_probe_across_two_processes_is_not_applicable_saying_they_never_share(
    native: NativeBackend,
) -> None:
    outcome = run_probe(native, TIMEZONE, fleet_target(native, "no", Driver.PSYCOPG))
    assert outcome.verdict is Verdict.NOT_APPLICABLE and "own pool" in outcome.evidence, outcome.evidence


def test_pgjdbc_reaches_each_process_of_a_fleet_at_its_socket_and_is_measured(native: NativeBackend) -> None:
    # pgjdbc has no Unix sockets of its own: the agent connects through junixsocket's socket factory
    across = fleet_target(native, "no", Driver("pgjdbc"))
    try:
        apart = run_probe(native, TIMEZONE, across)
        session = run_probe(native, CANCEL_OWN, Target(across.pg, across.pooler, Route.SESSION, across.driver))
    finally:
        agents.stop_all()
    assert apart.verdict is Verdict.NOT_APPLICABLE and "own pool" in apart.evidence, apart.evidence
    assert session.verdict is Verdict.ISOLATED, session.evidence


def test_a_fleet_that_lost_a_process_is_an_error_naming_it_and_nothing_is_left_running() -> None:
    with NativeBackend() as backend:
        target = fleet_target(backend, "yes")
        assert target.pooler is not None
        settings = pool_settings(CANCEL_ROUTED, target)
        assert settings is not None
        with backend.pooler(target.pg, target.pooler, settings, pooler_lane(target)) as endpoint:
            assert len(endpoint.members) == 2 and {m.port for m in endpoint.members} == {endpoint.port}
        [fleet] = [p for p in backend._poolers.values() if isinstance(p, BouncerFleet)]
        folders = [m.tmpdir for m in fleet.members]
        pids = [int((folder / "pgbouncer.pid").read_text()) for folder in folders if folder is not None]
        os.kill(pids[1], signal.SIGKILL)
        outcome = run_probe(backend, CANCEL_ROUTED, target)
        assert outcome.verdict is Verdict.ERROR and "process 2 of the fleet" in outcome.evidence, outcome.evidence
    assert not any(_alive(pid) for pid in pids)
    assert not any(folder is not None and folder.exists() for folder in folders)
