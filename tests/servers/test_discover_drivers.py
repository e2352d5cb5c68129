"""Discovery with any driver on real servers: an agent's own statement names collide through
PgBouncer 1.18, the controls find nothing, and the driver-level ops (free, the transaction API) run
through the driver's API with their proofs.

Smoke runs with a fixed seed and small budgets, as tests/servers/test_discover.py.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakcheck.config.config import Config
from leakcheck.discover import command, lab
from leakcheck.discover.differential import Differential, run_on
from leakcheck.discover.engine import discover
from leakcheck.discover.findings import Search
from leakcheck.discover.ops import Abilities, Kind, Op, Who, universe
from leakcheck.discover.options import Options
from leakcheck.discover.trace import Trace
from leakcheck.drivers.agents import client as agents
from leakcheck.drivers.agents.catalogue import shipped
from leakcheck.drivers.agents.install import installed
from leakcheck.drivers.agents.team import team_driver
from leakcheck.drivers.clients import connect, driver_version
from leakcheck.model.target import Driver, Route, Setting, Target
from leakcheck.model.verdicts import Verdict
from leakcheck.probes.witness import open_witness
from leakcheck.provision.native import NativeBackend
from leakcheck.run.matrix import driver_cells
from tests.support.discover_lab import discover_lab

pytestmark = pytest.mark.servers

NODE = Driver("node-postgres")
A, B = Who.A, Who.B


@pytest.fixture(autouse=True)
def _stop_agents() -> Iterator[None]:
    yield
    agents.stop_all()


def _lab(native: NativeBackend, route: Route, bouncer: str = "1.18") -> lab.Lab:
    return discover_lab(native, route, bouncer)


def _collisions(found: object) -> list[str]:
    """Every error 42P05 of a call through the driver's prepared path (a prepared SELECT or INSERT) under
    node-postgres' own names among the findings and their others."""
    return [d.subject for f in found.findings for c in (f, *f.also) for d in c.comparison.diffs
            if d.key in ("result:protocol", "result:write") and d.subject.startswith("error 42P05")
            and '"stmt_' in d.subject]


def test_node_postgres_statements_of_two_clients_collide_by_name_through_pgbouncer_1_18(native: NativeBackend) -> None:
    with Differential(_lab(native, Route.TRANSACTION), NODE) as measure:
        comparison = measure((Op(A, Kind.PROTOCOL, "p1"), Op(B, Kind.PROTOCOL, "p2")))
    got = {(d.who, d.key): d for d in comparison.diffs}
    assert got[(B, "result:protocol")].subject.startswith('error 42P05: prepared statement "stmt_1" already exists')
    assert got[(B, "result:protocol")].reference == "'lc_B_p2'"


def test_a_short_node_postgres_discovery_finds_the_protocol_prepared_collision(native: NativeBackend) -> None:
    with Differential(_lab(native, Route.TRANSACTION), NODE) as measure:
        ops = universe(measure.abilities())
        # 10 s finds it on an idle machine (`leakcheck discover --budget=10s --seed=1`); 30 s leaves room
        # for a machine other test runs share (the search is timed, its rounds end with the budget)
        found = discover(measure, Search(seed=1, budget=30.0, max_examples=300, max_ops=6, ops=ops))
    assert _collisions(found), f"no stmt_N collision among {len(found.findings)} finding(s): {found.stopped}"


@pytest.mark.parametrize("route", [Route.DIRECT, Route.SESSION])
def test_the_controls_find_nothing_with_node_postgres(native: NativeBackend, route: Route) -> None:
    with Differential(_lab(native, route), NODE) as measure:
        found = discover(measure, Search(seed=1, budget=20.0, max_examples=40, max_ops=8,
                                         ops=universe(measure.abilities())))
    assert found.findings == []
    assert found.stopped.startswith("round 1 found nothing new in ")  # the distinct ones of 40 draws


@pytest.mark.parametrize(("driver", "can"), [(NODE, Abilities(bound=False)),
                                             (Driver("ruby-pg"), Abilities(bound=False, free=True, bind=True)),
                                             (Driver("pdo"), Abilities(bound=False, free=True)),
                                             (Driver.PSYCOPG, Abilities(bind=True))], ids=str)
def test_whether_a_driver_can_free_a_statement_or_bind_a_name_is_asked_of_the_driver(
        native: NativeBackend, driver: Driver, can: Abilities) -> None:
    with Differential(_lab(native, Route.DIRECT), driver) as measure:
        assert measure.abilities() == can


def test_a_statement_the_driver_freed_is_gone_from_its_session(native: NativeBackend) -> None:
    ops = (Op(A, Kind.PROTOCOL, "p1"), Op(A, Kind.OBSERVE), Op(A, Kind.FREE), Op(A, Kind.OBSERVE))
    trace = asyncio.run(_trace(native, Driver("ruby-pg"), ops))
    seen = [dict(e.fields)["prepared"] for e in trace.events if e.op == Op(A, Kind.OBSERVE)]
    # (ruby-pg's agent sends arrays in their text form, '{...}')
    assert "a1=" in str(seen[0]) and "_A_p1" in str(seen[0]) and seen[1] == []
    assert all(e.failure is None for e in trace.events)


def test_through_pgbouncer_1_24_ruby_pgs_free_by_name_misses_the_statement_pgbouncer_renamed(
        native: NativeBackend) -> None:
    # ruby-pg frees with SQL DEALLOCATE a1; PgBouncer 1.24 prepared it as PGBOUNCER_n (a driver-made difference)
    ops = (Op(A, Kind.PROTOCOL, "p1"), Op(A, Kind.FREE), Op(B, Kind.OBSERVE))
    with Differential(_lab(native, Route.TRANSACTION, "1.24"), Driver("ruby-pg")) as measure:
        comparison = measure(ops)
    got = {(d.who, d.key): d for d in comparison.diffs}
    assert got[(A, "result:free")].subject.startswith('error 26000') and '"a1"' in got[(A, "result:free")].subject
    # B still sees A's statement (PgBouncer's PGBOUNCER_n, normalized to <protocol>); directly it is gone
    assert got[(B, "prepared")].subject == "['<protocol>=lc_A_p1']" and got[(B, "prepared")].reference == "[]"


@pytest.mark.parametrize("driver", [Driver.PSYCOPG, Driver.ASYNCPG, NODE], ids=str)
def test_a_transaction_through_the_drivers_api_rolls_back_and_commits(native: NativeBackend, driver: Driver) -> None:
    ops = (Op(A, Kind.BEGIN), Op(A, Kind.CREATE_TEMP, "t1"), Op(A, Kind.OBSERVE), Op(A, Kind.ROLLBACK),
           Op(A, Kind.BEGIN), Op(A, Kind.CREATE_TEMP, "t2"), Op(A, Kind.COMMIT))
    trace = asyncio.run(_trace(native, driver, ops))
    inside = next(e for e in trace.events if e.op == Op(A, Kind.OBSERVE))
    end = next(e for e in trace.events if e.op is None and e.who is A)
    assert dict(inside.fields)["temp"] == ["t1"] and dict(end.fields)["temp"] == ["t2"]
    assert all(e.failure is None for e in trace.events)


async def _trace(native: NativeBackend, driver: Driver, ops: tuple[Op, ...],
                 settings: tuple[Setting, ...] = ()) -> Trace:
    """One sequence on two direct sessions (the reference route), its events as recorded."""
    where = _lab(native, Route.DIRECT)
    witness = open_witness(where.superuser())
    try:
        return await run_on(where, driver, where.direct(), Route.DIRECT, ops, witness, settings)
    finally:
        witness.close()
        await asyncio.to_thread(agents.stop_all)


@pytest.fixture(scope="module")
def team_agent() -> Iterator[Path]:
    """A team's own agent: the shipped node-postgres agent under another name, with a #! line, in a
    folder of its own that leakcheck-agent can read (it runs as that user when we are root). One
    per module: a process registers one path per agent name."""
    node = shipped(NODE.value)
    assert node is not None
    made = installed(node.spec)
    folder = Path(tempfile.mkdtemp(prefix="leakcheck-myorm-"))
    try:
        shutil.copytree(made.folder / "node_modules", folder / "node_modules")
        source = (made.folder / "agent.js").read_text().replace("driver: 'node-postgres'", "driver: 'myorm'")
        # its hello lists the one setting the copied agent takes (as the catalogue lists node-postgres')
        source = source.replace("ops: ['cancel_key'],", "ops: ['cancel_key'], settings: { options: '' },")
        assert "driver: 'myorm'" in source and "settings: { options: '' }" in source
        agent = folder / "myorm-agent"
        agent.write_text("#!/usr/bin/env node\n" + source)
        agent.chmod(0o755)
        for path in (folder, *folder.rglob("*")):
            path.chmod(path.stat().st_mode | 0o055 if path.is_dir() else path.stat().st_mode | 0o044)
        yield agent
    finally:
        shutil.rmtree(folder)


def test_a_team_agent_drives_discovery_and_the_probes_under_its_own_id(native: NativeBackend, team_agent: Path) -> None:
    driver = team_driver(f"cmd:{team_agent}", "--driver")
    assert driver.value == "cmd-myorm" and driver_version(driver) == driver_version(NODE)
    where = _lab(native, Route.TRANSACTION)
    with Differential(where, driver) as measure:
        comparison = measure((Op(A, Kind.PROTOCOL, "p1"), Op(B, Kind.PROTOCOL, "p2")))
    assert any(d.key == "result:protocol" and d.subject.startswith("error 42P05") for d in comparison.diffs)
    # the matrix's probe, as --drivers=cmd:PATH runs it: what the shipped agent it copies measures
    mine, theirs = (where.probe_verdicts({"protocol_prepare"}, d)["protocol_prepare"] for d in (driver, NODE))
    assert mine is not Verdict.ERROR and mine == theirs


def test_a_team_agents_driver_setting_reaches_its_driver_and_names_its_cell(native: NativeBackend,
                                                                            team_agent: Path) -> None:
    config = Config.from_strings({"leakcheck_drivers": f"cmd:{team_agent}",
                                  "leakcheck_driver_set": 'cmd-myorm:options=-c work_mem=1234kB,""'})
    cells = driver_cells(config.drivers, config.driver_axes, driver_version)
    driver, version, settings = cells[0]
    assert [c[2] for c in cells] == [(("options", "-c work_mem=1234kB"),), ()]
    where = _lab(native, Route.DIRECT)

    async def work_mem() -> str:
        client = await connect(driver, "A", where.direct(), settings)
        try:
            return str((await client.query("SELECT current_setting('work_mem')"))[0][0])
        finally:
            await client.close()

    assert asyncio.run(work_mem()) == "1234kB"  # the connect op carried it to node-postgres' startup packet
    target = Target(where.where.pg, None, Route.DIRECT, driver, version, settings)
    assert target.client == f"cmd-myorm{version}[options=-c work_mem=1234kB]"
    # discovery with that setting (`discover --driver-set`): its clients are connected with it too
    trace = asyncio.run(_trace(native, driver, (Op(A, Kind.OBSERVE),), settings))
    assert all(e.failure is None for e in trace.events)
    assert "1234kB" in str([e.fields for e in trace.events if e.op == Op(A, Kind.OBSERVE)])


def test_pgjdbcs_startup_parameters_are_ignored_by_the_pgbouncer_discovery_starts(native: NativeBackend) -> None:
    # pgjdbc sends extra_float_digits at login, which PgBouncer refuses unless told to ignore it (the matrix does)
    with Differential(_lab(native, Route.TRANSACTION, "1.24"), Driver("pgjdbc")) as measure:
        comparison = measure((Op(A, Kind.WRITE), Op(B, Kind.OBSERVE)))
        # what PgBouncer reports of DateStyle is the startup value pgjdbc sent ('ISO'), where PostgreSQL reports
        # its own spelling ('ISO, MDY'): a difference before any op, the connections' start
        assert {d.key for d in comparison.diffs} == {"reported:DateStyle"}
        start = measure.learn_start()
        assert ("reported:DateStyle", "'ISO'", "'ISO, MDY'") in {(d.key, d.subject, d.reference) for d in start}
        # from then on it is left out of every comparison, while a client still shows those values
        assert [d for d in measure((Op(A, Kind.WRITE), Op(B, Kind.OBSERVE))).diffs if d.key == "reported:DateStyle"] \
            == []


def test_a_pgjdbc_discovery_through_pgbouncer_says_the_start_difference_once_and_searches(
        capsys: pytest.CaptureFixture[str]) -> None:
    # it stopped at once with exit 3 ("the route and the reference differ before any op") before
    opts = Options(cell=(("leakcheck_pg", "16"), ("leakcheck_bouncer", "1.24")), driver=Driver("pgjdbc"),
                   budget=3.0, seed=1, max_examples=20)
    code = command.run(opts)
    captured = capsys.readouterr()
    assert code in (0, 1), captured.err
    lines = captured.out.splitlines()
    said = [line for line in lines if line.startswith("discover: before any op, ")]
    assert [line for line in said if "a client's reported:DateStyle: 'ISO' through the route, 'ISO, MDY' direct"
            in line], said
    summary = next(line for line in lines if line.startswith("discover: PostgreSQL 16."))
    searched = re.search(r"\((\d+) sequences in ", summary)
    assert searched is not None and int(searched.group(1)) > 0, summary


def test_a_call_the_driver_refuses_to_go_on_after_is_its_clients_closed_connection(native: NativeBackend) -> None:
    # pgjdbc closes its connection when DateStyle does not begin with ISO (the catalogue's refusal): on both routes
    with Differential(_lab(native, Route.DIRECT), Driver("pgjdbc")) as measure:
        assert measure((Op(A, Kind.SET, "DateStyle"), Op(A, Kind.OBSERVE), Op(B, Kind.OBSERVE))).diffs == ()
