"""Real servers for the integration tests: one native backend for the whole session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from leakcheck.model.errors import LeakcheckError
from leakcheck.model.target import NATIVE_DRIVERS
from leakcheck.model.verdicts import Driver, Outcome, Pooler, PoolerKind, Route, Target
from leakcheck.model.versions import Version, parse_spec
from leakcheck.probes import PROBES
from leakcheck.probes.base import Probe
from leakcheck.provision.host.system import ServerUser, cache_root, server_user
from leakcheck.provision.native import NativeBackend
from leakcheck.provision.postgres.binaries import resolve_pg
from leakcheck.provision.postgres.server import PgServer
from leakcheck.run.runner import run_probe

#: Versions the facts are checked on; override with LEAKCHECK_TEST_PG / LEAKCHECK_TEST_BOUNCER.
TEST_PG = os.environ.get("LEAKCHECK_TEST_PG", "16,18").split(",")
TEST_BOUNCER = os.environ.get("LEAKCHECK_TEST_BOUNCER", "1.18,1.24,1.26").split(",")
DRIVERS = list(NATIVE_DRIVERS)


@pytest.fixture(scope="session")
def native() -> Iterator[NativeBackend]:
    with NativeBackend() as backend:
        yield backend


class Measure:
    """Resolve versions once and run a probe by id on a chosen route."""

    def __init__(self, backend: NativeBackend) -> None:
        self.backend = backend
        self._pg: dict[str, Version] = {}
        self._bouncer: dict[str, Pooler] = {}

    def pg(self, spec: str) -> Version:
        if spec not in self._pg:
            self._pg[spec] = self.backend.resolve_pg(parse_spec(spec, "--pg"))
        return self._pg[spec]

    def bouncer(self, spec: str) -> Pooler:
        """The PgBouncer `spec` resolves to, at its defaults (no settings axes)."""
        if spec not in self._bouncer:
            version = self.backend.resolve_pooler(PoolerKind.PGBOUNCER, parse_spec(spec, "--bouncer"))
            self._bouncer[spec] = Pooler(PoolerKind.PGBOUNCER, version)
        return self._bouncer[spec]

    def __call__(self, probe: str | Probe, pg: str, bouncer: str | None, driver: Driver,
                 route: Route = Route.TRANSACTION) -> Outcome:
        chosen = probe if isinstance(probe, Probe) else next(p for p in PROBES if p.id == probe)
        target = Target(self.pg(pg), self.bouncer(bouncer) if bouncer else None, route, driver)
        return run_probe(self.backend, chosen, target)


@pytest.fixture(scope="session")
def measure(native: NativeBackend) -> Measure:
    return Measure(native)


#: PostgreSQL for the tests of one server process: the first of these this machine has or can fetch.
PG_CANDIDATES = ("16", "15", "17", "18")


@pytest.fixture(scope="module")
def user() -> ServerUser:
    return server_user()


@pytest.fixture(scope="module")
def postgres(user: ServerUser) -> Iterator[PgServer]:
    """One PostgreSQL of its own for a module that starts pooler processes by hand."""
    errors = []
    for raw in PG_CANDIDATES:
        try:
            install = resolve_pg(parse_spec(raw, "--pg"), cache_root())
            break
        except LeakcheckError as exc:
            errors.append(str(exc))
    else:
        pytest.fail("no PostgreSQL to test against: " + " | ".join(errors))
    with PgServer(install, cache_root(), user) as server:
        yield server
