"""The native backend: real postgres and pgbouncer processes on 127.0.0.1, no Docker."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

from leakcheck.model.errors import StartError
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Pooler, PoolerKind
from leakcheck.model.versions import Spec, Version
from leakcheck.provision.base import Binary, Endpoint, PoolerKey
from leakcheck.provision.host.process import STOPPED
from leakcheck.provision.host.sweep import sweep
from leakcheck.provision.host.system import ServerUser, cache_root, server_user
from leakcheck.provision.host.timing import timed
from leakcheck.provision.pgbouncer.fleet import BouncerFleet
from leakcheck.provision.postgres.binaries import PgInstall, resolve_pg
from leakcheck.provision.postgres.server import PgServer
from leakcheck.provision.product import Running, Start
from leakcheck.provision.products import product


def _tried(step: Callable[[PgServer], None]) -> Callable[[PgServer], bool]:
    def run(server: PgServer) -> bool:
        try:
            step(server)
            return True
        except Exception:  # noqa: BLE001 - warm() only saves time; postgres() reports the failure
            return False

    return run


def _stop_together(running: Sequence[contextlib.AbstractContextManager[object]]) -> None:
    """Stop these processes side by side (each stop is bounded by its own stop timeout, and stopping
    twice is a no-op): a failure here is left to the backend's exit stack, which stops it again."""
    if not running:
        return
    with ThreadPoolExecutor(max_workers=min(8, len(running)), thread_name_prefix="leakcheck-stop") as pool:
        for done in [pool.submit(p.__exit__, None, None, None) for p in running]:
            with contextlib.suppress(Exception):
                done.result()


class NativeBackend:
    """Resolves binaries (cache, PATH, npm, Debian, tarballs) and runs them as child processes.

    One PostgreSQL per version serves every PgBouncer. One PgBouncer process per (versions,
    settings, lane) serves the run; before each use its admin console closes every server
    connection (KILL/RESUME), so no server connection (and no state) survives from one probe to the
    next — and the runner checks that no server identity comes back.
    """

    name = "native"

    def __init__(self, cache: Path | None = None) -> None:
        self._cache = cache
        self._pgs: dict[Version, PgInstall] = {}
        self._binaries: dict[tuple[PoolerKind, Version], Binary] = {}
        self._servers: dict[Version, PgServer] = {}
        self._poolers: dict[PoolerKey, Running] = {}
        #: A pooler that failed to start in warm(): its first use says why, instead of starting it again.
        self._unstarted: dict[PoolerKey, StartError] = {}
        self._lock = threading.RLock()  # lanes run in threads; servers start from the main thread
        self._stack = contextlib.ExitStack()
        self._user: ServerUser | None = None
        self._closed = False  # a lane still finishing its probe may not start a server after __exit__

    def __enter__(self) -> NativeBackend:
        sweep(self.cache)  # what killed runs left (never a live run's)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closed = True
        poolers, servers = list(self._poolers.values()), list(self._servers.values())
        self._servers.clear()
        self._poolers.clear()
        try:  # the poolers first (they hold the servers' connections), each kind all at once
            _stop_together(poolers)
            _stop_together(servers)
        finally:
            self._stack.close()  # the rest; and a process the lines above could not stop, stopped again

    @property
    def cache(self) -> Path:
        if self._cache is None:
            self._cache = cache_root()
        return self._cache

    @property
    def user(self) -> ServerUser:
        if self._user is None:
            self._user = server_user()
        return self._user

    def resolve_pg(self, spec: Spec) -> Version:
        install = resolve_pg(spec, self.cache)
        self._pgs.setdefault(install.version, install)
        return install.version

    def resolve_pooler(self, kind: PoolerKind, spec: Spec) -> Version:
        option = kind.record.option or f"--pooler={kind.value}:{spec}"
        binary = product(kind).resolve(spec, self.cache, option)
        self._binaries.setdefault((kind, binary.version), binary)
        return binary.version

    def _process(self, pooler: Pooler, settings: PoolSettings, postgres: PgServer) -> Running:
        """The pooler's process, not started: its product's (provision/products.py)."""
        assert pooler.version is not None
        binaries = tuple(self._binaries[(pooler.kind, v)] for v in pooler.fleet or (pooler.version,))
        return product(pooler.kind).process(Start(binaries, settings, pooler, postgres, self.user))

    def _server(self, pg: Version) -> PgServer:
        with self._lock:
            return self._server_locked(pg)

    def _server_locked(self, pg: Version) -> PgServer:
        if self._closed:
            raise StartError(f"PostgreSQL {pg} is not available: the run is ending")
        if pg not in self._servers:
            server = PgServer(self._pgs[pg], self.cache, self.user)
            self._servers[pg] = self._stack.enter_context(server)
        return self._servers[pg]

    def postgres(self, pg: Version) -> Endpoint:
        """Its endpoint; a StartError naming it when its postmaster ended during the run (a dead server
        fails every later probe at once, instead of each waiting for its timeout)."""
        server = self._server(pg)
        down = server.down()
        if down is not None:
            raise StartError(down)
        return server.endpoint()

    def warm(self, pgs: Sequence[Version], poolers: Sequence[PoolerKey]) -> None:
        """Start these servers together, from the main thread: the PostgreSQL data copies in threads,
        then every pooler spawned before any is waited for. A PostgreSQL that fails here is left for
        `postgres()` to start again and report; a pooler that fails to start (e.g. it was stopped or killed
        while it got ready) is that pooler's error, reported by its first use: never started again over
        what it left."""
        with self._lock:
            staged: list[PgServer] = []
            for pg in dict.fromkeys(pgs):
                if pg not in self._servers and pg in self._pgs:
                    server = PgServer(self._pgs[pg], self.cache, self.user)
                    self._stack.push(server.__exit__)
                    with contextlib.suppress(Exception):
                        server.stage()
                        staged.append(server)
            with ThreadPoolExecutor(max_workers=max(1, len(staged))) as copying:
                copied = [s for s, ok in zip(staged, copying.map(_tried(PgServer.copy), staged), strict=True) if ok]
            for server in copied:
                with contextlib.suppress(Exception):
                    server.launch()
                    self._servers[server.version] = server
            spawned: list[tuple[PoolerKey, Running]] = []
            for key in dict.fromkeys(poolers):
                pg, pooler, settings, _ = key
                known = all((pooler.kind, v) in self._binaries for v in (pooler.fleet or (pooler.version,)))
                if key in self._poolers or pg not in self._servers or not known:
                    continue
                process = self._process(pooler, settings, self._servers[pg])
                self._stack.push(process.__exit__)
                with contextlib.suppress(Exception):
                    process.spawn()
                    spawned.append((key, process))
            for key, process in spawned:
                with contextlib.suppress(Exception):  # another failure: pooler() starts it again
                    try:
                        process.finish()
                    except StartError as exc:
                        self._unstarted[key] = exc
                        raise
                    self._poolers[key] = process

    @contextlib.contextmanager
    def pooler(self, pg: Version, pooler: Pooler, settings: PoolSettings, lane: str = "") -> Iterator[Endpoint]:
        key = (pg, pooler, settings, lane)
        self.postgres(pg)  # the server behind it still runs
        with self._lock:
            process = self._poolers.get(key)
            unstarted = self._unstarted.pop(key, None)
            if unstarted is not None:
                raise unstarted
            if process is None:
                server = self._server(pg)
                process = self._process(pooler, settings, server)
                self._stack.enter_context(process)
                self._poolers[key] = process
        self._check_running(process, pooler, settings)
        with timed("resets"):
            try:
                process.reset()  # e.g. PgBouncer's KILL/RESUME: this use starts from fresh server connections
            except StartError:
                self._check_died_in_reset(process, pooler, settings)
                raise
        yield process.endpoint()
        if isinstance(process, BouncerFleet):  # a fleet that lost a process during the probe: an error naming it
            self._check_running(process, pooler, settings)

    def gone(self, pg: Version, pooler: PoolerKey | None = None) -> str | None:
        """Why a server a probe on PostgreSQL `pg` (through `pooler`, a key of a pooler process it uses)
        depends on no longer serves: its postmaster or the pooler (any process of a fleet) ended or is
        stopped; else None. Cheap, a waitpid and a read of /proc per process: the runner's watcher
        (run/watch.py) asks it every 0.1 s while a probe runs."""
        server = self._servers.get(pg)
        down = server.down() if server is not None else None
        if down is not None or pooler is None:
            return down
        process = self._poolers.get(pooler)
        return self._ended(process, pooler[1], pooler[2]) if process is not None else None

    @classmethod
    def _check_died_in_reset(cls, process: Running, pooler: Pooler, settings: PoolSettings) -> None:
        """A reset that failed because the pooler just died (a crash on its console's KILL) says so, with
        the pooler's log, not only "could not reset": the process is given up to 1 s to be seen ended."""
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            ended = cls._ended(process, pooler, settings)
            if ended is not None:
                raise StartError(ended) from None
            time.sleep(0.05)

    @classmethod
    def _check_running(cls, process: Running, pooler: Pooler, settings: PoolSettings) -> None:
        ended = cls._ended(process, pooler, settings)
        if ended is not None:
            raise StartError(ended)

    @staticmethod
    def _ended(process: Running, pooler: Pooler, settings: PoolSettings) -> str | None:
        what = f"{pooler.kind.product} {pooler.label()} ({settings.mode.value} pool of {settings.pool_size})"
        if isinstance(process, BouncerFleet):
            lost = process.lost()
            return None if lost is None else f"{what}: {lost}"
        how = process.ended()
        if how is None:
            return None
        if how.startswith(STOPPED):  # (pgpool-II: or one of its children)
            return f"{what} at {process.host}:{process.port}: {how}"
        tail = "\n".join(process.log_text().strip().splitlines()[-10:])
        return f"{what} exited during the run ({how}); its log ends:\n{tail}"

    def describe(self) -> Iterator[str]:
        for version, install in sorted(self._pgs.items()):
            yield f"PostgreSQL {version}: {install.bindir} ({install.origin.split(' (')[0]})"
        for (kind, version), binary in sorted(self._binaries.items()):
            yield f"{kind.product} {version}: {binary.argv[-1]} ({binary.origin})"
