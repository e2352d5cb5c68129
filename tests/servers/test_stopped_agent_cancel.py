"""A pgx v4 agent stopped while the cancel its driver sent is still in flight, then the pool's reset.

pgx v4 returns a cancelled query at once; pgconn's asyncClose then sends the CancelRequest on a new connection
and only afterwards A's Terminate, from a goroutine (up to 15 s). The next probe stops that agent
(`next_probe()`): where Go exited at the end of its stdin without waiting, both sockets ended without a
Terminate while PgBouncer 1.18.0 still forwarded the cancel, it freed the cancel client, the reset saw no cancel
in flight, and its KILL disconnected the freed client again: `FATAL ... disconnect_client(): bad client state:
0` (pgbouncer#801), in cancel_late's session control right after cancel_own (round 37's CI).

Real servers, the harness's own client and stop: the test's PostgreSQL stopped (SIGSTOP) while PgBouncer forwards
the cancel, continued by a timer HOLD seconds later (longer than the stop's grace before its SIGTERM).
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from leakcheck.drivers.agents import client as agents
from leakcheck.drivers.agents.catalogue import Shipped, shipped
from leakcheck.drivers.agents.client import AgentClient
from leakcheck.drivers.agents.install import installed
from leakcheck.drivers.agents.process import STOP_TIMEOUT
from leakcheck.drivers.interface import ServerError
from leakcheck.model.errors import LeakcheckError, StartError
from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.model.versions import parse_spec
from leakcheck.provision.base import Endpoint
from leakcheck.provision.host.system import ServerUser, cache_root
from leakcheck.provision.pgbouncer import admin
from leakcheck.provision.pgbouncer.binaries import resolve_bouncer
from leakcheck.provision.pgbouncer.process import BouncerProcess
from leakcheck.provision.postgres.server import PgServer

pytestmark = pytest.mark.servers

#: Seconds the test lets a step take (far above what it needs: milliseconds).
BOUND = 10.0
#: Seconds PostgreSQL stays stopped once the agent's stop began: longer than the stop's grace before its SIGTERM.
HOLD = STOP_TIMEOUT + 1.0


@pytest.fixture(autouse=True)
def _stop_agents() -> Iterator[None]:
    agents.stop_all()
    yield
    agents.stop_all()


def _postmaster(postgres: PgServer) -> int:
    assert postgres.tmpdir is not None
    return int((Path(postgres.tmpdir) / "data" / "postmaster.pid").read_text().split()[0])


def _until(ready: Callable[[], bool], failure: str) -> None:
    deadline = time.monotonic() + BOUND
    while not ready():
        assert time.monotonic() < deadline, failure
        time.sleep(0.01)


def _sleeping(direct: Endpoint) -> bool:
    with psycopg.connect(direct.conninfo(), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
                           " AND query = 'SELECT pg_sleep(30)'").fetchone()
    return bool(row and row[0])


def _in_flight(endpoint: Endpoint) -> bool:
    with admin.connect(endpoint) as console:
        return admin.cancels_in_flight(console) > 0


async def _cancelled_and_closed(pgx: Shipped, bouncer: BouncerProcess, direct: Endpoint, postmaster: int) -> None:
    """A's statement through PgBouncer's session pool, PostgreSQL stopped, A's driver cancelling it (pgx v4: the
    call returns, pgconn's goroutine sends the CancelRequest), PgBouncer forwarding it, then A's close, as a probe
    ends. PostgreSQL stays stopped."""
    a = await AgentClient.connect(pgx, "A", bouncer.endpoint())
    try:
        await a.query("SELECT 1")
        running = asyncio.ensure_future(a.execute("SELECT pg_sleep(30)"))
        await asyncio.to_thread(_until, lambda: _sleeping(direct), "A's statement never ran on PostgreSQL")
        os.kill(postmaster, signal.SIGSTOP)
        await a.cancel()
        with pytest.raises(ServerError):  # (pgx's words for its cancelled context)
            await asyncio.wait_for(running, BOUND)
        await asyncio.to_thread(_until, lambda: _in_flight(bouncer.endpoint()),
                                "PgBouncer never showed A's cancel request in flight")
    finally:
        await a.close()


def test_a_pgx_agent_stopped_while_its_cancel_is_in_flight_lets_it_end_first_and_pgbouncer_118_survives_the_reset(
    postgres: PgServer, user: ServerUser
) -> None:
    pgx = shipped("pgx")
    assert pgx is not None
    try:
        installed(pgx.spec)
    except LeakcheckError as exc:
        pytest.skip(f"the pgx agent: {exc}")
    binary = resolve_bouncer(parse_spec("1.18", "--bouncer"), cache_root())
    postmaster = _postmaster(postgres)
    resume = threading.Timer(HOLD, os.kill, (postmaster, signal.SIGCONT))
    try:
        with BouncerProcess(binary, PoolSettings(PoolMode.SESSION, 2), postgres.endpoint(), user) as bouncer:
            agents.next_probe()
            asyncio.run(_cancelled_and_closed(pgx, bouncer, postgres.endpoint(), postmaster))
            resume.start()
            agents.next_probe()  # the next probe: the agent that served the last one alone is stopped
            try:
                bouncer.reset()
            except StartError as exc:  # its console did not answer: PgBouncer exited (its log says why)
                pytest.fail(f"{exc}\n{bouncer.log_text()[-2000:]}")
            assert bouncer.ended() is None and "FATAL" not in bouncer.log_text(), bouncer.log_text()[-2000:]
            with psycopg.connect(bouncer.endpoint().conninfo(), autocommit=True) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        resume.cancel()
        os.kill(postmaster, signal.SIGCONT)
