"""The one adapter between discovery and leakcheck's backend: "a pooled endpoint with fresh server
connections, and a direct one". Nothing else in leakcheck/discover imports leakcheck.provision, so a
change of the Backend protocol (PgBouncer -> any pooler) touches only this module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..provision.base import Backend, Endpoint
from ..provision.bouncer_ini import PoolMode, PoolSettings
from ..provision.fixtures import APP_ROLE
from ..provision.native import NativeBackend
from ..verdicts import Driver, Route, Target, Verdict
from ..versions import Version, parse_spec

#: Pool settings per route: transaction mode with a pool of one (A and B share its one server
#: connection); session mode with two (each keeps its own), the negative control.
__all__ = ["Endpoint", "Lab", "Where", "cache_dir", "open_lab", "resolve"]

POOLS = {Route.TRANSACTION: PoolSettings(PoolMode.TRANSACTION, 1), Route.SESSION: PoolSettings(PoolMode.SESSION, 2)}
LANE = "discover"


@dataclass(frozen=True)
class Where:
    """What a run measured on, for reports and the example database's keys."""

    pg: Version
    pooler: Version | None  # None on the direct route
    route: Route

    def describe(self) -> str:
        if self.pooler is None:
            return f"PostgreSQL {self.pg}, two direct sessions"
        settings = POOLS[self.route]
        return (f"PostgreSQL {self.pg}, PgBouncer {self.pooler} (pool_mode={settings.mode.value}, "
                f"default_pool_size={settings.pool_size})")


class Lab:
    """Endpoints for one (PostgreSQL, pooler, route); clients log in as the application role."""

    def __init__(self, backend: Backend, where: Where) -> None:
        self.backend = backend
        self.where = where

    @contextlib.contextmanager
    def subject(self) -> Iterator[Endpoint]:
        """The route under test, starting from fresh server connections on each use."""
        if self.where.route is Route.DIRECT or self.where.pooler is None:
            yield self.direct()
            return
        with self.backend.bouncer(self.where.pg, self.where.pooler, POOLS[self.where.route], LANE) as endpoint:
            yield endpoint.as_user(APP_ROLE)

    def direct(self) -> Endpoint:
        """A direct PostgreSQL endpoint (the reference: each client its own session)."""
        return self.backend.postgres(self.where.pg).as_user(APP_ROLE)

    def describe(self) -> list[str]:
        return list(self.backend.describe())

    def probe_verdicts(self, ids: Iterable[str], driver: Driver) -> dict[str, Verdict]:
        """What these probes measure on this cell (route, versions, driver): a finding is *known*
        only where the probe it maps to really reports a problem here."""
        from ..probes import PROBES
        from ..runner import run_probe

        wanted = set(ids)
        target = Target(self.where.pg, self.where.pooler, self.where.route, driver)
        return {p.id: run_probe(self.backend, p, target).verdict for p in PROBES if p.id in wanted}


def resolve(backend: Backend, pg: str, pooler: str | None, route: Route) -> Lab:
    """Resolve the versions (fetching or building them if needed) and make the lab."""
    pg_version = backend.resolve_pg(parse_spec(pg, "--pg"))
    pooler_version = None
    if route is not Route.DIRECT:
        assert pooler is not None, "a pooled route needs a pooler version"
        pooler_version = backend.resolve_bouncer(parse_spec(pooler, "--bouncer"))
    return Lab(backend, Where(pg_version, pooler_version, route))


@contextlib.contextmanager
def open_lab(pg: str, pooler: str | None, route: Route) -> Iterator[Lab]:
    """The native backend for one discovery run: servers stop and temp dirs go when it ends."""
    with NativeBackend() as backend:
        yield resolve(backend, pg, pooler, route)


def cache_dir() -> Path:
    """leakcheck's cache (LEAKCHECK_CACHE, /var/cache/leakcheck as root, else ~/.cache/leakcheck)."""
    from ..provision.system import cache_root

    return cache_root()
