"""Real servers for the integration tests: one native backend for the whole session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from leakcheck.model.errors import LeakcheckError
from leakcheck.model.versions import parse_spec
from leakcheck.provision.host.system import ServerUser, cache_root, server_user
from leakcheck.provision.native import NativeBackend
from leakcheck.provision.postgres.binaries import resolve_pg
from leakcheck.provision.postgres.server import PgServer
from tests.support.servers import DRIVERS, TEST_BOUNCER, TEST_PG, Measure  # noqa: F401 (older imports)


@pytest.fixture(scope="session")
def native() -> Iterator[NativeBackend]:
    with NativeBackend() as backend:
        yield backend


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
