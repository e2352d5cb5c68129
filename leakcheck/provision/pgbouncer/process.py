"""One PgBouncer process in front of one PostgreSQL: a context manager that always cleans up."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import psycopg

from leakcheck.model.axes import PEERING
from leakcheck.model.errors import StartError, one_line
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Setting
from leakcheck.model.versions import Version
from leakcheck.provision.base import DBNAME, USER, Binary, Endpoint
from leakcheck.provision.host.pooler_process import PoolerProcess
from leakcheck.provision.host.system import ServerUser
from leakcheck.provision.pgbouncer import admin
from leakcheck.provision.pgbouncer.ini import (
    BouncerLayout,
    harness_values,
    render_auth_file,
    render_ini,
    unset_values,
)
from leakcheck.provision.pgbouncer.team_ini import TeamIni

HOST = "127.0.0.1"
READY_TIMEOUT = 15.0
STOP_TIMEOUT = 3.0


def shutdown_signal(version: Version) -> signal.Signals:
    """PgBouncer's immediate shutdown: SIGTERM before 1.23, SIGQUIT since (SIGTERM now waits for clients)."""
    return signal.SIGQUIT if version >= Version((1, 23)) else signal.SIGTERM


class BouncerProcess(PoolerProcess):
    """A PgBouncer (own temp dir, ini, port) for as long as the `with` lasts; `reset()` closes every
    server connection so the next user starts from fresh ones.

    It runs as `user` (never as root); entering waits until its admin console answers SHOW VERSION,
    leaving stops it (immediate shutdown, then SIGKILL) and removes its temp dir, whatever happened.
    """

    name = "pgbouncer"
    title = "PgBouncer"
    config = "pgbouncer.ini"
    ready_timeout = READY_TIMEOUT
    stop_timeout = STOP_TIMEOUT

    def __init__(
        self, binary: Binary, settings: PoolSettings, server: Endpoint, user: ServerUser,
        extra: tuple[Setting, ...] = (), team: TeamIni | None = None,
    ) -> None:
        super().__init__(binary, settings, extra, server, user)
        self.team = team
        self._console: psycopg.Connection[Any] | None = None
        self._layout: BouncerLayout | None = None
        #: in a fleet (fleet.py): its peer_id (0: no peering) and the other processes' (peer_id, socket folder)
        self.in_fleet = False
        self.peer_id = 0
        self.peers: tuple[tuple[int, str], ...] = ()

    def endpoint(self) -> Endpoint:
        """In a fleet, its own address: its Unix socket (the TCP port is the fleet's, shared)."""
        if self.in_fleet and self.tmpdir is not None:
            return Endpoint(str(self.tmpdir), self.port, credentials=self.credentials)
        return super().endpoint()

    def reset(self) -> None:
        """KILL/RESUME on the admin console: no server connection survives to the next probe (before 1.24.1
        first a wait for cancels in flight: admin.settles_cancels). The console connection is kept for the
        next reset (one user at a time: a lane)."""
        if self._console is None or self._console.closed:
            try:
                self._console = admin.connect(self.endpoint())
            except psycopg.Error as exc:
                raise StartError(f"{self.what} at {HOST}:{self.port}: its admin console did not answer "
                                 f"({one_line(exc, 160)})") from None
        try:
            admin.reset_pool(self.endpoint(), self._console, settle=admin.settles_cancels(self.version))
        except Exception:
            self._console.close()
            self._console = None
            raise

    def _stop_signal(self) -> signal.Signals:
        return shutdown_signal(self.version)

    def _write_files(self, tmp: Path) -> list[str]:
        layout = BouncerLayout(
            listen_port=self.port, server_host=self.server_host, server_port=self.server_port, dbname=DBNAME,
            user=USER, auth_file=str(tmp / "users.txt"), logfile=str(tmp / "pgbouncer.log"),
            pidfile=str(tmp / "pgbouncer.pid"), unix_socket_dir=str(tmp) if self.in_fleet else "",
            so_reuseport=self.in_fleet, peer_id=self.peer_id, peers=self.peers,
        )
        self._layout = layout
        for stale in ("pgbouncer.log", "pgbouncer.pid"):
            (tmp / stale).unlink(missing_ok=True)
        axes = [(k, v) for k, v in self.extra if k != PEERING]  # leakcheck's own meta-setting, not PgBouncer's
        (tmp / "pgbouncer.ini").write_text(render_ini(self.settings, layout, axes, self.team))
        self.user.write_private(tmp / "users.txt", render_auth_file(self.credentials))
        # stdout+stderr go to pgbouncer.out: also what precedes the logfile.
        return [str(tmp / "pgbouncer.ini")]

    def _wait(self) -> None:
        """Until its admin console answers; the process's own wait reads PgBouncer's reason from its log."""
        assert self._process is not None
        self._process.wait(lambda: admin.answers(self.endpoint()), self.ready_timeout, self._hint())

    def _after_start(self) -> None:
        """Every key leakcheck must control has leakcheck's value in SHOW CONFIG (else finish() stops it)."""
        assert self._layout is not None and self.tmpdir is not None
        ini = f"{self.tmpdir / self.config}" + (f" (from --bouncer-ini {self.team.path})" if self.team else "")
        layout = self._layout
        admin.check_config(self.endpoint(), harness_values(self.settings, layout), ini, unset_values(layout))

    def _stop(self) -> None:
        """Immediate shutdown; SIGKILL after STOP_TIMEOUT. Safe to call at any point, more than once."""
        console, self._console = self._console, None
        if console is not None:
            console.close()
        super()._stop()
