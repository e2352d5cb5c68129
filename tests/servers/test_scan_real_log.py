"""`leakcheck scan` on what a real PostgreSQL wrote down: its stderr log with log_statement=all and its
pg_stat_statements export, after psycopg and the shipped agents (pgjdbc, PDO) ran an application's
statements against it; the verdicts from a small matrix run on PgBouncer 1.18, 1.24 and 1.26."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from leakcheck.drivers.agents import client as agents
from leakcheck.drivers.clients import connect
from leakcheck.drivers.interface import Client
from leakcheck.model.target import Driver
from leakcheck.provision.postgres.fixtures import APP_ROLE
from leakcheck.provision.postgres.server import PgServer
from tests.support.servers import TEST_PG

pytestmark = pytest.mark.servers

#: The probes the small matrix measures (the others a class maps to show as not measured).
PROBES = "statement_timeout,set_local,advisory_lock,advisory_xact_lock,protocol_prepare,listen_notify,temp_table"
MATRIX = [f"--pg={TEST_PG[0]}", "--bouncer=1.18,1.24,1.26", "--drivers=psycopg", "--controls=no", "--jobs=2"]


def leakcheck(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leakcheck.cli.main", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=400, check=False)


@dataclass
class Written:
    """What the server wrote down: the whole log, the log of the clean part alone, the exports."""

    log: Path
    clean: Path
    csv: Path
    json: Path


def _superuser(server: PgServer) -> psycopg.Connection[object]:
    return psycopg.connect(server.endpoint().conninfo(), autocommit=True, connect_timeout=10)


async def _application(server: PgServer) -> None:
    """An application's session: settings, locks, LISTEN, a temp table, prepared statements, through
    psycopg and two shipped agents (pgjdbc names its statements S_n, PDO pdo_stmt_n)."""
    where = server.endpoint().as_user(APP_ROLE)
    clients: list[Client] = []
    try:
        app = await connect(Driver.PSYCOPG, "A", where)
        clients.append(app)
        await app.execute("SET statement_timeout = '5s'")
        await app.execute("BEGIN")
        await app.execute("SET LOCAL search_path = public")
        await app.execute("SELECT pg_advisory_xact_lock(7)")
        await app.execute("COMMIT")
        await app.query("SELECT pg_advisory_lock(42)")
        await app.query("SELECT pg_advisory_unlock(42)")
        await app.execute("LISTEN jobs")
        await app.execute("CREATE TEMP TABLE scratch (a int)")
        await app.prepared("SELECT 1 AS psycopg_prepared")
        for driver in (Driver("pgjdbc"), Driver("pdo")):
            other = await connect(driver, "B", where)
            clients.append(other)
            await other.prepared(f"SELECT '{driver}' AS prepared_by")
            await other.execute("SET application_name = 'worker'")
    finally:
        for client in clients:
            await client.close()
        agents.stop_all()


async def _clean(server: PgServer) -> None:
    """Work with nothing session-dependent: transactions of plain statements."""
    client = await connect(Driver.PSYCOPG, "A", server.endpoint().as_user(APP_ROLE))
    try:
        await client.execute("BEGIN")
        await client.query("SELECT count(*) FROM pg_class")
        await client.execute("COMMIT")
        await client.query("SELECT now()")
    finally:
        await client.close()


@pytest.fixture(scope="module")
def written(postgres: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    folder = tmp_path_factory.mktemp("scan-real")
    with _superuser(postgres) as conn:
        conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        conn.execute("ALTER SYSTEM SET log_statement = 'all'")
    postgres.launch()  # again, on the same data: the library loads only at start
    with _superuser(postgres) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        assert conn.execute("SHOW log_statement").fetchone() == ("all",)
    asyncio.run(_application(postgres))
    before = len(postgres.log_text())
    asyncio.run(_clean(postgres))
    time.sleep(0.2)  # the server's stderr is written by its backends as they log; give the last lines a moment
    text = postgres.log_text()
    paths = Written(folder / "postgresql.log", folder / "clean.log", folder / "pgss.csv", folder / "pgss.json")
    paths.log.write_text(text)
    paths.clean.write_text(text[before:])
    with _superuser(postgres) as conn, conn.cursor() as cur:
        query = "SELECT queryid, calls, query FROM pg_stat_statements ORDER BY queryid"
        with cur.copy(f"COPY ({query}) TO STDOUT WITH (FORMAT csv, HEADER)") as copy:
            paths.csv.write_bytes(b"".join(bytes(chunk) for chunk in copy))
        with cur.copy(f"COPY (SELECT row_to_json(s) FROM ({query}) s) TO STDOUT") as copy:
            paths.json.write_bytes(b"".join(bytes(chunk) for chunk in copy))
    yield paths


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The verdicts: a small matrix on PgBouncer 1.18, 1.24 and 1.26, written by `leakcheck run --results`."""
    folder = tmp_path_factory.mktemp("scan-matrix")
    ran = leakcheck("run", *MATRIX, f"--probes={PROBES}", "--results=results.json", cwd=folder)
    assert ran.returncode in (0, 1), ran.stdout + ran.stderr
    return folder / "results.json"


def _classes(report: Path) -> dict[str, dict[str, object]]:
    return {c["key"]: c for c in json.loads(report.read_text())["classes"]}


def _verdicts(said: dict[str, object], probe: str) -> dict[str, str]:
    probes = {p["probe"]: p for p in said["probes"]}  # type: ignore[attr-defined]
    return {o["cell"].split("/")[1]: o["verdict"] for o in probes[probe]["outcomes"]}


def test_the_real_log_lists_each_session_dependent_statement_with_its_probes_measured_on_three_pgbouncers(
        written: Written, results: Path, tmp_path: Path) -> None:
    report = tmp_path / "scan.json"
    ran = leakcheck("scan", f"--results={results}", str(written.log), f"--report-json={report}",
                    f"--junitxml={tmp_path / 'scan.xml'}", cwd=tmp_path)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    classes = _classes(report)
    assert {"set:statement_timeout", "set_local:search_path", "advisory_xact_lock:pg_advisory_xact_lock",
            "advisory_lock:pg_advisory_lock", "advisory_unlock:pg_advisory_unlock", "listen", "temp_table",
            "set:application_name", "protocol_prepare:psycopg", "protocol_prepare:pgjdbc",
            "protocol_prepare:pdo"} <= set(classes), sorted(classes)
    timeout = classes["set:statement_timeout"]
    assert timeout["status"] == "affected" and timeout["statements"][0]["text"] == "SET statement_timeout = $1"  # type: ignore[index]
    assert str(written.log) in timeout["statements"][0]["sources"][0]  # type: ignore[index]
    bouncers = {"pgbouncer1.18.0", "pgbouncer1.24.1", "pgbouncer1.26.1"}
    assert set(_verdicts(timeout, "statement_timeout")) == bouncers
    assert set(_verdicts(timeout, "statement_timeout").values()) == {"leaks"}
    assert set(_verdicts(classes["set_local:search_path"], "set_local").values()) == {"isolated"}
    assert classes["set_local:search_path"]["status"] == "ok"
    assert set(_verdicts(classes["advisory_lock:pg_advisory_lock"], "advisory_lock").values()) == {"leaks"}
    prepared = _verdicts(classes["protocol_prepare:pgjdbc"], "protocol_prepare")
    assert prepared["pgbouncer1.18.0"] == "breaks" and prepared["pgbouncer1.26.1"] == "isolated"
    assert classes["set:application_name"]["status"] == "unmeasured"  # its probes were not in the small matrix
    assert "(3) pg" in ran.stdout
    assert "hint: the cells measure psycopg, not pdo, pgjdbc: give --drivers=pdo,pgjdbc" in ran.stdout


def test_the_real_pg_stat_statements_exports_give_the_same_classes(written: Written, results: Path,
                                                                   tmp_path: Path) -> None:
    for export in (written.csv, written.json):
        report = tmp_path / f"{export.name}.scan.json"
        ran = leakcheck("scan", f"--results={results}", str(export), f"--report-json={report}", cwd=tmp_path)
        assert ran.returncode == 1, ran.stdout + ran.stderr
        classes = _classes(report)
        assert {"set:statement_timeout", "advisory_lock:pg_advisory_lock", "listen", "temp_table"} <= set(classes)
        assert "queryid" in classes["set:statement_timeout"]["statements"][0]["sources"][0]  # type: ignore[index]
        assert set(_verdicts(classes["set:statement_timeout"], "statement_timeout").values()) == {"leaks"}


def test_the_part_of_the_real_log_with_nothing_session_dependent_passes(written: Written, results: Path,
                                                                        tmp_path: Path) -> None:
    ran = leakcheck("scan", f"--results={results}", str(written.clean), cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "0 of 0 classes affected" in ran.stdout


def test_a_scan_without_results_measures_just_the_probes_its_classes_map_to(tmp_path: Path) -> None:
    log = tmp_path / "one.log"
    log.write_text("2026-12-01 10:00:00.001 UTC [7] LOG:  statement: SET statement_timeout = '5s'\n")
    ran = leakcheck("scan", f"--pg={TEST_PG[0]}", "--bouncer=1.26", "--drivers=psycopg", "--controls=no",
                    "--jobs=2", str(log), cwd=tmp_path)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "verdicts: measured by this scan, 1 cell:" in ran.stdout
    assert "statement_timeout  LEAKS" in ran.stdout
    assert "measuring 1 probe(s) the workload maps to: statement_timeout" in ran.stderr
