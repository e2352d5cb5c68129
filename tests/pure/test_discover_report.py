"""A finding printed as a replayable script, the summary line, and the options (no servers)."""

from __future__ import annotations

import argparse

import pytest

from leakcheck.discover import command
from leakcheck.discover.compare import Comparison, Diff
from leakcheck.discover.findings import Finding
from leakcheck.discover.ops import PREPARED as PREPARED_WAY
from leakcheck.discover.ops import Kind, Op, Who
from leakcheck.discover.options import parse_budget
from leakcheck.discover.report import DriverNames, headline, script, slug, summary
from leakcheck.model.errors import UsageError
from leakcheck.model.target import Driver

A, B = Who.A, Who.B


def finding(ops: tuple[Op, ...], diffs: tuple[Diff, ...], probes: tuple[str, ...] = (),
            unlisted: tuple[str, ...] = ()) -> Finding:
    comparison = Comparison(diffs, "A and B on pid 10", "A on pid 11, B on pid 12")
    return Finding(ops, comparison, "sig", 1, True, probes, unlisted, reproduced=(3, 3))


PREPARED = finding(
    (Op(A, Kind.PREPARE, "s1"), Op(B, Kind.EXECUTE, "s1"), Op(B, Kind.PROTOCOL, "p1")),
    (Diff(1, B, "result:execute", "'lc_A_s1'", 'error 26000: prepared statement "lc_s1" does not exist'),
     Diff(4, B, "prepared", "['<protocol>=lc_B_p1', 'lc_s1=lc_A_s1']", "['<protocol>=lc_B_p1']")),
    probes=("sql_prepare",))

EXPECTED = """\
-- leakcheck discover, finding 1 of 2: known: sql_prepare
-- PostgreSQL 16.14, PgBouncer 1.24.1; driver psycopg; found in round 1 after 0.0 s, reproduced 3 of 3 runs
-- through the pooler A and B on pid 10; directly A on pid 11, B on pid 12
-- Each step is one call of A's or B's driver, as an application makes it: in autocommit, or inside the
-- transaction it began through the driver's transaction API. Under it, what the call sent, as two psql 18
-- sessions through the pooler replay it (\\parse, \\bind_named, \\close_prepared or DEALLOCATE stand for
-- the driver's prepared path under a stand-in name), and what the client got through the pooler and
-- directly (two sessions). The harness opened no transaction of its own: a session of its own saw each
-- step on the server (pg_stat_activity), and read the rows written back after the run.

-- 1. A: query
PREPARE lc_s1 AS SELECT 'lc_A_s1'::text;

-- 2. B: query
EXECUTE lc_s1;
--   through the pooler: 'lc_A_s1'  |  direct: error 26000: prepared statement "lc_s1" does not exist

-- 3. B: prepared SELECT (the driver's prepared path)
SELECT 'lc_B_p1'::text AS v, pg_backend_pid() \\parse _pg3_0
\\bind_named _pg3_0 \\g

-- 4. B: observe (end)
SELECT ARRAY(SELECT name || '=' || coalesce(substring(statement FROM 'lc_[AB]_[a-z0-9]+'), '?') \
FROM pg_prepared_statements WHERE strpos(statement, 'lc_') > 0 ORDER BY 1);
--   through the pooler: ['<protocol>=lc_B_p1', 'lc_s1=lc_A_s1']  |  direct: ['<protocol>=lc_B_p1']
"""


def test_a_finding_prints_as_an_interleaved_script_with_each_difference_under_its_step() -> None:
    assert script(PREPARED, "PostgreSQL 16.14, PgBouncer 1.24.1", Driver.PSYCOPG, 1, 2) == EXPECTED


def test_a_bound_parameter_replays_unnamed_for_psycopg_and_by_asyncpgs_cached_name() -> None:
    f = finding((Op(A, Kind.SET_CONFIG, "app.tenant", "session bound"),),
                (Diff(2, B, "setting:app.tenant", "'tenant_a'", "NULL"),), probes=("rls_tenant",))
    assert "SELECT set_config('app.tenant', $1, false) \\bind 'tenant_a' \\g\n" in script(f, "here", Driver.PSYCOPG)
    text = script(f, "here", Driver.ASYNCPG)
    assert ("SELECT set_config('app.tenant', $1, false) \\parse __asyncpg_stmt_1__\n"
            "\\bind_named __asyncpg_stmt_1__ 'tenant_a' \\g\n") in text
    assert "-- 2. B: observe (end)\nSELECT current_setting('app.tenant', true);\n" in text


def test_driver_side_observations_print_as_comments() -> None:
    f = finding((Op(A, Kind.SET, "TimeZone"),), (Diff(2, B, "reported:TimeZone", "'Pacific/Chatham'", "'UTC'"),))
    assert "-- the TimeZone B's driver was told (ParameterStatus):\n" in script(f, "here", Driver.PSYCOPG)


def test_drivers_name_statements_per_connection_once_per_text() -> None:
    names = DriverNames(Driver.ASYNCPG)
    assert [names.name(A, "q1"), names.name(A, "q1"), names.name(A, "q2"), names.name(B, "q1")] == [
        ("__asyncpg_stmt_1__", True), ("__asyncpg_stmt_1__", False), ("__asyncpg_stmt_2__", True),
        ("__asyncpg_stmt_1__", True)]


def test_the_summary_counts_known_and_new_findings() -> None:
    new = finding((Op(A, Kind.SET, "work_mem"),), (), unlisted=("session:work_mem",))
    assert summary([PREPARED, new]) == "1 known (sql_prepare), 1 new (session:work_mem)"
    assert summary([]) == "0 known, 0 new"
    assert slug(new) == "new-session-work_mem" and slug(PREPARED) == "known-sql_prepare"


@pytest.mark.parametrize(("text", "seconds"), [("60s", 60), ("90", 90), ("1.5m", 90), ("1m30s", 90),
                                               ("500ms", 0.5), ("2h", 7200)])
def test_a_budget_reads_as_seconds(text: str, seconds: float) -> None:
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "-1s", "1x", "s", "1m 30s", "60 s"])
def test_a_budget_that_is_no_positive_duration_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match="--budget"):
        parse_budget(text)


def _args(**given: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args([f"--{k.replace('_', '-')}={v}" for k, v in given.items()])


@pytest.mark.parametrize(("given", "message"), [
    ({"pg": "16,18", "bouncer": "1.24"}, "one version"),
    ({"pg": "16", "route": "direct", "bouncer": "1.24"}, "--route=direct measures two direct sessions"),
    ({"pg": "16"}, "needs a pooler: --bouncer"),
    ({"bouncer": "1.24"}, "discover needs --pg"),
    ({"pg": "16", "bouncer": "1.24", "driver": "jdbc"}, "--driver"),
    ({"pg": "16", "bouncer": "1.24", "max_examples": "0"}, "--max-examples"),
    ({"pg": "16", "bouncer": "1.24", "out": ""}, "--out"),
    ({"pg": "16", "bouncer": "1.24", "database": ""}, "--database"),
])
def test_bad_discover_options_are_one_line_usage_errors(given: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        command.options(_args(**given))


def test_the_cli_exits_4_on_bad_discover_input() -> None:
    from leakcheck.cli.main import main

    assert main(["discover", "--pg=16", "--bouncer=1.24", "--budget=soon", "--database=none"]) == 4


def test_options_read_every_flag() -> None:
    opts = command.options(_args(pg="16", bouncer="1.24", driver="asyncpg", route="session", budget="2m", seed="5",
                                 max_examples="9", max_ops="4", out="none", database="none"))
    assert (opts.route, opts.driver, opts.budget, opts.seed, opts.max_examples, opts.max_ops, opts.out,
            opts.database) == ("session", "asyncpg", 120.0, 5, 9, 4, None, None)


def test_an_agents_free_and_its_transaction_api_print_as_the_driver_calls_they_are() -> None:
    ops = (Op(A, Kind.BEGIN), Op(A, Kind.PROTOCOL, "p1"), Op(A, Kind.FREE), Op(A, Kind.PROTOCOL, "p1"),
           Op(A, Kind.COMMIT))
    text = script(finding(ops, ()), "PostgreSQL 16.14, PgBouncer 1.18.0", Driver("node-postgres"))
    assert "-- 1. A: begin (the driver's transaction API)\nBEGIN;\n" in text
    assert "-- 3. A: free (the driver's own call, for its statement of step 2)\n\\close_prepared stmt_1\n" in text
    assert text.count("\\parse stmt_") == 2  # freed: its next use prepares it again
    assert "-- 5. A: commit (the driver's transaction API)\nCOMMIT;\n" in text


LOST = Finding(
    (Op(A, Kind.BEGIN), Op(A, Kind.WRITE, "", PREPARED_WAY), Op(A, Kind.FREE), Op(A, Kind.COMMIT)),
    Comparison((Diff(3, A, "outcome:lost write", "its commit returned success, and A's row of step 2 is not in the "
                     "database; no error reached A", "the row is in the database"),),
               "A and B on pid 10", "A on pid 11, B on pid 12", ("success",) * 4),
    "outcome:lost write", 1, True, ("tx_free_before_commit",), (), reproduced=(3, 3))


def test_a_lost_commit_prints_as_the_driver_calls_that_lost_it_with_what_each_returned() -> None:
    text = script(LOST, "PostgreSQL 16.14, PgBouncer 1.24.1", Driver("pdo"))
    assert text.startswith("-- leakcheck discover, finding 1 of 1: known: tx_free_before_commit\n"
                           "-- What the application lost: a commit was lost: its commit returned success, and A's row "
                           "of step 2 is not in the database; no error reached A\n")
    assert ("-- 2. A: prepared INSERT (the driver's prepared path; returned success)\n"
            "INSERT INTO lc_writes (id, who) VALUES ('lc_A_row2', 'A') ON CONFLICT (id) DO NOTHING "
            "\\parse pdo_stmt_00000001\n\\bind_named pdo_stmt_00000001 \\g\n") in text
    assert ("-- 3. A: free (the driver's own call, for its statement of step 2; returned success)\n"
            "DEALLOCATE pdo_stmt_00000001;\n") in text
    assert ("-- 4. A: commit (the driver's transaction API; returned success)\nCOMMIT;\n"
            "--   through the pooler: its commit returned success, and A's row of step 2 is not in the database; "
            "no error reached A  |  direct: the row is in the database\n") in text
    assert slug(LOST) == "known-tx_free_before_commit"


def test_another_clients_result_and_a_disconnect_at_a_bind_are_named_in_the_headline() -> None:
    other = Finding((Op(B, Kind.PROTOCOL, "p1"),), Comparison((Diff(
        0, B, "outcome:other result", "returned 'lc_A_p1', not its own 'lc_B_p1'", "'lc_B_p1'"),)),
        "outcome:other result", 1, True, (), ("outcome:other result",))
    assert headline(other) == "B got A's result: returned 'lc_A_p1', not its own 'lc_B_p1'"
    gone = Finding((Op(A, Kind.PREPARE, "s1"), Op(A, Kind.BIND, "s1")), Comparison((Diff(
        1, A, "outcome:disconnected", "its connection was closed: error 08P01 x", "'lc_A_s1'"),), results=(
        "success", "error 08P01: x")), "outcome:disconnected", 1, True, ("bind_unprepared",), ())
    assert headline(gone) == "A was disconnected: its connection was closed: error 08P01 x"
    text = script(gone, "here", Driver.PSYCOPG)
    assert "-- 2. A: bind (the driver executes lc_s1 by name, without preparing it; error 08P01: x)\n" \
        "\\bind_named lc_s1 \\g\n" in text
    assert headline(PREPARED) is None
