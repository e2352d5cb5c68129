"""A pool reset while PgBouncer still forwards a cancel request: PgBouncer 1.18.0 crashed on the KILL
(`FATAL @src/objects.c:1052 in function disconnect_client(): bad client state: 1`, pgbouncer#801, fixed
in 1.19.1 by #846), which is what turned pgx's cells on 1.18 into errors after cancel_own.

Real servers: the test's own PostgreSQL, stopped (SIGSTOP) so that a cancel PgBouncer forwards to it stays
in flight (the kernel accepts the connection; nobody answers), and continued by a timer.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from leakcheck.model.errors import StartError
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.versions import parse_spec
from leakcheck.provision.base import Endpoint
from leakcheck.provision.host.system import ServerUser, cache_root
from leakcheck.provision.pgbouncer import admin
from leakcheck.provision.pgbouncer.binaries import resolve_bouncer
from leakcheck.provision.pgbouncer.process import BouncerProcess
from leakcheck.provision.postgres.server import PgServer

pytestmark = pytest.mark.servers

#: Seconds the test lets things take (far above what they need: milliseconds).
BOUND = 10.0


def _postmaster(postgres: PgServer) -> int:
    assert postgres.tmpdir is not None
    return int((Path(postgres.tmpdir) / "data" / "postmaster.pid").read_text().split()[0])


def _in_flight(endpoint: Endpoint) -> int:
    with admin.connect(endpoint) as console:
        return admin.cancels_in_flight(console)


def _sleeping(direct: Endpoint) -> int:
    with psycopg.connect(direct.conninfo(), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
                           " AND query = 'SELECT pg_sleep(30)'").fetchone()
    return int(row[0]) if row else 0


def _until(ready: Callable[[], bool], failure: str) -> None:
    deadline = time.monotonic() + BOUND
    while not ready():
        assert time.monotonic() < deadline, failure
        time.sleep(0.01)


#: Client A in a process of its own (libpq's cancel holds the GIL while it waits for the stopped server):
#: it sends its statement, says so, and on a line from stdin its driver cancels it.
_CLIENT_A = textwrap.dedent("""
    import sys, threading, psycopg
    a = psycopg.connect(sys.argv[1], autocommit=True)
    def run():
        try:
            a.execute("SELECT pg_sleep(30)")
        except psycopg.Error:
            pass
    threading.Thread(target=run, daemon=True).start()
    print("sent", flush=True)
    sys.stdin.readline()
    a.cancel()
""")


@contextmanager
def _cancel_held_in_flight(postgres: PgServer, bouncer: BouncerProcess) -> Iterator[threading.Timer]:
    """A's statement runs through PgBouncer; PostgreSQL is stopped; A's driver (libpq) cancels it, and
    PgBouncer forwards the cancel to the stopped PostgreSQL. Yields a timer that continues PostgreSQL."""
    endpoint, pid = bouncer.endpoint(), _postmaster(postgres)
    a = subprocess.Popen([sys.executable, "-c", _CLIENT_A, endpoint.conninfo()], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    resume = threading.Timer(1.0, os.kill, (pid, signal.SIGCONT))
    with a:
        yield from _held(a, endpoint, postgres.endpoint(), pid, resume)


def _held(a: subprocess.Popen[str], endpoint: Endpoint, direct: Endpoint, pid: int, resume: threading.Timer
          ) -> Iterator[threading.Timer]:
    try:
        assert a.stdout is not None and a.stdin is not None
        assert select.select([a.stdout], [], [], BOUND)[0] and a.stdout.readline() == "sent\n"
        _until(lambda: _sleeping(direct) > 0, "A's statement never ran on PostgreSQL")
        os.kill(pid, signal.SIGSTOP)
        a.stdin.write("cancel\n")
        a.stdin.flush()
        _until(lambda: _in_flight(endpoint) > 0, "PgBouncer never showed the cancel request in flight")
        yield resume
    finally:
        resume.cancel()
        os.kill(pid, signal.SIGCONT)
        try:
            a.wait(BOUND)
        except subprocess.TimeoutExpired:
            a.kill()
            a.wait(BOUND)


def test_a_reset_while_pgbouncer_118_forwards_a_cancel_waits_for_it_and_pgbouncer_survives(
    postgres: PgServer, user: ServerUser
) -> None:
    binary = resolve_bouncer(parse_spec("1.18", "--bouncer"), cache_root())
    with BouncerProcess(binary, PoolSettings(), postgres.endpoint(), user) as bouncer:
        with _cancel_held_in_flight(postgres, bouncer) as resume:
            resume.start()  # PostgreSQL answers the cancel a second from now, while the reset waits
            bouncer.reset()
        assert "FATAL" not in bouncer.log_text(), bouncer.log_text()[-2000:]
        with psycopg.connect(bouncer.endpoint().conninfo(), autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_cancel_still_in_flight_after_the_bound_fails_the_reset_with_one_line_and_pgbouncer_survives(
    postgres: PgServer, user: ServerUser
) -> None:
    binary = resolve_bouncer(parse_spec("1.18", "--bouncer"), cache_root())
    with BouncerProcess(binary, PoolSettings(), postgres.endpoint(), user) as bouncer:
        with _cancel_held_in_flight(postgres, bouncer), pytest.raises(StartError) as failed:
            bouncer.reset()  # PostgreSQL stays stopped: the cancel never completes within the bound
        message = str(failed.value)
        assert "still forwarded 1 cancel request(s)" in message and "\n" not in message, message
        assert bouncer.ended() is None and "FATAL" not in bouncer.log_text(), bouncer.log_text()[-2000:]
        bouncer.reset()  # PostgreSQL continued: the cancel completed, the next reset goes through
