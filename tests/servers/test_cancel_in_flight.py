"""A pool reset while PgBouncer still forwards a cancel request: PgBouncer 1.18.0 crashed on the KILL
(`FATAL @src/objects.c:1052 in function disconnect_client(): bad client state: 1`, pgbouncer#801, fixed
in 1.19.1 by #846), which is what turned pgx's cells on 1.18 into errors after cancel_own. And a cancel
connection its client ends while PgBouncer 1.18.0 still forwards the request crashes it the same way
(`bad client state: 0`): pgx's agents gave up on theirs after 5 s (cancel_late on the session route).

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
from typing import Any

import psycopg
import pytest

from leakcheck.drivers.agents.catalogue import shipped
from leakcheck.drivers.agents.install import installed
from leakcheck.drivers.agents.process import AgentProcess
from leakcheck.model.errors import LeakcheckError, StartError
from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.model.versions import parse_spec
from leakcheck.provision.base import DBNAME, Endpoint
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


def _settled_or_gone(endpoint: Endpoint) -> bool:
    """PgBouncer holds no cancel request and no connection it forwards one on (SHOW POOLS), or its console does
    not answer (its log then says why)."""
    counts = ("cl_active_cancel_req", "cl_waiting_cancel_req", "sv_active_cancel")
    try:
        with admin.connect(endpoint) as console:
            return not any(int(row.get(name) or 0) for row in admin.execute(console, "SHOW POOLS") for name in counts)
    except psycopg.Error:
        return True


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


#: Seconds PostgreSQL stays stopped while PgBouncer forwards an agent's cancel: more than the 5 s pgx's agents
#: gave their CancelRequest before, less than pgx's own bound (15 s).
HOLD = 6.0


def test_pgx_agents_wait_while_pgbouncer_118_forwards_their_cancel_and_pgbouncer_survives(
    postgres: PgServer, user: ServerUser
) -> None:
    # Session mode: A's connection, idle once its first statement ran, stays linked to its server, so PgBouncer
    # 1.18 forwards a cancel with A's key (cancel_late's A); PostgreSQL, stopped, leaves it in flight HOLD seconds.
    agents: list[AgentProcess] = []
    binary = resolve_bouncer(parse_spec("1.18", "--bouncer"), cache_root())
    pid = _postmaster(postgres)
    try:
        for driver in ("pgx", "pgx-v5"):
            found = shipped(driver)
            assert found is not None
            try:
                agents.append(installed(found.spec).start(preloaded=False))
            except LeakcheckError as exc:
                pytest.skip(f"the {driver} agent: {exc}")
        with BouncerProcess(binary, PoolSettings(PoolMode.SESSION, 2), postgres.endpoint(), user) as bouncer:
            at = bouncer.endpoint()
            for agent in agents:
                assert agent.request("connect", host=at.host, port=at.port, user=at.user, password=at.password,
                                     dbname=at.dbname, settings={})["ok"] is True
                assert agent.request("query", sql="SELECT 1")["rows"] == [[1]]  # now linked to its server
            answers: dict[str, dict[str, Any]] = {}

            def cancel(agent: AgentProcess) -> None:
                answers[agent.driver] = agent.request("cancel")

            asking = [threading.Thread(target=cancel, args=(agent,)) for agent in agents]
            resume = threading.Timer(HOLD, os.kill, (pid, signal.SIGCONT))
            os.kill(pid, signal.SIGSTOP)
            try:
                resume.start()
                for each in asking:
                    each.start()
                for each in asking:
                    each.join(3 * BOUND)
            finally:
                resume.cancel()
                os.kill(pid, signal.SIGCONT)
            _until(lambda: _settled_or_gone(bouncer.endpoint()), "PgBouncer never finished forwarding the cancels")
            assert bouncer.ended() is None and "FATAL" not in bouncer.log_text(), bouncer.log_text()[-2000:]
            for agent in agents:  # the peer closed the connection: PostgreSQL acted on the request
                assert answers.get(agent.driver, {}).get("closed") is True, answers
            bouncer.reset()
    finally:
        os.kill(pid, signal.SIGCONT)
        for agent in agents:
            agent.stop()


def _servers(endpoint: Endpoint) -> list[dict[str, str]]:
    """SHOW SERVERS' rows of the run's database (PostgreSQL stopped: PgBouncer's word, not PostgreSQL's)."""
    with admin.connect(endpoint) as console:
        return [row for row in admin.execute(console, "SHOW SERVERS") if row.get("database") == DBNAME]


@pytest.mark.parametrize("version", ["1.24", "1.26"])
def test_a_reset_while_pgbouncer_forwards_a_cancel_since_1_24_1_kills_it_at_once_and_the_next_use_is_fresh(
    postgres: PgServer, user: ServerUser, version: str
) -> None:
    binary = resolve_bouncer(parse_spec(version, "--bouncer"), cache_root())
    assert not admin.settles_cancels(binary.version), binary.version
    with BouncerProcess(binary, PoolSettings(), postgres.endpoint(), user) as bouncer:
        endpoint = bouncer.endpoint()
        with _cancel_held_in_flight(postgres, bouncer):
            before = _servers(endpoint)
            assert "active_cancel" in {row.get("state") for row in before}, before  # the cancel's own connection
            old = {int(row.get("remote_pid") or 0) for row in before if row.get("state") != "active_cancel"} - {0}
            # PostgreSQL stays stopped (the cancel in flight for as long as the reset takes): before 1.24.1's
            # reset skipped its wait, this one waited 5 s and failed ("still forwarded 1 cancel request(s)")
            began = time.monotonic()
            bouncer.reset()
            took = time.monotonic() - began
            assert bouncer.ended() is None and "FATAL" not in bouncer.log_text(), bouncer.log_text()[-2000:]
            assert _in_flight(endpoint) == 0 and not _servers(endpoint)  # the KILL closed the cancel's connections
        assert took < 1.0, took
        # PostgreSQL continued, with the cancel's connection (already closed by PgBouncer) in its backlog: the next
        # use's server connection is a new backend, whose statement no late cancel reaches
        _until(lambda: _sleeping(postgres.endpoint()) == 0, "A's backend outlived the KILL")
        with psycopg.connect(endpoint.conninfo(), autocommit=True) as conn:
            row = conn.execute("SELECT pg_backend_pid() FROM pg_sleep(0.3)").fetchone()  # not cancelled
        assert old and row is not None and row[0] not in old, (row, old)
        assert bouncer.ended() is None and "FATAL" not in bouncer.log_text(), bouncer.log_text()[-2000:]
        bouncer.reset()
