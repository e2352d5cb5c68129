"""One PgBouncer process in front of one PostgreSQL: a context manager that always cleans up."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path
from typing import Any, Self

import psycopg

from ..target import Setting
from ..versions import Version
from . import admin
from .base import DBNAME, USER, Binary, Endpoint
from .bouncer_ini import BouncerLayout, PoolSettings, render_auth_file, render_ini
from .owner import create, fresh_name
from .process import ServerProcess
from .strays import stop_servers_in
from .system import PortClash, ServerUser, free_port, start_retrying_port_clash
from .team_ini import TeamIni

HOST = "127.0.0.1"
READY_TIMEOUT = 15.0
STOP_TIMEOUT = 3.0
_PORT_ATTEMPTS = 3


def shutdown_signal(version: Version) -> signal.Signals:
    """PgBouncer's immediate shutdown: SIGTERM before 1.23, SIGQUIT since (SIGTERM now waits for clients)."""
    return signal.SIGQUIT if version >= Version((1, 23)) else signal.SIGTERM


class BouncerProcess:
    """A PgBouncer (own temp dir, ini, port) for as long as the `with` lasts; `reset()` closes every
    server connection so the next user starts from fresh ones.

    It runs as `user` (never as root); entering waits until its admin console answers SHOW VERSION,
    leaving stops it (immediate shutdown, then SIGKILL) and removes its temp dir, whatever happened.
    """

    host = HOST

    def __init__(
        self, binary: Binary, settings: PoolSettings, server: Endpoint, user: ServerUser,
        extra: tuple[Setting, ...] = (), team: TeamIni | None = None,
    ) -> None:
        self.binary, self.settings, self.user = binary, settings, user
        self.extra, self.team = extra, team
        self.server_host, self.server_port, self.credentials = server.host, server.port, server.credentials
        self.port = 0
        self.tmpdir: Path | None = None
        self._process: ServerProcess | None = None
        self._console: psycopg.Connection[Any] | None = None
        self._last_log = ""

    @property
    def version(self) -> Version:
        return self.binary.version

    def endpoint(self) -> Endpoint:
        """Where clients connect: the `leakcheck` database through this PgBouncer."""
        return Endpoint(HOST, self.port, credentials=self.credentials)

    def reset(self) -> None:
        """KILL/RESUME on the admin console: no server connection survives to the next probe.
        The console connection is kept for the next reset (one user at a time: a lane)."""
        if self._console is None or self._console.closed:
            self._console = admin.connect(self.endpoint())
        try:
            admin.reset_pool(self.endpoint(), self._console)
        except Exception:
            self._console.close()
            self._console = None
            raise

    def running(self) -> bool:
        return self._process is not None and self._process.running()

    def log_text(self) -> str:
        """Everything PgBouncer logged so far (kept after exit)."""
        if self.tmpdir is None:
            return self._last_log
        try:
            return (self.tmpdir / "pgbouncer.out").read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> Self:
        try:
            self.spawn()
            self.finish()
        except BaseException:
            self.__exit__()
            raise
        return self

    def spawn(self) -> None:
        """Its temp dir (marked: a later run sweeps it if we are killed) and the process, not yet
        waited for: several PgBouncers can then get ready at once. From the main thread."""
        self.tmpdir = fresh_name(f"leakcheck-pgbouncer{self.version}-")
        create(self.tmpdir)
        self.user.chown(self.tmpdir)
        self._spawn()

    def finish(self) -> None:
        """Wait until the spawned PgBouncer answers; a lost port is retried on another."""
        assert self._process is not None
        try:
            try:
                self._process.wait(lambda: admin.answers(self.endpoint()), READY_TIMEOUT, self._hint())
            except PortClash:
                self._stop()
                start_retrying_port_clash(self._start, self._stop, _PORT_ATTEMPTS - 1)
        except BaseException:
            if self.tmpdir is not None:
                # A signal inside Popen, after the exec: a PgBouncer runs that _stop does not know of.
                stop_servers_in(self.tmpdir)
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self._stop()
        finally:
            if self.tmpdir is not None:
                self._last_log = self.log_text()
                shutil.rmtree(self.tmpdir, ignore_errors=True)
                self.tmpdir = None

    def _hint(self) -> str:
        return f"It ran as user {self.user.name} with {self.tmpdir}/pgbouncer.ini."

    def _start(self) -> None:
        self._spawn()
        assert self._process is not None
        self._process.wait(lambda: admin.answers(self.endpoint()), READY_TIMEOUT, self._hint())

    def _spawn(self) -> None:
        assert self.tmpdir is not None
        tmp = self.tmpdir
        self.port = free_port()
        layout = BouncerLayout(
            listen_port=self.port, server_host=self.server_host, server_port=self.server_port, dbname=DBNAME,
            user=USER, auth_file=str(tmp / "users.txt"), logfile=str(tmp / "pgbouncer.log"),
            pidfile=str(tmp / "pgbouncer.pid"),
        )
        for stale in ("pgbouncer.log", "pgbouncer.pid"):
            (tmp / stale).unlink(missing_ok=True)
        (tmp / "pgbouncer.ini").write_text(render_ini(self.settings, layout, self.extra, self.team))
        self.user.write_private(tmp / "users.txt", render_auth_file(self.credentials))
        what = f"PgBouncer {self.version} ({' '.join(self.binary.argv)})"
        # stdout+stderr go to pgbouncer.out: also what precedes the logfile.
        self._process = ServerProcess(what, [*self.binary.argv, str(tmp / "pgbouncer.ini")], self.user, tmp,
                                      tmp / "pgbouncer.out", stop_signal=shutdown_signal(self.version),
                                      stop_timeout=STOP_TIMEOUT)
        self._process.spawn()

    def _stop(self) -> None:
        """Immediate shutdown; SIGKILL after STOP_TIMEOUT. Safe to call at any point, more than once."""
        console, self._console = self._console, None
        if console is not None:
            console.close()
        process, self._process = self._process, None
        if process is not None:
            process.stop()
