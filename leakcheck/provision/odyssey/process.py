"""One Odyssey in front of one PostgreSQL: a context manager that always cleans up.

`reset()` restarts it: Odyssey 1.5.2's console cannot close server connections (its help lists
`DROP SERVERS`, which it refuses as a "console command error"; PAUSE/RESUME and KILL_CLIENT leave
idle server connections open; RELOAD with a changed rule left them open for 10 s), so the process
is killed (SIGKILL: it keeps nothing worth a clean stop) and started again on the same port, which
no server connection survives. Measured here: about 30-40 ms until its console answers.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import psycopg

from leakcheck.model.errors import StartError, one_line
from leakcheck.provision.base import Endpoint
from leakcheck.provision.console import execute
from leakcheck.provision.host.pooler_process import PoolerProcess
from leakcheck.provision.odyssey.conf import CONSOLE_DB, OdysseyLayout, render_odyssey_conf, start_error


def console(endpoint: Endpoint) -> psycopg.Connection[Any]:
    """Odyssey's console (database "console") as its admin role, with its password."""
    return psycopg.connect(endpoint.conninfo(CONSOLE_DB), autocommit=True, connect_timeout=3)


def console_rows(conn: psycopg.Connection[Any], command: str) -> list[dict[str, str]]:
    """A console command (simple query protocol only); its rows as dicts."""
    return execute(conn, command, "Odyssey's console")


def console_answers(endpoint: Endpoint) -> str | None:
    """None when Odyssey's console at `endpoint` answers SHOW VERSION with `odyssey ...`, else why not
    (readiness on both backends)."""
    try:
        with console(endpoint) as conn:
            rows = console_rows(conn, "SHOW VERSION")
    except (psycopg.Error, StartError) as exc:
        return one_line(exc, 160)
    version = next(iter(rows[0].values()), "") if rows else ""
    return None if version.startswith("odyssey") else f"SHOW VERSION answered {version!r}"


def listens_otherwise(endpoint: Endpoint, host: str, port: int) -> str | None:
    """What Odyssey's own SHOW LISTEN says it listens on, on one line, when that is not `host`:`port` alone
    (1.5.2 answers one row per listen block: host, port, tls...), else None."""
    with console(endpoint) as conn:
        rows = console_rows(conn, "SHOW LISTEN")
    found = [(row.get("host", ""), row.get("port", "")) for row in rows]
    if found == [(host, str(port))]:
        return None
    return f"Odyssey's SHOW LISTEN answered {', '.join(f'{h}:{p}' for h, p in found) or 'nothing'}, not {host}:{port}"


class OdysseyProcess(PoolerProcess):
    """An Odyssey (own temp dir, config, port) for as long as the `with` lasts; `reset()` restarts it
    so the next user starts from fresh server connections.

    It runs as `user` (never as root); entering waits until its console answers SHOW VERSION, leaving
    stops it (SIGTERM, no graceful wait, then SIGKILL) and removes its temp dir, whatever happened.
    """

    name = "odyssey"
    title = "Odyssey"
    config = "odyssey.conf"
    stop_signal = signal.SIGTERM

    def reset(self) -> None:
        """Kill and start again on the same port: no server connection survives."""
        self._alive()
        self._restart()

    def _write_files(self, tmp: Path) -> list[str]:
        layout = OdysseyLayout(
            listen_port=self.port, server_host=self.server_host, server_port=self.server_port,
            dbname=self.endpoint().dbname, admin=self.endpoint().user, credentials=self.credentials,
        )
        conf = tmp / self.config
        self.user.write_private(conf, render_odyssey_conf(self.settings, self.extra, layout))
        return [str(conf)]

    def _ready(self) -> str | None:
        return console_answers(self.endpoint())

    def _after_start(self) -> None:
        """It listens where leakcheck wrote, by its own SHOW LISTEN (else finish() stops it)."""
        try:
            otherwise = listens_otherwise(self.endpoint(), self.host, self.port)
        except psycopg.Error as exc:
            otherwise = f"its console did not answer SHOW LISTEN ({one_line(exc, 160)})"
        if otherwise is not None:
            raise StartError(f"{self.what}: {otherwise}: stopped it; a setting reached it that leakcheck did not "
                             f"write, report this. {self._hint()}")

    def _start_error(self, log: str) -> str | None:
        assert self.tmpdir is not None
        try:
            config = (self.tmpdir / self.config).read_text()
        except OSError:
            config = ""
        message = start_error(log, config)
        return message.replace(f"{self.tmpdir}/", "") if message else None
