"""What every pooler process has in common (Odyssey, pgpool-II): a marked temp dir, one program run
as the server user, readiness, a port lost to a race retried on another, a stop that leaves nothing.

A subclass (PgBouncer, Odyssey, pgpool-II) writes its files and says when it is ready, how it reports
a failed start, and how it resets (`reset()`: the next use starts from fresh server connections). The
interface: `__enter__`/`__exit__`, `spawn()` then `finish()`, `endpoint()`, `reset()`, `running()`, `ended()`,
`log_text()`.
"""

from __future__ import annotations

import errno
import logging
import shutil
import signal
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar, Self

from leakcheck.model.errors import StartError
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.versions import Version
from leakcheck.provision.base import Binary, Endpoint
from leakcheck.provision.host.owner import create, fresh_name
from leakcheck.provision.host.proc_sockets import beyond, listening
from leakcheck.provision.host.process import STOPPED, ServerProcess, wait_until
from leakcheck.provision.host.strays import stop_servers_in
from leakcheck.provision.host.system import (
    PortClash,
    ServerUser,
    free_port,
    open_files_as,
    start_retrying_port_clash,
)

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
PORT_ATTEMPTS = 3
Settings = tuple[tuple[str, str], ...]


def port_taken(port: int) -> bool:
    """Whether another socket is bound to 127.0.0.1:port (sockets in TIME_WAIT do not count)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


class SpawnThenFinish:
    """Entering spawns, then waits with finish() (apart, so several can get ready at once); a start that
    fails is undone by __exit__() before the error goes on. One pooler process, or a fleet of them."""

    def spawn(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        raise NotImplementedError

    def __exit__(self, *exc: object) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.spawn()
            self.finish()
        except BaseException:
            self.__exit__()
            raise
        return self


#: What `ended` says of a pooler whose process is gone (or never started).
NOT_RUNNING = "it is not running"


class PoolerProcess(SpawnThenFinish):
    """One pooler program in front of one PostgreSQL, for as long as the `with` lasts."""

    name: ClassVar[str]  # the program: pgbouncer, odyssey, pgpool (also in its temp dir's name)
    title: ClassVar[str]  # for messages: PgBouncer, Odyssey, pgpool-II
    config: ClassVar[str]  # its main config file, for messages
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM
    death_signal: ClassVar[signal.Signals] = signal.SIGKILL
    #: Whether it forks processes of its own (pgpool-II's children): what they listen on is checked too, and
    #: what they leave when its main process ends uncleanly is removed (ServerProcess's `forks`).
    forks: ClassVar[bool] = False
    ready_timeout: ClassVar[float] = 15.0
    stop_timeout: ClassVar[float] = 3.0
    host = HOST

    def __init__(
        self, binary: Binary, settings: PoolSettings, extra: Settings, server: Endpoint, user: ServerUser
    ) -> None:
        self.binary, self.settings, self.extra, self.user = binary, settings, tuple(extra), user
        self.server_host, self.server_port, self.credentials = server.host, server.port, server.credentials
        self.port = 0
        self.tmpdir: Path | None = None
        self._process: ServerProcess | None = None
        self._last_log = ""
        #: Restarts fork from this one thread, which lives as long as the pooler: PDEATHSIG acts when
        #: the thread that forked a process ends, and a caller's thread may end first.
        self._spawner: ThreadPoolExecutor | None = None

    @property
    def version(self) -> Version:
        return self.binary.version

    @property
    def what(self) -> str:
        return f"{self.title} {self.version} ({' '.join(self.binary.argv)})"

    def endpoint(self) -> Endpoint:
        """Where clients connect: the `leakcheck` database through this pooler."""
        return Endpoint(HOST, self.port, credentials=self.credentials)

    def running(self) -> bool:
        return self._process is not None and self._process.running()

    def ended(self) -> str | None:
        """How its process ended, or that it is stopped, while it should serve (None: it runs)."""
        if self._process is None:
            return NOT_RUNNING
        return self._process.ended()

    def log_text(self) -> str:
        """Everything it logged so far (kept after exit)."""
        if self.tmpdir is None:
            return self._last_log
        try:
            return (self.tmpdir / f"{self.name}.out").read_text(errors="replace")
        except OSError:
            return ""

    def reset(self) -> None:
        """Make sure no server connection survives to the next use."""
        raise NotImplementedError

    def spawn(self, port: int = 0) -> None:
        """Its temp dir (marked: a later run sweeps it if we are killed) and the process, not yet waited
        for (several can then get ready at once), on `port` (0: a free one). From the main thread."""
        self.make_dir()
        self.port = port or free_port()
        self._spawn()

    def make_dir(self) -> Path:
        """Its temp dir, made once (a fleet makes every process's before any starts: they name each other's)."""
        if self.tmpdir is None:
            self.tmpdir = fresh_name(f"leakcheck-{self.name}{self.version}-")
            create(self.tmpdir)
            self.user.chown(self.tmpdir)
        return self.tmpdir

    def finish(self) -> None:
        """Wait until the spawned pooler answers (a lost port is retried on another), check what it listens
        on, then whatever the pooler needs before its first use (each pooler checks there that it runs
        with leakcheck's settings, by its own SHOW commands). On failure it is stopped, its temp dir kept
        for __exit__."""
        try:
            try:
                self._wait()
            except PortClash:
                self._stop()
                start_retrying_port_clash(self._start_on_new_port, self._stop, PORT_ATTEMPTS - 1)
            self._check_listening()
            self._after_start()
        except BaseException:
            self._stop()
            if self.tmpdir is not None:
                stop_servers_in(self.tmpdir)  # one a signal hid from us during Popen
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self._stop()
        finally:
            spawner, self._spawner = self._spawner, None
            if spawner is not None:
                spawner.shutdown(wait=True)
            if self.tmpdir is not None:
                self._last_log = self.log_text()
                shutil.rmtree(self.tmpdir, ignore_errors=True)
                self.tmpdir = None

    # --- for subclasses

    def _write_files(self, tmp: Path) -> list[str]:
        """Write its config files (for self.port) into `tmp`; the arguments that follow binary.argv."""
        raise NotImplementedError

    def _ready(self) -> str | None:
        """None when it answers, else why not (for wait_until)."""
        raise NotImplementedError

    def _start_error(self, log: str) -> str | None:
        """The pooler's own one-line reason for not starting, from what it logged since this start."""
        raise NotImplementedError

    def _after_start(self) -> None:
        """What it needs once it answers, before its first use."""

    def _failing(self, log: str) -> str | None:
        """Why it will never answer although it runs (e.g. it could not listen on its port), from its log."""
        return None

    # --- shared machinery

    def _hint(self) -> str:
        return f"It ran as user {self.user.name} with {self.tmpdir}/{self.config}."

    def _stop_signal(self) -> signal.Signals:
        """Its immediate shutdown (PgBouncer's depends on its version)."""
        return self.stop_signal

    def _spawn(self) -> None:
        assert self.tmpdir is not None
        tail = self._write_files(self.tmpdir)
        self._process = ServerProcess(
            self.what, [*self.binary.argv, *tail], self.user, self.tmpdir, self.tmpdir / f"{self.name}.out",
            stop_signal=self._stop_signal(), stop_timeout=self.stop_timeout, death_signal=self.death_signal,
            forks=self.forks,
        )
        self._process.spawn()

    def _wait(self) -> None:
        process = self._process
        assert process is not None

        def gone() -> str | None:
            how = process.ended()  # exited, or stopped (SIGSTOP): it would never answer
            if how is None:
                return self._failing(process.recent_log())
            if how == STOPPED:
                return how
            own = self._start_error(process.recent_log())
            return how + (f": {own}" if own else "")

        try:
            wait_until(self.what, self._ready, gone, self.ready_timeout, process.recent_log, self._hint())
        except PortClash:
            raise
        except StartError as exc:
            # Odyssey 1.5.2 exits with code 1 and logs nothing when its port is taken: ask the port.
            if process.exit_code() is not None and port_taken(self.port):
                raise PortClash(f"{exc} (port {self.port} is taken: Address already in use)") from None
            raise

    def _start_on_new_port(self) -> None:
        self.port = free_port()
        self._spawn()
        self._wait()

    def _restart(self) -> None:
        """Stop it at once (SIGKILL) and start it again on the same port (another if that one was taken),
        from the pooler's own spawner thread (see __init__)."""
        process, self._process = self._process, None
        if process is not None:
            process.stop(signal.SIGKILL)
        if self._spawner is None:
            self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"leakcheck-{self.name}")
        try:
            self._spawner.submit(self._spawn).result()
            self._wait()
        except PortClash:
            self._stop()
            start_retrying_port_clash(self._on_spawner(self._start_on_new_port), self._stop, PORT_ATTEMPTS - 1)
        try:
            self._check_listening()
        except StartError:
            self._stop()
            raise

    def _check_listening(self) -> None:
        """What its processes listen on (read from /proc) is 127.0.0.1 and Unix sockets in its own folder
        only, else a one-line StartError (the caller stops it): whatever its config came to, nothing it
        runs with may be reached from beyond the machine or from another user's folder."""
        pid = self._alive().pid
        assert pid is not None and self.tmpdir is not None
        try:
            found = listening(pid, self.forks, lambda pids: open_files_as(self.user, pids))
        except OSError as exc:
            found, why = [], f" ({exc})"
        else:
            why = ""
        if not any(s.proto == "tcp" and s.port == self.port for s in found):  # the proof that it looked
            raise StartError(f"{self.what}: leakcheck could not see what it listens on (not even its own port "
                             f"{self.port}{why}), so it is not used: stopped it")
        outside = beyond(found, [str(self.tmpdir)])
        if outside:
            raise StartError(f"{self.what} listens on {', '.join(map(str, outside))}, beyond {HOST} and its own "
                             f"folder {self.tmpdir}: stopped it; a setting reached it that leakcheck did not write, "
                             "report this")

    def _on_spawner(self, step: Callable[[], None]) -> Callable[[], None]:
        spawner = self._spawner
        assert spawner is not None
        return lambda: spawner.submit(step).result()

    def _alive(self) -> ServerProcess:
        """Its process, or a StartError (with the end of its log) when it is not running."""
        if self._process is None or not self._process.running():
            tail = "\n".join(self.log_text().strip().splitlines()[-10:])
            raise StartError(f"{self.title} {self.version} is not running; its log ends:\n{tail}")
        return self._process

    def _stop(self) -> None:
        """Its shutdown signal; SIGKILL after stop_timeout. Safe to call at any point, more than once."""
        process, self._process = self._process, None
        if process is not None:
            process.stop()

