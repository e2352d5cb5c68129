"""One PgBouncer process in front of one PostgreSQL: a context manager that always cleans up."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

import psycopg
from psycopg import pq

from ..errors import StartError
from ..ini import BouncerLayout, PoolSettings, render_auth_file, render_ini
from ..versions import Version
from .base import DBNAME, USER, Binary, Endpoint
from .owner import mark
from .strays import stop_servers_in
from .system import PortClash, ServerUser, die_with_parent, free_port, start_retrying_port_clash

HOST = "127.0.0.1"
READY_TIMEOUT = 15.0
STOP_TIMEOUT = 3.0
_PORT_ATTEMPTS = 3


def shutdown_signal(version: Version) -> signal.Signals:
    """PgBouncer's immediate shutdown: SIGTERM before 1.23, SIGQUIT since (SIGTERM now waits for clients)."""
    return signal.SIGQUIT if version >= Version((1, 23)) else signal.SIGTERM


class BouncerProcess:
    """A fresh PgBouncer (own temp dir, ini, port, no server connections yet) for as long as the `with` lasts.

    It runs as `user` (never as root); entering waits until its admin console answers SHOW VERSION,
    leaving stops it (immediate shutdown, then SIGKILL) and removes its temp dir, whatever happened.
    """

    host = HOST

    def __init__(
        self, binary: Binary, settings: PoolSettings, server: Endpoint, user: ServerUser
    ) -> None:
        self.binary, self.settings, self.user = binary, settings, user
        self.server_host, self.server_port, self.credentials = server.host, server.port, server.credentials
        self.port = 0
        self.tmpdir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._last_log = ""

    @property
    def version(self) -> Version:
        return self.binary.version

    def endpoint(self) -> Endpoint:
        """Where clients connect: the `leakcheck` database through this PgBouncer."""
        return Endpoint(HOST, self.port, credentials=self.credentials)

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
            self.tmpdir = Path(tempfile.mkdtemp(prefix=f"leakcheck-pgbouncer{self.version}-"))
            mark(self.tmpdir)  # whose it is: a later run sweeps it if we are killed (sweep.py)
            self.user.chown(self.tmpdir)
            start_retrying_port_clash(self._start, self._stop, _PORT_ATTEMPTS)
        except BaseException:
            if self.tmpdir is not None:
                # A signal inside Popen, after the exec: a PgBouncer runs that _stop does not know of.
                stop_servers_in(self.tmpdir)
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._stop()
        finally:
            if self.tmpdir is not None:
                self._last_log = self.log_text()
                shutil.rmtree(self.tmpdir, ignore_errors=True)
                self.tmpdir = None

    def _start(self) -> None:
        assert self.tmpdir is not None
        tmp = self.tmpdir
        self.port = free_port()
        layout = BouncerLayout(
            listen_port=self.port,
            server_host=self.server_host,
            server_port=self.server_port,
            dbname=DBNAME,
            user=USER,
            auth_file=str(tmp / "users.txt"),
            logfile=str(tmp / "pgbouncer.log"),
            pidfile=str(tmp / "pgbouncer.pid"),
        )
        for stale in ("pgbouncer.log", "pgbouncer.pid"):
            (tmp / stale).unlink(missing_ok=True)
        (tmp / "pgbouncer.ini").write_text(render_ini(self.settings, layout))
        users = tmp / "users.txt"
        users.touch(0o600)
        users.write_text(render_auth_file(self.credentials))
        self.user.chown(users)
        argv = [*self.binary.argv, str(tmp / "pgbouncer.ini")]
        uid, gid, groups = self.user.popen_ids()
        with open(tmp / "pgbouncer.out", "wb") as out:  # stdout+stderr: also what precedes the logfile
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=tmp,
                user=uid,
                group=gid,
                extra_groups=groups,
                preexec_fn=die_with_parent,  # noqa: PLW1509
                start_new_session=True,  # Ctrl-C in a terminal must not reach it (SIGINT = safe shutdown)
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        assert self._proc is not None
        what = f"PgBouncer {self.version} ({' '.join(self.binary.argv)})"
        hint = f"It ran as user {self.user.name} with {self.tmpdir}/pgbouncer.ini."
        deadline = time.monotonic() + READY_TIMEOUT
        last = "no answer yet"
        while True:
            code = self._proc.poll()
            if code is not None:
                log = self.log_text()
                kind = PortClash if "Address already in use" in log else StartError
                raise kind.with_log(what, f"pgbouncer exited with code {code}", log, hint)
            try:
                with psycopg.connect(self.endpoint().conninfo("pgbouncer"), autocommit=True, connect_timeout=2) as conn:
                    result = conn.pgconn.exec_(b"SHOW VERSION")  # the admin console: simple protocol only
                    if result.status == pq.ExecStatus.TUPLES_OK:
                        return
                    last = (result.error_message or b"").decode(errors="replace").strip()
            except psycopg.OperationalError as exc:
                last = (str(exc).strip().splitlines() or ["?"])[0]
            if time.monotonic() > deadline:
                reason = f"its admin console on port {self.port} did not answer SHOW VERSION ({last})"
                raise StartError.with_log(what, reason, self.log_text(), hint)
            time.sleep(0.02)

    def _stop(self) -> None:
        """Immediate shutdown; SIGKILL after STOP_TIMEOUT. Safe to call at any point, more than once."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                proc.send_signal(shutdown_signal(self.version))
                proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
