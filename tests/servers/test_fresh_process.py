"""Each client is its own application: the same driver state as a fresh process, proven against real ones."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap

import asyncpg
import pytest

from leakcheck.drivers.clients import AsyncpgClient, PsycopgClient, connect
from leakcheck.model.pool_settings import PoolSettings
from leakcheck.model.target import Driver
from leakcheck.provision.postgres.fixtures import APP_ROLE
from tests.support.servers import DRIVERS, TEST_BOUNCER, TEST_PG, Measure

pytestmark = pytest.mark.servers

#: One application process: connect, run one query the driver's default way, report, wait, exit.
APP = textwrap.dedent("""
    import asyncio, sys, asyncpg
    async def main(port, text):
        conn = await asyncpg.connect(host="127.0.0.1", port=int(port), user="leakcheck_app", database="leakcheck")
        try:
            print("ok", await conn.fetchval(text), flush=True)
        except asyncpg.PostgresError as exc:
            print("error", exc.sqlstate, exc, flush=True)
        sys.stdin.readline()  # keep the connection (and its statements) until told to go
        await conn.close()
    asyncio.run(main(*sys.argv[1:]))
""")


@pytest.mark.skipif("1.18" not in TEST_BOUNCER, reason="PgBouncer 1.18 not in LEAKCHECK_TEST_BOUNCER")
def test_two_real_asyncpg_processes_collide_as_the_harness_clients_do(measure: Measure) -> None:
    pg, bouncer = measure.pg(TEST_PG[0]), measure.bouncer("1.18")
    with measure.backend.pooler(pg, bouncer, PoolSettings()) as endpoint:
        password = endpoint.as_user(APP_ROLE).password
        first = _app(endpoint.port, password, "SELECT 'first app'::text")
        try:
            assert first.stdout is not None and first.stdout.readline().startswith("ok first app")
            second = _app(endpoint.port, password, "SELECT 'second app'::text")
            out, _ = second.communicate("\n", timeout=30)
        finally:
            first.communicate("\n", timeout=30)
    assert out.startswith('error 42P05 prepared statement "__asyncpg_stmt_1__" already exists'), out
    harness = measure("protocol_prepare", TEST_PG[0], "1.18", Driver.ASYNCPG)
    assert '"__asyncpg_stmt_1__" already exists' in harness.evidence, harness.evidence


def _app(port: int, password: str, text: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", APP, str(port), text], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PGPASSWORD": password})


def test_two_asyncpg_clients_in_one_process_name_their_statements_like_two_fresh_processes(
    measure: Measure,
) -> None:
    direct = measure.backend.postgres(measure.pg(TEST_PG[0])).as_user(APP_ROLE)

    async def first_names() -> list[str]:
        names = []
        for label in ("A", "B"):
            client = await connect(Driver.ASYNCPG, label, direct)
            assert isinstance(client, AsyncpgClient)
            await client.prepared("SELECT 1")
            names += [r[0] for r in await client.query("SELECT name FROM pg_prepared_statements")]
            await client.close()
        return names

    assert asyncio.run(first_names()) == ["__asyncpg_stmt_1__", "__asyncpg_stmt_1__"]
    assert asyncpg.__version__  # the real driver, not a stand-in


@pytest.mark.parametrize("driver", DRIVERS, ids=str)
def test_the_harness_own_statements_leave_no_prepared_statement_behind(measure: Measure, driver: Driver) -> None:
    direct = measure.backend.postgres(measure.pg(TEST_PG[0])).as_user(APP_ROLE)

    async def left() -> list[tuple[object, ...]]:
        client = await connect(driver, "A", direct)
        assert isinstance(client, AsyncpgClient | PsycopgClient)
        for _ in range(7):  # past psycopg's prepare_threshold of 5
            await client.query("SELECT 1")
            await client.execute("SET work_mem = '2MB'")
        rows = await client.query("SELECT name FROM pg_prepared_statements")
        await client.close()
        return rows

    assert asyncio.run(left()) == []


@pytest.mark.parametrize("driver", DRIVERS, ids=str)
def test_the_harness_own_statement_reaches_the_server_as_written(measure: Measure, driver: Driver) -> None:
    """asyncpg's ran padded past its max_cacheable_statement_size: 15 KB a statement for the pooler to relay and
    every witness look to copy and search. Now it runs unnamed through asyncpg's uncached path, as written."""
    direct = measure.backend.postgres(measure.pg(TEST_PG[0])).as_user(APP_ROLE)
    text = "SELECT 'the harness, as written'::text"

    async def kept() -> tuple[list[tuple[object, ...]], list[tuple[object, ...]], list[tuple[object, ...]]]:
        client, other = await connect(driver, "A", direct), await connect(Driver.PSYCOPG, "W", direct)
        assert isinstance(client, AsyncpgClient | PsycopgClient)
        answer = await client.query(text)
        pid = (await client.query("SELECT pg_backend_pid()"))[0][0]
        await client.query(text)  # its latest statement again, for the other session to read
        seen = await other.query(f"SELECT query FROM pg_stat_activity WHERE pid = {int(str(pid))}")
        prepared = await client.query("SELECT name FROM pg_prepared_statements")
        await client.close()
        await other.close()
        return answer, seen, prepared

    assert asyncio.run(kept()) == ([("the harness, as written",)], [(text,)], [])
