"""A finding printed as a replayable script, the summary line, and the options (no servers)."""

from __future__ import annotations

import argparse

import pytest

from leakcheck.discover import command
from leakcheck.discover.compare import Comparison, Diff
from leakcheck.discover.findings import Finding
from leakcheck.discover.ops import Kind, Op, Who
from leakcheck.discover.options import parse_budget
from leakcheck.discover.report import DriverNames, script, slug, summary
from leakcheck.model.errors import UsageError
from leakcheck.model.verdicts import Driver

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
-- Replay: two psql sessions, A and B, connected through the pooler; run the steps in order.
-- Outside BEGIN ... COMMIT each step ran in its own transaction block that began with the proof
-- (SELECT pg_backend_pid(), backend_start), which changes nothing for these statements.
-- Under a step: what that client observed through the pooler and directly (two sessions).

-- 1. A
PREPARE lc_s1 AS SELECT 'lc_A_s1'::text;

-- 2. B
EXECUTE lc_s1;
--   through the pooler: 'lc_A_s1'  |  direct: error 26000: prepared statement "lc_s1" does not exist

-- 3. B
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


def test_an_agents_free_and_its_transaction_api_print_as_psql_steps_that_say_so() -> None:
    ops = (Op(A, Kind.BEGIN, "", "driver"), Op(A, Kind.PROTOCOL, "p1"), Op(A, Kind.FREE, "p1"),
           Op(A, Kind.PROTOCOL, "p1"), Op(A, Kind.COMMIT, "", "driver"))
    text = script(finding(ops, ()), "PostgreSQL 16.14, PgBouncer 1.18.0", Driver("node-postgres"))
    assert "BEGIN;  -- through the driver's transaction API" in text
    assert "\\close_prepared stmt_1  -- the driver frees its statement" in text
    assert text.count("\\parse stmt_") == 2  # freed: its next use prepares it again
    assert "COMMIT;  -- through the driver's transaction API" in text
