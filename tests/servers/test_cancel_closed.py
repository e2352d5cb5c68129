"""A driver's cancel that says it returned once its peer closed the cancel connection (`Client.cancel`
True, an agent's `"closed": true`) really waited for that close: cancel_late ends its wait on it
(probes/cancel.py). Real servers: the test's own PostgreSQL with its postmaster stopped (SIGSTOP), so
the kernel accepts the cancel connection and nobody reads it until the test continues PostgreSQL.

And PgBouncer 1.24's SHOW POOLS counts a forwarded cancel until PostgreSQL closed its connection, the
other half of that evidence (run/runner.py cancels_settled).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakcheck.drivers.agents import client as agents
from leakcheck.drivers.clients import connect
from leakcheck.drivers.interface import Client
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Driver
from leakcheck.model.versions import parse_spec
from leakcheck.provision.host.system import ServerUser, cache_root
from leakcheck.provision.pgbouncer import admin
from leakcheck.provision.pgbouncer.binaries import resolve_bouncer
from leakcheck.provision.pgbouncer.process import BouncerProcess
from leakcheck.provision.postgres.server import PgServer

pytestmark = pytest.mark.servers

#: Seconds the cancel must still be waiting while PostgreSQL is stopped (a driver that does not wait for the
#: close returns in milliseconds), and the bound on everything else.
HELD = 0.5
BOUND = 10.0

#: The drivers whose cancel of an idle connection (cancel_late's A) says it waited for the peer's close:
#: every shipped one that can send one then (PDO cannot cancel; postgres.js cancels only a running query).
CLOSING = [Driver("psycopg"), Driver("asyncpg"), Driver("node-postgres"), Driver("pgjdbc"), Driver("ruby-pg"),
           Driver("pgx")]


@pytest.fixture(autouse=True)
def _stop_agents() -> Iterator[None]:
    yield
    agents.stop_all()


def _postmaster(postgres: PgServer) -> int:
    assert postgres.tmpdir is not None
    return int((Path(postgres.tmpdir) / "data" / "postmaster.pid").read_text().split()[0])


async def _cancel_while_stopped(a: Client, postmaster: int, held: float = HELD) -> tuple[bool, bool]:
    """A's cancel with nothing running, sent while the postmaster is stopped: whether it had returned after
    `held` seconds, and what it returned once the postmaster went on."""
    os.kill(postmaster, signal.SIGSTOP)
    try:
        cancelling = asyncio.create_task(a.cancel())
        done, _ = await asyncio.wait({cancelling}, timeout=held)
    finally:
        os.kill(postmaster, signal.SIGCONT)
    return bool(done), await asyncio.wait_for(cancelling, BOUND)


@pytest.mark.parametrize("driver", CLOSING, ids=str)
def test_a_cancel_that_says_its_peer_closed_did_not_return_before_a_stopped_postgresql_read_it(
        postgres: PgServer, driver: Driver) -> None:
    async def run() -> tuple[bool, bool]:
        a = await connect(driver, "A", postgres.endpoint())
        try:
            return await _cancel_while_stopped(a, _postmaster(postgres))
        finally:
            await a.close()

    returned_early, closed = asyncio.run(run())
    assert closed, f"{driver}'s cancel of an idle connection no longer says it waited for the peer's close"
    assert not returned_early, f"{driver}'s cancel returned within {HELD} s while nobody could read it"


#: Drivers whose cancel gives up on a peer that holds the connection: node-postgres's agent after 5 s, pgjdbc
#: after its cancelSignalTimeout (1 s here); either answer must then not say the peer closed.
GIVING_UP = [
    pytest.param(Driver("node-postgres"), (), 6.0, id="node-postgres"),
    pytest.param(Driver("pgjdbc"), (("cancelSignalTimeout", "1"),), 2.0, id="pgjdbc"),
]


@pytest.mark.parametrize(("driver", "settings", "held"), GIVING_UP)
def test_a_cancel_that_gave_up_on_a_silent_peer_does_not_say_the_peer_closed(
        postgres: PgServer, driver: Driver, settings: tuple[tuple[str, str], ...], held: float) -> None:
    async def run() -> tuple[bool, bool]:
        a = await connect(driver, "A", postgres.endpoint(), settings)
        try:
            return await _cancel_while_stopped(a, _postmaster(postgres), held)
        finally:
            await a.close()

    returned, closed = asyncio.run(run())
    assert returned, f"{driver}'s cancel did not give up within {held} s on a peer that never closed"
    assert not closed, f"{driver}'s cancel said its peer closed, but it had given up on it"


def test_pgbouncer_124_counts_a_forwarded_cancel_until_postgresql_closed_its_connection(
        postgres: PgServer, user: ServerUser) -> None:
    binary = resolve_bouncer(parse_spec("1.24", "--bouncer"), cache_root())
    with BouncerProcess(binary, PoolSettings(), postgres.endpoint(), user) as bouncer:
        endpoint = bouncer.endpoint()
        assert admin.cancels_until_closed(endpoint) in (None, 0)  # no pool yet, or one with nothing in flight

        async def run() -> tuple[int | None, int | None, str]:
            a = await connect(Driver("asyncpg"), "A", endpoint)
            try:
                long = asyncio.create_task(a.query("SELECT pg_sleep(30)"))
                await asyncio.sleep(0.5)  # the statement runs (a cancel before it would find A idle)
                postmaster = _postmaster(postgres)
                os.kill(postmaster, signal.SIGSTOP)
                try:
                    cancelling = asyncio.create_task(a.cancel())
                    await asyncio.sleep(HELD)
                    held = await asyncio.to_thread(admin.cancels_until_closed, endpoint)
                finally:
                    os.kill(postmaster, signal.SIGCONT)
                await asyncio.wait_for(cancelling, BOUND)
                after = await asyncio.to_thread(admin.cancels_until_closed, endpoint)
                try:
                    await asyncio.wait_for(long, BOUND)
                    ended = "completed"
                except Exception as exc:  # noqa: BLE001 - the cancel's error is what the test reads
                    ended = str(exc)
                return held, after, ended
            finally:
                await a.close()

        held, after, ended = asyncio.run(run())
    assert held == 1, "SHOW POOLS did not count the cancel PgBouncer was forwarding to a stopped PostgreSQL"
    assert after == 0 and ended.startswith("57014"), (after, ended)
