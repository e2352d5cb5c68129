"""Each shipped JavaScript agent against a real PostgreSQL and PgBouncer: the protocol's operations
through the driver's public API, and two clients that never share an agent process."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from leakcheck.drivers.agents import client as agents
from leakcheck.drivers.agents.client import AgentClient
from leakcheck.drivers.clients import connect, driver_version
from leakcheck.drivers.interface import ServerError
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Driver
from leakcheck.provision.host.proc_sockets import socket_inodes
from leakcheck.provision.postgres.fixtures import APP_ROLE
from tests.support.servers import TEST_PG, Measure

pytestmark = pytest.mark.servers

JS_AGENTS = [Driver("node-postgres"), Driver("postgres-js")]


@pytest.fixture(autouse=True)
def _stop_agents() -> Iterator[None]:
    yield
    agents.stop_all()


async def _connect(driver: Driver, label: str, measure: Measure) -> AgentClient:
    direct = measure.backend.postgres(measure.pg(TEST_PG[0])).as_user(APP_ROLE)
    client = await connect(driver, label, direct)
    assert isinstance(client, AgentClient)
    return client


@pytest.mark.parametrize("driver", JS_AGENTS, ids=str)
def test_an_agent_runs_queries_with_json_values_and_reports_sqlstates(measure: Measure, driver: Driver) -> None:
    async def run() -> tuple[list[tuple[object, ...]], str]:
        client = await _connect(driver, "A", measure)
        try:
            rows = await client.query("SELECT 1, 9007199254740993::int8, true, 'x'::text, NULL, ARRAY['a','b'], "
                                      "1.5::float8, 2.50::numeric")
            with pytest.raises(ServerError) as caught:
                await client.query("SELECT * FROM no_such_table_here")
            return rows, caught.value.sqlstate
        finally:
            await client.close()

    rows, sqlstate = asyncio.run(run())
    assert rows == [(1, 9007199254740993, True, "x", None, ["a", "b"], 1.5, "2.50")]
    assert sqlstate == "42P01"
    assert driver_version(driver) is not None


_MINE = "WHERE statement LIKE '%''harness''%' OR statement LIKE '%''app''%'"


@pytest.mark.parametrize("driver", JS_AGENTS, ids=str)
def test_an_agent_prepares_a_named_statement_only_on_its_prepared_path(measure: Measure, driver: Driver) -> None:
    async def run() -> tuple[list[str], list[str], bool]:
        client = await _connect(driver, "A", measure)
        try:
            # (postgres.js prepares its own fetch_types query at connect: its default, as in an application)
            await client.query("SELECT 'harness'::text")
            harness = [r[0] for r in await client.query(f"SELECT name FROM pg_prepared_statements {_MINE}")]
            await client.prepared("SELECT 'app'::text")
            await client.prepared("SELECT 'app'::text")
            names = [r[0] for r in await client.query(f"SELECT name FROM pg_prepared_statements {_MINE}")]
            named = await client.query(f"SELECT bool_and({client.statement_names}) FROM pg_prepared_statements")
            return harness, names, bool(named[0][0])
        finally:
            await client.close()

    harness, names, driver_named = asyncio.run(run())
    assert harness == []
    assert len(names) == 1 and driver_named, names


@pytest.mark.parametrize("driver", JS_AGENTS, ids=str)
def test_an_agent_hands_notifications_and_its_connection_to_the_next_probe(measure: Measure, driver: Driver) -> None:
    async def run() -> tuple[list[str], int, int]:
        client = await _connect(driver, "A", measure)
        await client.execute("LISTEN lc_agent_chan")
        await client.execute("NOTIFY lc_agent_chan, 'hi'")
        await client.query("SELECT 1")
        got = [n.payload for n in client.notifications if n.channel == "lc_agent_chan"]
        first = client.agent_pid
        await client.close()
        again = await _connect(driver, "A", measure)  # the same slot: the same agent, a fresh connection
        try:
            return got, first, again.agent_pid
        finally:
            await again.close()

    got, first, second = asyncio.run(run())
    assert got == ["hi"]
    assert first == second


@pytest.mark.parametrize("driver", JS_AGENTS, ids=str)
def test_a_connection_the_server_closed_fails_its_next_statements_and_the_agent_lives(
    measure: Measure, driver: Driver
) -> None:
    async def run() -> tuple[list[str], int, int]:
        client = await _connect(driver, "A", measure)
        first = client.agent_pid
        # The server ends A's connection: idle in a transaction past its idle_in_transaction timeout.
        await client.execute("SET idle_in_transaction_session_timeout = '100ms'")
        await client.execute("BEGIN")
        await asyncio.sleep(1.0)
        failed = []
        for _ in range(2):  # (postgres.js 3.4.9 itself would end the process at the second one)
            with pytest.raises(ServerError) as caught:
                await client.query("SELECT 1")
            failed.append(caught.value.sqlstate)
        await client.close()
        again = await _connect(driver, "A", measure)  # the same agent, a fresh connection
        try:
            await again.query("SELECT 1")
            return failed, first, again.agent_pid
        finally:
            await again.close()

    failed, first, second = asyncio.run(run())
    assert all(code in ("08006", "25P03", "57P01") for code in failed), failed
    assert first == second


@pytest.mark.parametrize("driver", JS_AGENTS, ids=str)
def test_two_clients_never_share_an_agent_process_or_a_connection(measure: Measure, driver: Driver) -> None:
    async def run() -> tuple[int, int, int, int, int, set[int], set[int]]:
        a = await _connect(driver, "A", measure)
        b = await _connect(driver, "B", measure)
        try:
            ((a_backend,),) = await a.query("SELECT pg_backend_pid()")
            ((b_backend, b_port),) = await b.query(
                "SELECT pg_backend_pid(), client_port FROM pg_stat_activity WHERE pid = pg_backend_pid()")
            held = _local_ports(a.agent_pid), _local_ports(b.agent_pid)  # while both are connected
            return a.agent_pid, b.agent_pid, a_backend, b_backend, b_port, *held
        finally:
            await a.close()
            await b.close()

    a_pid, b_pid, a_backend, b_backend, b_port, a_ports, b_ports = asyncio.run(run())
    assert a_pid != b_pid and a_backend != b_backend
    # B's server connection comes from a socket of B's own agent process, not A's.
    assert b_port in b_ports and b_port not in a_ports


def _local_ports(pid: int) -> set[int]:
    """The local port of each TCP socket `pid` holds (field 1 of /proc/net/tcp)."""
    inodes = {str(i) for i in socket_inodes(pid)}
    out = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) > 9 and fields[9] in inodes:
            out.add(int(fields[1].rpartition(":")[2], 16))
    return out


def test_node_postgres_named_statements_collide_between_two_clients_without_statement_tracking(
    measure: Measure,
) -> None:
    pg, bouncer = measure.pg(TEST_PG[0]), measure.bouncer("1.18")
    with measure.backend.pooler(pg, bouncer, PoolSettings()) as endpoint:
        where = endpoint.as_user(APP_ROLE)

        async def run() -> str:
            a = await connect(Driver("node-postgres"), "A", where)
            b = await connect(Driver("node-postgres"), "B", where)
            try:
                await a.prepared("SELECT 'a'::text")
                with pytest.raises(ServerError) as caught:
                    await b.prepared("SELECT 'b'::text")
                return str(caught.value)
            finally:
                await a.close()
                await b.close()

        said = asyncio.run(run())
    assert said.startswith('42P05: prepared statement "stmt_1" already exists'), said


def test_an_agent_whose_hello_says_it_cannot_cancel_is_never_sent_a_cancel(measure: Measure) -> None:
    from leakcheck.model.errors import NotApplicable

    async def run() -> tuple[int, int, str]:
        client = await _connect(Driver("pdo"), "A", measure)
        try:
            agent = client._lease.agent
            sent = agent._next
            with pytest.raises(NotApplicable) as caught:
                await client.cancel()
            return sent, agent._next, str(caught.value)
        finally:
            await client.close()

    before, after, words = asyncio.run(run())
    assert after == before  # no request: a PDO cancel would be answered only after the statement it cancels
    assert words == "the pdo agent cannot cancel: PDO has no cancel and PHP runs one request at a time"


def test_an_agent_whose_driver_has_no_prepared_path_makes_a_prepared_probe_not_applicable_in_its_words(
    measure: Measure,
) -> None:
    from leakcheck.model.errors import NotApplicable

    # Prisma 7 at its defaults: @prisma/adapter-pg names no statement without a statementNameGenerator.
    async def run() -> tuple[str, list[tuple[object, ...]]]:
        client = await _connect(Driver("prisma"), "A", measure)
        try:
            with pytest.raises(NotApplicable) as caught:
                await client.prepared("SELECT 'app'::text")
            return str(caught.value), await client.query("SELECT name FROM pg_prepared_statements")
        finally:
            await client.close()

    words, names = asyncio.run(run())
    assert words.startswith("the prisma agent refused 'prepared' (unsupported): Prisma 7 names no statement"), words
    assert names == []


def test_prisma_ends_its_connection_after_its_own_failed_statement_and_keeps_it_after_the_harnesss(
    measure: Measure,
) -> None:
    # pg's pool (under Prisma) drops a connection whose statement failed (release(err)): an application's
    # next query opens a new one. The harness's own statements run beside Prisma's, on the connection held.
    direct = measure.backend.postgres(measure.pg(TEST_PG[0])).as_user(APP_ROLE)
    pid = "SELECT pg_backend_pid()"

    async def run() -> tuple[list[object], str]:
        client = await connect(Driver("prisma"), "A", direct, (("statementNameGenerator", "hash"),))
        try:
            pids = [(await client.query(pid))[0][0]]
            with pytest.raises(ServerError):
                await client.query("SELECT 1/0")
            pids.append((await client.query(pid))[0][0])
            with pytest.raises(ServerError) as caught:
                await client.prepared("SELECT 1/0")
            pids.append((await client.prepared(pid))[0][0])
            return pids, str(caught.value)
        finally:
            await client.close()

    (first, after_harness, after_prisma), said = asyncio.run(run())
    assert first == after_harness != after_prisma
    assert said == "22012: division by zero (PrismaClientKnownRequestError)", said


def test_discovery_asks_an_agent_without_a_prepared_path_for_none(measure: Measure) -> None:
    from leakcheck.discover.driver_api import abilities

    # Prisma at its defaults answers prepared `unsupported`: discovery then draws no protocol prepare
    # (it stopped at once before: "the harness failed on no ops: NotApplicable").
    direct = measure.backend.postgres(measure.pg(TEST_PG[0])).as_user(APP_ROLE)
    assert asyncio.run(abilities(Driver("prisma"), direct)).prepared is False
    assert asyncio.run(abilities(Driver("prisma"), direct, (("statementNameGenerator", "hash"),))).prepared is True


def test_postgres_js_logs_in_after_its_roles_password_changed_and_never_with_a_wrong_one(measure: Measure) -> None:
    """The agent keeps SCRAM's SaltedPassword per (password, salt, rounds): a new password, or the same one with a
    new salt, is derived anew, and a wrong password after a right one is still refused by the server."""
    admin = measure.backend.postgres(measure.pg(TEST_PG[0]))
    role = "leakcheck_scram_kept"

    def password(secret: str) -> None:
        with psycopg.connect(admin.conninfo(), autocommit=True) as session:
            session.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
            session.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role),
                                                                                sql.Literal(secret)))

    async def login(secret: str) -> str:
        where = replace(admin, user=role, credentials=((role, secret),))
        try:
            client = await connect(Driver("postgres-js"), "A", where)
        except ServerError as exc:
            return exc.sqlstate
        try:
            return str((await client.query("SELECT current_user"))[0][0])
        finally:
            await client.close()

    async def run() -> list[str]:
        password("first-secret")
        said = [await login("first-secret"), await login("first-secret"), await login("wrong-secret")]
        password("second-secret")
        said += [await login("first-secret"), await login("second-secret")]
        password("second-secret")  # the same password with a new salt
        return [*said, await login("second-secret")]

    try:
        assert asyncio.run(run()) == [role, role, "28P01", "28P01", role, role]
    finally:
        with psycopg.connect(admin.conninfo(), autocommit=True) as session:
            session.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
