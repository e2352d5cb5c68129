"""One pgpool-II in front of one PostgreSQL: a context manager that always cleans up.

`reset()` ends, with SIGKILL, every connection child of pgpool-II (each may cache a backend) and
waits until pgpool-II has forked as many new ones: the next session starts on a fresh backend.
Seen on 4.3.5, 4.6.1 and 4.7.3: a child ended by SIGKILL is replaced ("terminated by sigkill", then
a new child); one ended by SIGTERM or SIGQUIT "exited with success and will not be restarted", so
only SIGKILL keeps the pool whole. A child is killed only once it is idle again (its process title
is `pgpool: wait for connection request`): a child finishing a session takes System V semaphores
without SEM_UNDO (pool_sema.c), and one killed holding one would leave it taken. PCP, worker and
health-check children are left alone (health and replication checks are off: they hold no backend);
killing them (or busy children) by hand left 1-byte System V segments behind after pgpool-II's
shutdown, this reset leaves none (20 resets on each version). Measured here: 10-30 ms, most of it
waiting for the last session's child to be idle. pgpool-II forks the children itself; nothing is
restarted.

pgpool-II keeps System V shared memory and semaphores that only its own shutdown removes, and
its children outlive a main process ended by SIGKILL. So it stops with SIGINT (fast shutdown: it
ends its children and removes them), and gets SIGINT, not SIGKILL, when leakcheck dies (PDEATHSIG).
When its main process ends otherwise (killed, or SIGINT while it starts, before it handles it), its
children are stopped and its objects removed by the run as soon as it sees the end, or by the sweep
of a killed run (ServerProcess's `forks`: the main process is in its folder's ledger from its start,
the objects once it answers).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from leakcheck.model.errors import StartError, one_line
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.provision.base import Endpoint
from leakcheck.provision.console import execute
from leakcheck.provision.host.owner import start_time
from leakcheck.provision.host.pooler_process import PoolerProcess, Settings
from leakcheck.provision.host.proc_sockets import children_of, idle_children
from leakcheck.provision.host.process import STOPPED, stopped
from leakcheck.provision.pgpool.conf import PgpoolLayout, bind_failure, render_files, shown, start_error

RESET_TIMEOUT = 5.0


def children(settings: PoolSettings, extra: Settings) -> int:
    """How many connection children pgpool-II runs (num_init_children: the pool size, or an extra setting)."""
    given = dict(extra).get("num_init_children", "")
    return int(given) if given.isdigit() else settings.pool_size


def _connect(endpoint: Endpoint) -> psycopg.Connection[Any]:
    return psycopg.connect(endpoint.conninfo(), autocommit=True, connect_timeout=3)


def answers_port(endpoint: Endpoint, port: int) -> str | None:
    """None when pgpool-II at `endpoint` answers `PGPOOL SHOW port` with `port` (the one it listens on:
    pgpool-II, not some other server, is there), else why not (readiness on both backends)."""
    try:
        with _connect(endpoint) as conn:
            rows = execute(conn, "PGPOOL SHOW port", "pgpool-II")  # bounded: a stopped pgpool never hangs this
    except (psycopg.Error, StartError) as exc:
        return one_line(exc, 160)
    answered = [next(iter(row.values()), "") for row in rows]
    return None if answered == [str(port)] else f"PGPOOL SHOW port answered {answered!r}"


def refused_setting(endpoint: Endpoint, extra: Settings) -> str | None:
    """pgpool-II ignores settings it does not know: ask it `PGPOOL SHOW <name>` for each extra one; the
    first refusal, on one line (a start error on both backends), else None."""
    if not extra:
        return None
    with _connect(endpoint) as conn:
        for name, value in extra:
            try:
                execute(conn, f"PGPOOL SHOW {name}", "pgpool-II")  # bounded, as every console command
            except StartError as exc:
                if "did not answer" in str(exc):
                    raise
                return (f"pgpool.conf sets {name} = {value!r}, and PGPOOL SHOW {name} answered: "
                        f"{one_line(exc, 160)} (pgpool-II ignores settings it does not know)")
    return None


def runs_otherwise(endpoint: Endpoint, expected: dict[str, str]) -> str | None:
    """The first of leakcheck's settings (`expected`: conf.shown) that pgpool-II runs with another value
    of, by its own `PGPOOL SHOW name`, on one line; None when it runs with each as written."""
    with _connect(endpoint) as conn:
        for name, want in expected.items():
            rows = execute(conn, f"PGPOOL SHOW {name}", "pgpool-II")
            # one column, or (item, value, description) rows when the name has per-backend forms
            found = [row.get("value", "") for row in rows if row.get("item") == name] or [
                next(iter(row.values()), "") for row in rows if len(row) == 1]
            if found != [want]:
                return (f"pgpool-II runs with {name} = {found[0] if len(found) == 1 else found!r} (PGPOOL SHOW "
                        f"{name}), not leakcheck's {want!r}")
    return None


class PgpoolProcess(PoolerProcess):
    """A pgpool-II (own temp dir, config files, port) for as long as the `with` lasts; `reset()`
    closes every cached backend so the next user starts from fresh server connections.

    It runs as `user` (never as root); entering waits until it answers `PGPOOL SHOW port`, checks
    that it knows every extra setting, then resets; leaving stops it (SIGINT: fast shutdown, then
    SIGKILL to its process group) and removes its temp dir, whatever happened.
    """

    name = "pgpool"
    title = "pgpool-II"
    config = "pgpool.conf"
    stop_signal = signal.SIGINT
    death_signal = signal.SIGINT
    forks = True
    _layout: PgpoolLayout | None = None
    #: Its children once reset, (pid, start): the one that serves a client is watched too (ended()).
    _children: tuple[tuple[int, int], ...] = ()

    def reset(self) -> None:
        """SIGKILL every connection child once idle; wait until as many new ones wait for clients."""
        main = self._alive().pid
        assert main is not None
        wanted = children(self.settings, self.extra)
        idle = self._until(lambda: idle_children(main), wanted, "children idle")
        for pid in idle:
            os.kill(pid, signal.SIGKILL)
        self._until(lambda: [pid for pid in idle_children(main) if pid not in idle], wanted, "new children")
        self._children = tuple((pid, start) for pid in children_of(main) if (start := start_time(pid)) is not None)

    def ended(self) -> str | None:
        """As for every pooler, or that a child of it is stopped (SIGSTOP): its client would wait for ever."""
        how = super().ended()
        if how is not None:
            return how
        for pid, start in self._children:
            if stopped(pid) and start_time(pid) == start:
                return f"{STOPPED} (its child process {pid})"
        return None

    def _until(self, found: Callable[[], list[int]], wanted: int, what: str) -> list[int]:
        deadline = time.monotonic() + RESET_TIMEOUT
        while True:
            pids = found()
            if len(pids) >= wanted:
                return pids
            ended = self.ended()  # gone, or stopped (SIGSTOP): no child will come
            if ended is not None or time.monotonic() > deadline:
                raise StartError(
                    f"could not reset pgpool-II {self.version}'s cached backends at port {self.port}: "
                    + (ended or f"{len(pids)} of {wanted} {what} after {RESET_TIMEOUT:g} s")
                )
            time.sleep(0.001)

    def _ready(self) -> str | None:
        return answers_port(self.endpoint(), self.port)

    def _after_start(self) -> None:
        """Ask about each extra setting (see refused_setting) and check that it runs with leakcheck's own
        (runs_otherwise; a difference stops it), then drop the backend those checks left in its cache."""
        assert self._layout is not None
        refused = refused_setting(self.endpoint(), self.extra)
        if refused is not None:
            raise StartError.with_log(self.what, refused, self._alive().recent_log(), self._hint())
        otherwise = runs_otherwise(self.endpoint(), shown(self.settings, self.extra, self._layout))
        if otherwise is not None:
            raise StartError(f"{self.what}: {otherwise}: stopped it; a setting reached it that leakcheck did not "
                             f"write, report this. {self._hint()}")
        self.reset()
        self._alive().record_objects()  # its children's too (the PCP child makes its own segment)

    def _start_error(self, log: str) -> str | None:
        return start_error(log)

    def _failing(self, log: str) -> str | None:
        return bind_failure(log)

    def _write_files(self, tmp: Path) -> list[str]:
        layout = PgpoolLayout(
            version=self.version, port=self.port, run_dir=str(tmp), pool_passwd=str(tmp / "pool_passwd"),
            server_host=self.server_host, server_port=self.server_port,
        )
        self._layout = layout
        admin = self.endpoint()
        files = render_files(self.settings, self.extra, layout, self.credentials, (admin.user, admin.password))
        for name in ("pgpool.pid", "pgpool_status"):
            (tmp / name).unlink(missing_ok=True)
        for name, text in files.items():
            self.user.write_private(tmp / name, text)
        return ["-n", "-f", str(tmp / self.config), "-F", str(tmp / "pcp.conf"), "-a", str(tmp / "pool_hba.conf")]
