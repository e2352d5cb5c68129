"""The run: one backend, the resolved targets, every outcome, and how each is judged."""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from leakcheck.config.config import Config, PoolerTable
from leakcheck.drivers.agents import client as agents
from leakcheck.drivers.clients import driver_version
from leakcheck.drivers.settings import cell_settings
from leakcheck.model.axes import (
    NO_FLEET,
    PEERING,
    PEERING_FROM,
    DriverAxis,
    FleetShape,
    combinations,
    driver_combinations,
)
from leakcheck.model.errors import LeakcheckError, UsageError
from leakcheck.model.target import Application, Driver, Pooler, PoolerKind, Route, Setting, Target
from leakcheck.model.verdicts import Outcome
from leakcheck.model.versions import Spec, Version
from leakcheck.probes import witness as witnesses
from leakcheck.probes.base import Probe
from leakcheck.provision.base import Backend
from leakcheck.provision.host.timing import timed
from leakcheck.provision.pgbouncer import team_ini
from leakcheck.provision.pgbouncer.settings import header_keys
from leakcheck.provision.postgres.fixtures import refuse_older
from leakcheck.run import signals
from leakcheck.run.failfast import FailFast
from leakcheck.run.lanes import Lanes, agent_lanes_per_core, check_capacity, default_jobs, runs_agents
from leakcheck.run.runner import run_probe


def choose_backend(requested: str, pooled_dsn: str | None = None) -> tuple[str, str]:
    """The backend to use and why (`auto`: containers when a Docker engine answers, else native)."""
    if pooled_dsn is not None:
        return "dsn", "--pooled-dsn: a running pooler, nothing started"
    if requested != "auto":
        return requested, f"--backend={requested}"
    try:
        from leakcheck.provision.containers.engine import connect
    except ImportError:
        return "native", "auto: testcontainers is not installed (pip install 'leakcheck[containers]')"
    try:
        connect().client.close()
    except LeakcheckError as exc:
        return "native", f"auto: {exc}"
    return "containers", "auto: a Docker engine answered"


def make_backend(config: Config) -> Backend:
    """The backend `config.backend` names (`auto` decided by `choose_backend`)."""
    if config.pooled_dsn is not None:
        from leakcheck.provision.dsn_backend import RunningPoolerBackend

        running: Backend = RunningPoolerBackend(config.pooled_dsn, config.direct_dsn)
        return running
    if choose_backend(config.backend)[0] == "containers":
        from leakcheck.provision.containers.backend import ContainersBackend

        backend: Backend = ContainersBackend(pg_image=config.pg_image, images=config.images)
        return backend
    from leakcheck.provision.native import NativeBackend

    return NativeBackend()


def pooler_cells(
    tables: Sequence[PoolerTable], resolve: Callable[[PoolerKind, Spec], Version], fleet: FleetShape = NO_FLEET
) -> list[Pooler]:
    """Each table's versions (resolved) crossed with that table's own axes and ini, in order, once each.
    A fleet (the table's own, else `fleet`): each PgBouncer release as `size` processes, or (a rolling
    upgrade) one cell per order of its releases, each release first once (1.24,1.26 and 1.26,1.24)."""
    out: list[Pooler] = []
    for table in tables:
        own, rolled = (table.fleet if table.fleet.is_fleet else fleet), False
        for kind, spec in table.poolers:
            ini = table.ini if kind.record.team_file and table.ini else ""
            shapes: list[tuple[Version, ...]] = [(resolve(kind, spec),)]
            if kind.record.fleets and own.size > 1:
                shapes = [shapes[0] * own.size]
            elif kind.record.fleets and own.releases:
                if rolled:
                    continue  # the fleet's cells come once, at its first release
                rolled = True
                versions = [resolve(kind, s) for s in own.releases]
                shapes = [tuple(versions[i:] + versions[:i]) for i in range(len(versions))]
            for shape in shapes:
                for combo in combinations(table.axes, kind):
                    cell = Pooler(kind, shape[0], combo, ini, shape if len(shape) > 1 else ())
                    check_fleet(cell)
                    out.append(cell)
    return list(dict.fromkeys(out))


def check_fleet(cell: Pooler) -> None:
    """peering=yes on a release that refuses peer_id (PgBouncer 1.18: a fatal config error) is a one-line
    error before any server starts."""
    old = [v for v in cell.fleet if v < Version(PEERING_FROM)]
    if cell.setting(PEERING) == "yes" and old:
        raise UsageError(f"{cell.label()}: PgBouncer {old[0]} has no peering (peer_id and [peers] came in "
                         f"{'.'.join(map(str, PEERING_FROM))}); drop peering=yes or that release from the fleet")


DriverCell = tuple[Driver, Version | None, tuple[Setting, ...]]


def driver_cells(drivers: Sequence[Driver], axes: Sequence[DriverAxis],
                 version: Callable[[Driver], Version | None]) -> list[DriverCell]:
    """Each driver at its release crossed with its settings axes; a crossing that holds only the
    driver's defaults is the plain driver (ids unchanged), once."""
    out = [(d, version(d), cell_settings(d.value, combo)) for d in drivers for combo in driver_combinations(axes, d)]
    return list(dict.fromkeys(out))


#: A cell's clients: A's driver, release and settings (every client's but B's), and B's own application in a
#: mixed pair (None: B runs A's).
ClientCell = tuple[Driver, Version | None, tuple[Setting, ...], Application | None]


def client_cells(config: Config, version: Callable[[Driver], Version | None]) -> list[ClientCell]:
    """--drivers' cells (driver_cells), then each --pairs pair with both sides at their releases."""
    out: list[ClientCell] = [(d, v, s, None) for d, v, s in driver_cells(config.drivers, config.driver_axes, version)]
    out += [(a.driver, version(a.driver), a.settings, replace(b, version=version(b.driver))) for a, b in config.pairs]
    return list(dict.fromkeys(out))


@functools.cache
def _freeze_at_exit() -> None:
    """At the interpreter's exit (an atexit handler), what is left goes out of the collector's sight: the
    interpreter's last collections then walk none of it (they took ~0.25 s of a default matrix's end). Only at
    exit: a process that goes on after a run (discovery's labs, `leakcheck diff`'s two sides, an in-process
    pytest) keeps collecting what it no longer uses."""
    atexit.register(gc.freeze)


@dataclass
class MatrixRun:
    config: Config
    outcomes: list[Outcome] = field(default_factory=list)
    _backend: FailFast | None = None
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _choice: tuple[str, str] | None = None
    _lanes: Lanes | None = None

    @property
    def choice(self) -> tuple[str, str]:
        """The backend this run uses and why (decided once)."""
        if self._choice is None:
            self._choice = choose_backend(self.config.backend, self.config.pooled_dsn)
        return self._choice

    @property
    def why(self) -> str:
        return f"backend {self.choice[0]} ({self.choice[1]})"

    @property
    def backend(self) -> Backend:
        """The run's backend; a server that failed to start is not retried by later tests (FailFast)."""
        if self._backend is None:
            chosen = replace(self.config, backend=self.choice[0])
            self._backend = self._stack.enter_context(FailFast(make_backend(chosen)))
        return self._backend

    def close(self) -> None:
        with timed("teardown"):
            try:
                if self._lanes is not None:
                    self._lanes.close()
            finally:
                try:
                    # the driver agents the lanes reused, all at once; interrupted, without waiting for them to end
                    agents.stop_all(hurry=signals.received() is not None)
                    witnesses.close_all()  # the lanes' own sessions on PostgreSQL (probes/witness.py)
                finally:
                    self._stack.close()
                    _freeze_at_exit()

    @property
    def started(self) -> bool:
        """Whether `start` has put the selected tests into lanes."""
        return self._lanes is not None

    def start(self, work: Sequence[tuple[Probe, Target]]) -> None:
        """Run `work` (the selected tests, in pytest's order) in concurrent lanes from now on."""
        if self._lanes is None and work:
            failfast = self._failfast() if self._backend is not None else None

            def on_test(name: str) -> None:
                if failfast is not None:
                    failfast.current = name

            jobs = self.config.jobs or default_jobs(runs_agents(work), agent_lanes_per_core(work))
            self._lanes = Lanes(self.backend, jobs, _test_name, on_test)
            self._lanes.start(work)

    def poolers(self) -> list[Pooler]:
        """Every pooler cell: each --pooler/--bouncer version crossed with its kind's settings axes (a matrix
        file's: each [[pooler]] table's versions with that table's axes and ini)."""
        return pooler_cells(self.config.pooler_tables, self.backend.resolve_pooler, self.config.fleet)

    def targets(self) -> list[Target]:
        """Resolve every --pg and pooler value (fetching or building as needed)."""
        if self.config.pooled_dsn is not None:
            return self._running_pooler_targets()
        pgs = list(dict.fromkeys(self._pg(s) for s in self.config.pg))
        poolers = self.poolers()
        drivers = client_cells(self.config, driver_version)
        out = [Target(pg, p, Route.TRANSACTION, d, v, s, b) for pg in pgs for p in poolers for d, v, s, b in drivers]
        if self.config.controls:
            out += [Target(pg, None, route, d, v, s, b) for route in (Route.DIRECT, Route.SHARED)
                    for pg in pgs for d, v, s, b in drivers]
            # The session control runs each pooler cell in session mode: a pool_mode axis makes no other one.
            session = list(dict.fromkeys(p.in_session_mode for p in poolers))
            out += [Target(pg, p, Route.SESSION, d, v, s, b) for pg in pgs for p in session for d, v, s, b in drivers]
        return out

    def _pg(self, spec: Spec, given: str | None = None) -> Version:
        """The PostgreSQL `spec` names (an image's or a path's release is known only here): one older than
        leakcheck measures stops the run before any server starts."""
        version = self.backend.resolve_pg(spec)
        refuse_older(version, given or f"--pg={spec}")
        return version

    def _running_pooler_targets(self) -> list[Target]:
        """A running pooler: its PostgreSQL's version as it reports it; controls only with --direct-dsn
        (there is no session-mode control: leakcheck cannot change that pooler's mode)."""
        pg = self._pg(Spec("server"), "the PostgreSQL behind --pooled-dsn")
        pooler = Pooler(PoolerKind.RUNNING, None, config=self.config.dsn_name)
        drivers = client_cells(self.config, driver_version)
        out = [Target(pg, pooler, Route.TRANSACTION, d, v, s, b) for d, v, s, b in drivers]
        if self.config.controls and self.config.direct_dsn is not None:
            out += [Target(pg, None, route, d, v, s, b) for route in (Route.DIRECT, Route.SHARED)
                    for d, v, s, b in drivers]
        return out

    def items(self) -> list[tuple[str, Probe, Target]]:
        """Every test of the matrix; a matrix larger than one run holds is a UsageError (lanes.check_capacity)."""
        out = [(_test_name(probe, target), probe, target) for target in self.targets() for probe in self.config.probes]
        check_capacity([(probe, target) for _, probe, target in out])
        return out

    def run(self, probe: Probe, target: Target) -> Outcome:
        """The outcome of one test: from its lane when started, else measured here and now."""
        if self._lanes is not None:
            outcome = self._lanes.result(probe, target)
        else:
            backend = self.backend
            self._failfast().current = _test_name(probe, target)
            outcome = run_probe(backend, probe, target)
        self.outcomes.append(outcome)
        return outcome

    def _failfast(self) -> FailFast:
        assert self._backend is not None
        return self._backend

    def describe(self) -> list[str]:
        """The run header's lines on servers (once started) and on the team's ini (what leakcheck overrode)."""
        lines = list(self.backend.describe()) if self._backend is not None else []
        return lines + self.config_lines()

    def config_lines(self) -> list[str]:
        if self.config.bouncer_ini is None:
            return []
        team = team_ini.load(self.config.bouncer_ini)
        tables = self.config.pooler_tables
        fleet = self.config.fleet.is_fleet or any(t.fleet.is_fleet for t in tables)
        peering = any(a.name == PEERING and "yes" in a.values for t in tables for a in t.axes)
        said = team_ini.overrides(team, *header_keys(fleet, peering))
        return [f"--bouncer-ini {self.config.bouncer_ini}: kept as written except:", *(f"  {line}" for line in said)]


def _test_name(probe: Probe, target: Target) -> str:
    kind = "test_leak" if target.route is Route.TRANSACTION else "test_control"
    return f"{kind}[{target.test_id(probe.id)}]"
