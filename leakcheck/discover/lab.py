"""The one adapter between discovery and leakcheck's backends: "a pooled endpoint with fresh server
connections, and a direct one", for any pooler leakcheck runs (PgBouncer, Odyssey, pgpool-II, on
the native or containers backend) and for a running pooler by DSN. Nothing else in
leakcheck/discover imports leakcheck.provision.

The cell is resolved with the matrix's own machinery (config.Config, matrix_run.MatrixRun), so
`--bouncer`, `--pooler`, `--bouncer-set`, `--bouncer-ini`, `--backend` and `--pooled-dsn` mean what
they mean for the matrix; discovery measures exactly one cell.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from leakcheck.config import preflight
from leakcheck.config.config import Config
from leakcheck.drivers.clients import driver_version
from leakcheck.drivers.interface import Client
from leakcheck.model.errors import UsageError
from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.model.target import Application, Driver, Pooler, PoolerKind, Route, Setting, Target
from leakcheck.model.verdicts import Verdict
from leakcheck.model.versions import Spec, Version
from leakcheck.provision.base import USER, Backend, Endpoint
from leakcheck.provision.postgres.fixtures import APP_ROLE
from leakcheck.run import running_pooler
from leakcheck.run.matrix import MatrixRun
from leakcheck.run.runner import SESSION_POOL, ignored_startup, subject_mode

#: The backend's pooler process for discovery (its own, beside the matrix's lanes).
LANE = "discover"


@dataclass(frozen=True)
class LabRoute:
    """The PostgreSQL, pooler, route and pool settings a lab measures on (a Target without its driver, with
    the pool settings), for reports and the example database's keys."""

    pg: Version
    pooler: Pooler | None  # None on the direct route
    route: Route
    settings: PoolSettings | None = None

    def describe(self) -> str:
        if self.pooler is None or self.settings is None:
            return f"PostgreSQL {self.pg}, two direct sessions"
        if not self.pooler.kind.started:
            return f"PostgreSQL {self.pg} behind the running pooler {self.pooler.label()} (--pooled-dsn)"
        # e.g. PgBouncer's setting by its name, as the README shows it
        pool = self.pooler.kind.record.pool_size_words.format(size=self.settings.pool_size)
        named = self.pooler.label().removeprefix(self.pooler.kind.value)  # `PgBouncer 1.24.1[...]`
        return (f"PostgreSQL {self.pg}, {self.pooler.kind.product} {named} "
                f"(pool_mode={self.settings.mode.value}, {pool})")


def pool_for(pooler: Pooler, route: Route) -> PoolSettings:
    """A pool of one in the pooler's pooling mode (transaction, or pgpool-II's session mode with room
    for both clients); session mode with one server each on the session control."""
    if route is Route.SESSION:
        return PoolSettings(PoolMode.SESSION, SESSION_POOL)
    mode = subject_mode(pooler)
    return PoolSettings(mode, 1 if mode is not PoolMode.SESSION else SESSION_POOL)


class Lab:
    """Endpoints for one (PostgreSQL, pooler, route); clients log in as the application role."""

    def __init__(self, backend: Backend, where: LabRoute) -> None:
        self.backend, self.where = backend, where

    @property
    def running_pooler(self) -> bool:
        """A pooler leakcheck did not start: no reset, no pool of one (see provision/dsn_backend.py)."""
        return self.where.pooler is not None and not self.where.pooler.kind.started

    @contextlib.contextmanager
    def subject(self) -> Iterator[Endpoint]:
        """The route under test, starting from fresh server connections on each use (a running
        pooler: as clean as DISCARD ALL makes them, see `clients`)."""
        if self.where.route is Route.DIRECT or self.where.pooler is None or self.where.settings is None:
            yield self.direct()
            return
        with self.backend.pooler(self.where.pg, self.where.pooler, self.where.settings, LANE) as endpoint:
            yield endpoint.as_user(APP_ROLE)

    def for_driver(self, *drivers: Driver) -> Lab:
        """This lab with the pooler told to ignore the startup parameters the drivers send (as the matrix tells
        it; a pair's both): pgjdbc's extra_float_digits, which PgBouncer refuses otherwise."""
        settings = self.where.settings
        if settings is None or not ignored_startup(*drivers):
            return self
        ignored = replace(settings, ignored_startup=ignored_startup(*drivers))
        return Lab(self.backend, replace(self.where, settings=ignored))

    def direct(self) -> Endpoint:
        """A direct PostgreSQL endpoint (the reference: each client its own session)."""
        return self.backend.postgres(self.where.pg).as_user(APP_ROLE)

    def superuser(self) -> Endpoint:
        """The direct endpoint as the run's superuser, for the witness (a --direct-dsn's own user)."""
        return self.backend.postgres(self.where.pg).as_user(USER)

    async def clients(self, a: Client, connect_b: Callable[[], Awaitable[Client]]) -> Client:
        """B, for a sequence that A starts: through a running pooler, A's server cleaned first and B
        connected until it shares A's server connection (bounded; else the sequence cannot run)."""
        if not self.running_pooler or self.where.route is not Route.TRANSACTION:
            return await connect_b()
        await running_pooler.discard(a)
        return await running_pooler.share_a_server(a, connect_b)

    async def done(self, a: Client, b: Client) -> None:
        """After a sequence through a running pooler: leave its server connections clean."""
        if self.running_pooler and self.where.route is Route.TRANSACTION:
            with contextlib.suppress(Exception):
                await running_pooler.discard(a, b)

    def describe(self) -> list[str]:
        return list(self.backend.describe())

    def probe_verdicts(self, ids: Iterable[str], driver: Driver, settings: tuple[Setting, ...] = (),
                       b: Application | None = None) -> dict[str, Verdict]:
        """What these probes measure on this cell (route, versions, driver and its settings, a pair's B): a
        finding is *known* only where the probe it maps to really reports a problem here."""
        from leakcheck.probes import PROBES
        from leakcheck.run.runner import run_probe

        wanted = set(ids)
        b = replace(b, version=driver_version(b.driver)) if b is not None else None
        target = Target(self.where.pg, self.where.pooler, self.where.route, driver, driver_version(driver), settings,
                        b)
        return {p.id: run_probe(self.backend, p, target).verdict for p in PROBES if p.id in wanted}


def at(backend: Backend, pg: Version, pooler: Pooler | None, route: Route) -> Lab:
    """A lab on versions already resolved by `backend` (the tests' shared backend)."""
    return Lab(backend, LabRoute(pg, pooler, route, pool_for(pooler, route) if pooler is not None else None))


def _lab_route(run: MatrixRun, route: Route) -> LabRoute:
    config = run.config
    if config.pooled_dsn is not None:
        if route is not Route.TRANSACTION:
            raise UsageError(f"--route={route} with --pooled-dsn: a running pooler is measured on its own route "
                             "only (its controls need --route=direct with leakcheck's servers)")
        pg = run.backend.resolve_pg(Spec("server"))
        pooler = Pooler(PoolerKind.RUNNING, None, config=config.dsn_name)
        return LabRoute(pg, pooler, route, PoolSettings(PoolMode.TRANSACTION, 1))
    pgs = list(dict.fromkeys(run.backend.resolve_pg(s) for s in config.pg))
    if len(pgs) != 1:
        raise UsageError("discover measures one cell: give one --pg (run it per cell)")
    if route is Route.DIRECT:
        return LabRoute(pgs[0], None, route)
    poolers = run.poolers()
    if len(poolers) != 1:
        raise UsageError(f"discover measures one cell, and these options name {len(poolers)} poolers "
                         f"({', '.join(p.label() for p in poolers)}): give one version and one value per setting")
    return LabRoute(pgs[0], poolers[0], route, pool_for(poolers[0], route))


@contextlib.contextmanager
def open_lab(raw: dict[str, str | None], route: Route) -> Iterator[Lab]:
    """The backend for one discovery run, from the matrix's options (`raw`, ini-key names): servers
    stop and temp dirs go when it ends. Inputs are checked before any server starts."""
    config = Config.from_strings({**raw, "leakcheck_controls": "no"})
    run = MatrixRun(config)
    preflight.check(config, run.choice[0])
    try:
        yield Lab(run.backend, _lab_route(run, route))
    finally:
        run.close()


def cache_dir() -> Path:
    """leakcheck's cache (LEAKCHECK_CACHE, /var/cache/leakcheck as root, else ~/.cache/leakcheck)."""
    from leakcheck.provision.host.system import cache_root

    return cache_root()
