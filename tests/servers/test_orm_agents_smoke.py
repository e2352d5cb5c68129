"""The ORM agents (django, sqlalchemy, activerecord), installed from their spec into the test cache and
driven through leakcheck's own client against a real PostgreSQL: every op of the protocol through the ORM,
its prepared path with the settings teams flip, and a cancel."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from leakcheck.drivers.agents import client as agents
from leakcheck.drivers.agents import process
from leakcheck.drivers.agents.catalogue import shipped
from leakcheck.drivers.agents.client import AgentClient
from leakcheck.drivers.agents.install import installed, missing_apt
from leakcheck.drivers.agents.process import AgentRefused
from leakcheck.drivers.clients import connect
from leakcheck.drivers.interface import ServerError
from leakcheck.model.errors import NotApplicable
from leakcheck.model.target import Driver, Setting
from leakcheck.model.verdicts import Fact, Verdict
from leakcheck.provision.base import Endpoint
from leakcheck.provision.host import tagged
from leakcheck.provision.host.proc_sockets import parent_of
from leakcheck.provision.postgres.fixtures import APP_ROLE
from tests.support.agents import running
from tests.support.servers import TEST_PG, Measure

pytestmark = pytest.mark.servers

ORMS = ("django", "sqlalchemy", "activerecord")
#: settings under which each ORM's prepared path names a statement, and the names it gives
PREPARING: dict[str, tuple[Setting, ...]] = {"django": (("server_side_binding", "true"), ("prepare_threshold", "5"))}
NAMES = {"django": r"_pg3_\d+", "sqlalchemy": r"_pg3_\d+", "activerecord": r"a\d+"}
#: settings under which it never does
NEVER: dict[str, tuple[Setting, ...]] = {"django": (), "sqlalchemy": (("prepare_threshold", "None"),),
                                         "activerecord": (("prepared_statements", "false"),)}
ERRORS = {"django": "psycopg.errors.DivisionByZero", "sqlalchemy": "psycopg.errors.DivisionByZero",
          "activerecord": "ActiveRecord::StatementInvalid"}
NAMED = "SELECT name FROM pg_prepared_statements ORDER BY name"


@pytest.fixture(params=ORMS)
def orm(request: pytest.FixtureRequest) -> Iterator[Driver]:
    found = shipped(request.param)
    assert found is not None
    if absent := missing_apt(found.spec):
        pytest.skip(f"{request.param} agent: {', '.join(absent)} missing "
                    f"(`leakcheck prepare --drivers={request.param}` installs them as root)")
    yield Driver(request.param)
    agents.stop_all()


@pytest.fixture
def direct(measure: Measure) -> Endpoint:
    return measure.backend.postgres(measure.pg(TEST_PG[0])).as_user(APP_ROLE)


async def _client(orm: Driver, direct: Endpoint, settings: tuple[Setting, ...] = ()) -> AgentClient:
    client = await connect(orm, "A", direct, settings)
    assert isinstance(client, AgentClient)
    return client


def test_an_orm_agent_runs_every_op_through_its_orm(orm: Driver, direct: Endpoint) -> None:
    async def run() -> None:
        client = await _client(orm, direct, PREPARING.get(orm.value, ()))
        try:
            rows = await client.query("SELECT (2^40)::int8, true, 'x'::text, NULL, ARRAY['a','b'], 1.5::float8, "
                                      "2.50::numeric, 'NaN'::float8")
            assert rows == [(2**40, True, "x", None, ["a", "b"], 1.5, "2.50", "NaN")]
            await client.execute("CREATE TEMP TABLE t (x int); INSERT INTO t VALUES (7); SET application_name = 'x'")
            assert await client.query("SELECT x, current_setting('application_name') FROM t") == [(7, "x")]
            assert await client.query(NAMED) == [], "the harness's query named a statement"
            for _ in range(2):
                assert await client.prepared("SELECT x + 1 FROM t") == [(8,)]
            names = [name for (name,) in await client.query(NAMED)]
            assert len(names) == 1 and re.fullmatch(NAMES[orm.value], names[0]), names
            assert await client.query(f"SELECT bool_and({client.statement_names}) FROM pg_prepared_statements") \
                == [(True,)]
            with pytest.raises(ServerError) as caught:
                await client.query("SELECT 1/0")
            assert caught.value.sqlstate == "22012" and ERRORS[orm.value] in str(caught.value)
            assert client.reported("server_version") and client.reported("client_encoding") == "UTF8"

            await client.transaction("begin")
            await client.execute("INSERT INTO t VALUES (8)")
            await client.transaction("rollback")
            await client.transaction("begin")
            await client.execute("INSERT INTO t VALUES (9)")
            await client.transaction("commit")
            assert await client.query("SELECT array_agg(x ORDER BY x) FROM t") == [([7, 9],)]
            with pytest.raises(NotApplicable, match="cannot free a statement"):
                await client.free("SELECT x + 1 FROM t")

            await client.execute("LISTEN leakcheck_orm")
            with psycopg.connect(direct.conninfo(), autocommit=True) as other:
                other.execute("SELECT pg_notify('leakcheck_orm', 'hi')")
            for _ in range(50):  # it arrives on the agent's connection asynchronously
                if client.notifications:
                    break
                await client.query("SELECT 1")
            assert [(n.channel, n.payload) for n in client.notifications] == [("leakcheck_orm", "hi")]
        finally:
            await client.close()

    asyncio.run(run())


def test_with_the_settings_that_turn_it_off_an_orms_prepared_path_names_nothing(orm: Driver, direct: Endpoint) -> None:
    async def run() -> None:
        client = await _client(orm, direct, NEVER[orm.value])
        try:
            if orm.value == "django":  # Django's default: a client-side binding cursor, no prepare_threshold
                with pytest.raises(NotApplicable, match="Django never prepares a statement"):
                    await client.prepared("SELECT 41 + 1")
            else:
                assert await client.prepared("SELECT 41 + 1") == [(42,)]
            assert await client.query(NAMED) == []
        finally:
            await client.close()

    asyncio.run(run())


def test_an_orm_agent_refuses_a_setting_its_orm_does_not_have(orm: Driver, direct: Endpoint) -> None:
    with pytest.raises(AgentRefused, match="usage"):
        asyncio.run(_client(orm, direct, (("no_such_setting", "1"),)))


def test_an_orm_agent_cancels_the_statement_its_connection_runs(orm: Driver, direct: Endpoint) -> None:
    async def run() -> None:
        client = await _client(orm, direct)
        try:
            sleeping = asyncio.ensure_future(client.query("SELECT pg_sleep(20)"))
            with psycopg.connect(direct.conninfo(), autocommit=True) as watcher:
                for _ in range(200):
                    if watcher.execute("SELECT 1 FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(20)' "
                                       "AND state = 'active'").fetchone():
                        break
                    await asyncio.sleep(0.05)
            assert await client.cancel() is True
            with pytest.raises(ServerError) as caught:
                await asyncio.wait_for(sleeping, 10)
            assert caught.value.sqlstate == "57014"
        finally:
            await client.close()

    asyncio.run(run())


@pytest.fixture
def activerecord() -> Iterator[Driver]:
    found = shipped("activerecord")
    assert found is not None
    if absent := missing_apt(found.spec):
        pytest.skip(f"activerecord agent: {', '.join(absent)} missing")
    yield Driver("activerecord")
    agents.stop_all()


def test_the_activerecord_agents_install_leaves_rubys_compiled_files_for_its_starts(activerecord: Driver) -> None:
    # bootsnap, as a Rails application boots: each agent start loads ActiveRecord compiled (8 lanes x A, B, C
    # and a restart after each loop stall boot it again); written by the install's own start
    found = shipped(activerecord.value)
    assert found is not None
    compiled = [f for f in (installed(found.spec).folder / "cache").rglob("*") if f.is_file()]
    assert len(compiled) > 100, compiled


def test_each_client_of_one_activerecord_agent_is_a_new_connection_set_up_with_its_own_settings(
        activerecord: Driver, direct: Endpoint) -> None:
    # the agent establishes its pool once for its settings, as an application at boot: each client is still a
    # new connection of it (a new backend, its session set up again), and other settings make another pool
    async def run() -> list[tuple[int, int, str, int]]:
        seen = []
        for settings in ((), (), (("prepared_statements", "false"),), ()):
            client = await _client(activerecord, direct, settings)
            try:
                await client.prepared("SELECT 1")
                [(backend, style, named)] = await client.query(
                    "SELECT pg_backend_pid(), current_setting('intervalstyle'), count(*) FROM pg_prepared_statements")
                await client.execute("SET intervalstyle = postgres")  # what the next client must not see
                seen.append((client.agent_pid, backend, style, named))
            finally:
                await client.close()
        return seen

    seen = asyncio.run(run())
    assert len({agent for agent, *_ in seen}) == 1, seen
    assert len({backend for _, backend, *_ in seen}) == 4, seen
    assert [(style, named) for *_, style, named in seen] == [("iso_8601", 1), ("iso_8601", 1), ("iso_8601", 0),
                                                            ("iso_8601", 1)]


def test_after_activerecords_loop_is_measured_its_call_is_ended_and_its_agent_serves_the_next_probe(
        activerecord: Driver, measure: Measure) -> None:
    # ActiveRecord 6.1 re-runs cached_plan_search_path's refused statement for ever through PgBouncer 1.24: the
    # witness ends the backends it runs on once the loop is measured, the call fails and returns, and A's agent
    # is given back to its slot (the next probe of the lane boots none), a fresh connection for its next client
    first = measure("cached_plan_search_path", "16", "1.24", activerecord)
    assert first.verdict is Verdict.BREAKS and Fact.STALLED in first.facts, first.evidence
    assert "a loop" in first.evidence, first.evidence

    def kept() -> list[int]:
        return [agent.pid for (driver, _, label, _), idle in agents._idle.items()
                if (driver, label) == ("activerecord", "A") for agent in idle if agent.alive]

    first_agent = kept()
    assert len(first_agent) == 1, agents._idle
    again = measure("cached_plan_search_path", "16", "1.24", activerecord)
    assert again.verdict is Verdict.BREAKS and Fact.STALLED in again.facts, again.evidence
    assert kept() == first_agent


def test_two_agents_of_an_orm_are_forks_of_one_preloader_of_the_run_each_its_own_application(
        orm: Driver, direct: Endpoint) -> None:
    # as Puma or Unicorn fork a booted Rails application's workers, and gunicorn --preload a Python
    # application's: the ORM is loaded once, in the run's preloader, and each agent is a fork of it with its
    # own session, tag and connections; the end of the run leaves none of them running
    async def run() -> list[tuple[int, int]]:
        clients: list[AgentClient] = []
        try:
            for label in "AB":  # held together: two agents
                client = await connect(orm, label, direct)
                assert isinstance(client, AgentClient)
                clients.append(client)
            return [(client.agent_pid, int(str((await client.query("SELECT pg_backend_pid()"))[0][0])))
                    for client in clients]
        finally:
            for client in clients:
                await client.close()

    seen = asyncio.run(run())
    [(agent_a, backend_a), (agent_b, backend_b)] = seen
    assert agent_a != agent_b and backend_a != backend_b, seen
    parents = {parent_of(Path(f"/proc/{pid}/stat").read_text()) for pid in (agent_a, agent_b)}
    assert parents == {p.proc.pid for p in process._preloaders.values() if p is not None}, parents
    [preloader] = parents
    assert all(os.getsid(pid) == pid for pid in (agent_a, agent_b))
    agents.stop_all()
    assert running([agent_a, agent_b, preloader]) == []
    assert [pid for pid, tag in tagged._tagged() if tag.startswith(tagged.run_tag() + "/")] == []
