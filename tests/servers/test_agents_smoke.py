"""The driver agents of pgjdbc (Debian's and Maven Central's), PDO, ruby-pg, pgx v4 and v5, sqlx and
tokio-postgres, and the ORMs Prisma and Hibernate (Spring Boot, HikariCP), each installed from its spec
into the test cache and spoken to as a real process."""

from __future__ import annotations

import json
import queue
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from leakcheck.drivers.agents.catalogue import CATALOGUE
from leakcheck.drivers.agents.install import installed as install
from leakcheck.drivers.agents.spec import AgentSpec
from leakcheck.drivers.agents.toolchains import find
from leakcheck.model.errors import ProvisionError
from leakcheck.provision.base import Endpoint
from leakcheck.provision.postgres.fixtures import SCRAM_ITERATIONS
from leakcheck.provision.postgres.server import PgServer

#: the agents built from their spec alone, and Prisma's and Hibernate's (the npm drivers are tested in
#: test_agents.py with their packages, the Python and Ruby ORMs in test_orm_agents_smoke.py)
SPECS = tuple(s.spec for s in CATALOGUE
              if (not s.spec.npm or s.spec.id == "prisma") and not s.spec.pip and s.spec.id != "activerecord")

pytestmark = pytest.mark.servers

#: bounds: one answer (a JVM's first connect included)
ANSWER_SECONDS = 30
#: the tool each language's agent needs on PATH (the compilers of a spec's `tools` are looked for by toolchains.py)
TOOLS = {"java": ("java", "javac"), "php": ("php",), "ruby": ("ruby",), "go": ("go",), "rust": (),
         "node": ("node", "npm")}
NAMES = {"pgjdbc": r"S_\d+", "pgjdbc-maven": r"S_\d+", "pdo": r"pdo_stmt_[0-9a-f]{8}", "ruby-pg": r"a1",
         "pgx": r"lrupsc_\d+_\d+", "pgx-v5": r"stmtcache_[0-9a-f]{48}", "sqlx": r"sqlx_s_1", "tokio-postgres": r"s\d+",
         "prisma": r"prisma_[0-9a-f]{16}", "hibernate": r"S_\d+"}
ERROR_CLASSES = {"pgjdbc": "org.postgresql.util.PSQLException", "pgjdbc-maven": "org.postgresql.util.PSQLException",
                 "pdo": "PDOException", "ruby-pg": "PG::DivisionByZero", "pgx": "*pgconn.PgError",
                 "pgx-v5": "*pgconn.PgError", "sqlx": "sqlx::postgres::PgDatabaseError",
                 "tokio-postgres": "tokio_postgres::error::DbError", "prisma": "DatabaseError",  # (pg's, under Prisma)
                 "hibernate": "org.springframework.dao.DataIntegrityViolationException"}
#: how the statement a cancel stopped fails: pgx v4 cancels by context and closes its connection
CANCELLED = {"pgjdbc": "57014", "pgjdbc-maven": "57014", "ruby-pg": "57014", "pgx": "08006", "pgx-v5": "57014",
             "tokio-postgres": "57014", "hibernate": "57014"}
#: whether a cancel of a running statement says `closed` (the peer ended the cancel connection: PostgreSQL does
#: once it signalled the backend): pgx v4's context cancel sends it from a goroutine, unwatched (the JVM agents'
#: word depends on when pgjdbc sees the statement: not checked here)
SAYS_CLOSED = {"ruby-pg": True, "pgx": False, "pgx-v5": True, "tokio-postgres": True}
#: settings for the checks: pgjdbc names its statement at the first execution, not the fifth (under Hibernate
#: at the second: HikariCP's SHOW TRANSACTION ISOLATION LEVEL, once per connection, stays unnamed); Prisma
#: names none without a statementNameGenerator
SETTINGS = {"pgjdbc": {"prepareThreshold": "1"}, "pgjdbc-maven": {"prepareThreshold": "1"},
            "hibernate": {"prepareThreshold": "2"}, "prisma": {"statementNameGenerator": "hash"}}
#: a setting of each agent's catalogue row that stops its driver naming statements
NEVER_NAMED = {"pgjdbc": {"prepareThreshold": "0"}, "pgjdbc-maven": {"prepareThreshold": "0"},
               "pdo": {"ATTR_EMULATE_PREPARES": "true"}, "pgx": {"statement_cache_mode": "describe"},
               "pgx-v5": {"default_query_exec_mode": "exec"}, "sqlx": {"persistent": "false"},
               "tokio-postgres": {"method": "query_typed"}, "hibernate": {"prepareThreshold": "0"}}
#: the agents whose driver frees one statement it holds (the others answer `free` with `unsupported`), and
#: whether the server statement is gone then (pgjdbc's close() hands it back to its connection's cache)
FREES = {"pgjdbc": False, "pgjdbc-maven": False, "pdo": True, "ruby-pg": True, "tokio-postgres": True}


def installed(package: str) -> bool:
    status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return "install ok installed" in status.stdout


def missing(spec: AgentSpec) -> list[str]:
    absent = [tool for tool in TOOLS[spec.language] if shutil.which(tool) is None]
    if shutil.which("dpkg-query"):
        absent += [pkg for pkg in spec.apt if not installed(pkg)]
    for name, minimum in spec.tools:
        try:
            find(name, minimum, spec.id)
        except ProvisionError as exc:
            absent.append(str(exc))
    return absent


class Agent:
    """One agent process and a JSON-lines conversation with it, every answer awaited with a bound."""

    def __init__(self, spec: AgentSpec, folder: Path) -> None:
        argv = [part.replace("{dir}", str(folder)) for part in spec.run]
        self.process = subprocess.Popen(argv, cwd=folder, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        encoding="utf-8")  # in its folder, as leakcheck starts it (process.py)
        self.lines: queue.Queue[str] = queue.Queue()
        self.next_id = 0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def send(self, op: str, **fields: Any) -> int:
        assert self.process.stdin is not None
        self.next_id += 1
        self.process.stdin.write(json.dumps({"id": self.next_id, "op": op, **fields}) + "\n")
        self.process.stdin.flush()
        return self.next_id

    def answer(self) -> dict[str, Any]:
        try:
            answer: dict[str, Any] = json.loads(self.lines.get(timeout=ANSWER_SECONDS))
        except queue.Empty:
            pytest.fail(f"no answer from the agent within {ANSWER_SECONDS} s")
        return answer

    def __call__(self, op: str, **fields: Any) -> dict[str, Any]:
        sent = self.send(op, **fields)
        answer = self.answer()
        assert answer["id"] == sent
        return answer

    def connect(self, server: Endpoint, settings: dict[str, str]) -> dict[str, Any]:
        return self("connect", host=server.host, port=server.port, user=server.user, password=server.password,
                    dbname=server.dbname, settings=settings)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=ANSWER_SECONDS)
        self.reader.join(timeout=ANSWER_SECONDS)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture(scope="module", params=SPECS, ids=[spec.id for spec in SPECS])
def spec(request: pytest.FixtureRequest) -> AgentSpec:
    chosen: AgentSpec = request.param
    if absent := missing(chosen):
        pytest.skip(f"{chosen.id} agent: {', '.join(absent)} missing "
                    f"(`leakcheck prepare --drivers={chosen.id}` installs them as root)")
    return chosen


@pytest.fixture(scope="module")
def built(spec: AgentSpec) -> Path:
    """The agent's folder in the test cache, built there from its spec as `leakcheck prepare` does."""
    return install(spec).folder


@pytest.fixture
def agent(spec: AgentSpec, built: Path) -> Iterator[Agent]:
    started = Agent(spec, built)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def server(postgres: PgServer) -> Endpoint:
    """The module's PostgreSQL, with the run's passwords (stored with SCRAM_ITERATIONS = 4096 rounds:
    pgjdbc 42.5.5 refuses fewer, "iteration must be >= 4096", RFC 7677's minimum)."""
    assert SCRAM_ITERATIONS >= 4096
    return postgres.endpoint()


def ok(answer: dict[str, Any]) -> dict[str, Any]:
    assert answer["ok"] is True, answer
    return answer


def test_an_agent_speaks_every_step_of_the_protocol_through_its_driver(
    spec: AgentSpec, agent: Agent, server: Endpoint
) -> None:
    hello = ok(agent("hello"))
    assert (hello["protocol"], hello["driver"]) == (1, spec.id) and hello["release"] and hello["runtime"]
    ok(agent.connect(server, SETTINGS.get(spec.id, {})))

    row = ok(agent("query", sql="SELECT pg_backend_pid(), 'a'::text, NULL, (2^40)::int8, true, 1.5::float8"))
    pid = row["rows"][0][0]
    assert row["rows"] == [[pid, "a", None, 2**40, True, 1.5]] and isinstance(pid, int)
    ok(agent("execute", sql="CREATE TEMP TABLE t (x int); INSERT INTO t VALUES (7); SET application_name = 'x'"))
    assert ok(agent("query", sql="SELECT x, current_setting('application_name') FROM t"))["rows"] == [[7, "x"]]
    names = "SELECT name FROM pg_prepared_statements"
    assert ok(agent("query", sql=names))["rows"] == [], "query added a named statement"

    for _ in range(2):
        assert ok(agent("prepared", sql="SELECT x + 1 FROM t", times=1))["rows"] == [[8]]
    held = [name for [name] in ok(agent("query", sql=names))["rows"]]
    assert len(held) == 1 and re.fullmatch(NAMES[spec.id], held[0]), held

    error = agent("query", sql="SELECT 1/0")
    assert error["ok"] is False and error["error"]["sqlstate"] == "22012", error
    assert error["error"]["class"] == ERROR_CLASSES[spec.id] and error["error"]["message"]

    ok(agent("execute", sql="LISTEN leakcheck_smoke"))
    with psycopg.connect(server.conninfo(), autocommit=True) as other:
        other.execute("SELECT pg_notify('leakcheck_smoke', 'hi')")
    seen: list[dict[str, str]] = []
    for _ in range(50):  # the notification arrives on the agent's connection asynchronously
        answer = ok(agent("query", sql="SELECT 1"))
        if hello.get("no_notifications"):  # its driver drops them: it says so, and answers carry none
            assert "notifications" not in answer
            break
        seen += answer["notifications"]
        if seen:
            break
    else:
        pytest.fail("the notification never arrived")
    assert seen == ([] if hello.get("no_notifications") else [{"channel": "leakcheck_smoke", "payload": "hi"}])

    ok(agent("close"))
    assert "notifications" not in ok(agent("hello"))
    ok(agent("exit"))
    assert agent.process.wait(timeout=ANSWER_SECONDS) == 0


def test_an_agent_reports_the_parameters_its_driver_holds(
    spec: AgentSpec, agent: Agent, server: Endpoint, postgres: PgServer
) -> None:
    answer = ok(agent.connect(server, {}))
    if spec.id == "sqlx":  # sqlx keeps its ParameterStatus values private, and delivers no notifications
        assert "parameters" not in answer and "notifications" not in answer
        return
    if spec.id == "prisma":  # node-postgres, under Prisma, exposes no ParameterStatus values
        assert "parameters" not in answer and answer["notifications"] == []
        return
    assert answer["notifications"] == []
    assert answer["parameters"]["server_version"].split(".")[0] == str(postgres.version.parts[0])
    assert answer["parameters"]["client_encoding"] == "UTF8"


def test_an_unknown_driver_setting_is_a_usage_error(spec: AgentSpec, agent: Agent, server: Endpoint) -> None:
    answer = agent.connect(server, {"no_such_setting": "1"})
    assert answer["ok"] is False and answer["error"]["class"] == "usage", answer


def wait_until_running(server: Endpoint, text: str) -> None:
    """Returns once `text` runs on the server (a cancel sent earlier would find nothing to stop)."""
    active = "SELECT 1 FROM pg_stat_activity WHERE query = %s AND state = 'active'"
    with psycopg.connect(server.conninfo(), autocommit=True) as watcher:
        for _ in range(200):
            if watcher.execute(active, [text]).fetchone():
                return
            time.sleep(0.05)
    pytest.fail(f"{text!r} never ran within 10 s")


def test_a_cancel_stops_the_running_statement_or_says_it_cannot(
    spec: AgentSpec, agent: Agent, server: Endpoint
) -> None:
    ok(agent.connect(server, {}))
    if spec.id in ("pdo", "sqlx", "prisma"):  # no cancel in the driver: the hello says so, and a cancel is refused
        assert ok(agent("hello"))["no_cancel"]
        assert agent("cancel")["error"]["class"] == "unsupported"
        return
    sleeping = agent.send("query", sql="SELECT pg_sleep(20)")
    wait_until_running(server, "SELECT pg_sleep(20)")
    cancel = agent.send("cancel")
    answers = {each["id"]: each for each in (agent.answer(), agent.answer())}  # either may come first
    assert answers[cancel]["ok"] is True, answers
    assert answers[sleeping]["error"]["sqlstate"] == CANCELLED[spec.id], answers
    if spec.id in SAYS_CLOSED:
        assert answers[cancel].get("closed", False) is SAYS_CLOSED[spec.id], answers


def test_tokio_postgres_cancels_on_a_unix_socket_as_on_tcp_and_says_closed(
    spec: AgentSpec, agent: Agent, postgres: PgServer
) -> None:
    if spec.id != "tokio-postgres":
        pytest.skip("only tokio-postgres's agent opens its cancel connection itself (where cancel_query would)")
    socket = postgres.socket_endpoint()  # a folder, as a fleet member's host
    ok(agent.connect(socket, {}))
    sleeping = agent.send("query", sql="SELECT pg_sleep(20)")
    wait_until_running(postgres.endpoint(), "SELECT pg_sleep(20)")
    cancel = agent.send("cancel")
    answers = {each["id"]: each for each in (agent.answer(), agent.answer())}
    assert (answers[cancel]["ok"], answers[cancel].get("closed")) == (True, True), answers
    assert answers[sleeping]["error"]["sqlstate"] == "57014", answers


def test_tokio_postgres_says_its_process_named_a_statement_once_its_driver_wrote_a_named_parse(
    spec: AgentSpec, built: Path, server: Endpoint
) -> None:
    if spec.id != "tokio-postgres":
        pytest.skip("only tokio-postgres's agent says `named`: its names count over the process")
    calls = {  # what each fresh agent runs (the last step answers), and whether it says so then
        "a prepare": (("prepared", "SELECT 1"),), "a query of built-in types": (("query", "SELECT 1, 'a'::text"),),
        "a query with no row": (("query", "SELECT 1 WHERE false"),), "a SET": (("query", "SET work_mem = '2MB'"),),
        "a transaction": (("begin", ""), ("execute", "SELECT 1"), ("commit", "")),
        # tokio-postgres prepares s<N> to read the type's name from pg_type
        "a query of a type not built in": (("execute", "CREATE TYPE pg_temp.mood AS ENUM ('ok')"),
                                           ("query", "SELECT 'ok'::pg_temp.mood")),
    }
    said = {}
    for what, steps in calls.items():
        agent = Agent(spec, built)
        try:
            assert ok(agent.connect(server, {}))["named"] is False
            said[what] = [ok(agent(op, sql=sql, times=1))["named"] for op, sql in steps][-1]
            assert ok(agent("close"))["named"] is said[what]
        finally:
            agent.stop()
    assert said == {"a prepare": True, "a query of built-in types": False, "a query with no row": False,
                    "a SET": False, "a transaction": False, "a query of a type not built in": True}


def test_tokio_postgres_says_named_after_a_prepare_its_driver_failed_before_writing_a_parse(
    spec: AgentSpec, built: Path, server: Endpoint
) -> None:
    if spec.id != "tokio-postgres":
        pytest.skip("only tokio-postgres's agent says `named`: its names count over the process")
    agent = Agent(spec, built)  # its prepare takes s<N> first, then fails to encode the Parse (a NUL in the text)
    try:
        assert ok(agent.connect(server, {}))["named"] is False
        failed = agent("prepared", sql="SELECT 1\u0000", times=1)
        assert (failed["ok"], failed.get("named")) == (False, True), failed
        assert agent("close").get("named") is True
    finally:
        agent.stop()


def test_a_pgx_agent_names_the_statements_of_its_next_connection_as_a_fresh_process_does_after_a_close(
    spec: AgentSpec, built: Path, server: Endpoint
) -> None:
    if spec.id != "pgx":
        pytest.skip("only pgx v4's agent sets its driver's counter back: lrupsc_N_M, N counts the process's caches")
    names = "SELECT array_agg(name ORDER BY name) FROM pg_prepared_statements"
    seen = []
    for agent in (Agent(spec, built), Agent(spec, built)):  # the first serves two probes, the second one
        try:
            for _ in range(2 if not seen else 1):
                ok(agent.connect(server, {}))
                for sql in ("SELECT 1", "SELECT 2"):  # each through the statement cache, by name
                    ok(agent("prepared", sql=sql, times=1))
                seen.append((ok(agent("query", sql=names))["rows"], ok(agent("close")).get("named")))
        finally:
            agent.stop()
    assert seen == [([[["lrupsc_1_0", "lrupsc_1_1"]]], False)] * 3, seen


def test_two_agents_never_share_a_process_or_a_session(spec: AgentSpec, built: Path, server: Endpoint) -> None:
    a, b = Agent(spec, built), Agent(spec, built)
    try:
        for each in (a, b):
            ok(each.connect(server, SETTINGS.get(spec.id, {})))
        ok(a("prepared", sql="SELECT 41 + 1", times=1))
        pid_a = ok(a("query", sql="SELECT pg_backend_pid()"))["rows"]
        pid_b = ok(b("query", sql="SELECT pg_backend_pid()"))["rows"]
        assert a.process.pid != b.process.pid and pid_a != pid_b
        assert ok(b("query", sql="SELECT name FROM pg_prepared_statements"))["rows"] == []
    finally:
        a.stop()
        b.stop()


def test_an_agent_ends_when_its_stdin_ends(spec: AgentSpec, agent: Agent, server: Endpoint) -> None:
    ok(agent.connect(server, {}))
    assert agent.process.stdin is not None
    agent.process.stdin.close()
    assert agent.process.wait(timeout=ANSWER_SECONDS) == 0


def test_the_setting_that_turns_preparing_off_leaves_no_named_statement(
    spec: AgentSpec, agent: Agent, server: Endpoint
) -> None:
    if spec.id not in NEVER_NAMED:  # (Prisma names none by default: test_agents.py)
        pytest.skip(f"the {spec.id} agent has no such setting (ruby-pg: Rails' own prepare('a1', ...))")
    ok(agent.connect(server, NEVER_NAMED[spec.id]))
    for _ in range(6):
        assert ok(agent("prepared", sql="SELECT 41 + 1", times=1))["rows"] == [[42]]
    assert ok(agent("query", sql="SELECT name FROM pg_prepared_statements"))["rows"] == []


def test_free_drops_the_statement_where_the_driver_can_and_is_refused_where_it_cannot(
    spec: AgentSpec, agent: Agent, server: Endpoint
) -> None:
    ok(agent.connect(server, SETTINGS.get(spec.id, {})))
    ok(agent("prepared", sql="SELECT 41 + 1", times=2))
    answer = agent("free", sql="SELECT 41 + 1")
    ok(agent("query", sql="SELECT 1"))  # (pgjdbc sends its Close with the next statement)
    held = ok(agent("query", sql="SELECT name FROM pg_prepared_statements"))["rows"]
    if spec.id in FREES:
        assert answer["ok"] is True and (held == [] if FREES[spec.id] else len(held) == 1), (answer, held)
    else:
        assert answer["error"]["class"] == "unsupported" and len(held) == 1, (answer, held)


def test_a_transaction_begun_through_the_driver_holds_until_its_commit_or_rollback(
    spec: AgentSpec, agent: Agent, server: Endpoint
) -> None:
    ok(agent.connect(server, SETTINGS.get(spec.id, {})))
    ok(agent("execute", sql="CREATE TEMP TABLE t (x int)"))
    ok(agent("begin"))
    ok(agent("execute", sql="INSERT INTO t VALUES (1)"))
    assert ok(agent("query", sql="SELECT txid_current_if_assigned() IS NOT NULL"))["rows"] == [[True]]
    ok(agent("rollback"))
    ok(agent("begin"))
    ok(agent("prepared", sql="INSERT INTO t VALUES (2) RETURNING x", times=1))
    ok(agent("commit"))
    assert ok(agent("query", sql="SELECT array_agg(x) FROM t"))["rows"] == [[[2]]]


def test_a_refused_login_is_answered_in_the_servers_own_words(spec: AgentSpec, agent: Agent, server: Endpoint) -> None:
    answer = agent("connect", host=server.host, port=server.port, user=server.user, password="not-the-password",
                   dbname=server.dbname, settings={})
    assert answer["ok"] is False and "password authentication failed" in answer["error"]["message"], answer


def test_a_refused_login_is_answered_as_it_comes_not_after_a_pools_wait(
        spec: AgentSpec, agent: Agent, server: Endpoint) -> None:
    # Hikari's start sleeps 1 s after a refused first login before it throws (HikariPool.checkFailFast): the
    # hibernate agent's pool is handed the connection its connect opened, so a refusal is answered at once.
    # The second refusal is timed (the first pays the agent's cold code).
    refused = dict(host=server.host, port=server.port, user=server.user, password="not-the-password",
                   dbname=server.dbname, settings={})
    assert agent("connect", **refused)["ok"] is False
    started = time.monotonic()
    answer = agent("connect", **refused)
    assert answer["ok"] is False and "password authentication failed" in answer["error"]["message"], answer
    assert time.monotonic() - started < 0.9  # under Hikari's 1 s, with room for a loaded machine
