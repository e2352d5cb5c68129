"""A pooler leakcheck did not start (--pooled-dsn), tried against leakcheck's own servers on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from leakcheck.cli import main as cli
from leakcheck.model.pool_settings import PoolMode, PoolSettings
from leakcheck.model.target import NATIVE_DRIVERS, Route
from leakcheck.provision.base import USER, Endpoint
from leakcheck.provision.native import NativeBackend
from leakcheck.provision.postgres.fixtures import APP_ROLE
from tests.support.servers import TEST_PG, Measure

pytestmark = pytest.mark.servers

PROBES = "statement_timeout,timezone,set_role,listen_notify,session_authorization,custom_setting_moved"


def uri(endpoint: Endpoint, user: str = APP_ROLE, dbname: str = "leakcheck") -> str:
    password = endpoint.as_user(user).password
    return f"postgresql://{user}:{password}@{endpoint.host}:{endpoint.port}/{dbname}"


@pytest.fixture(scope="module")
def staging(native: NativeBackend, measure: Measure) -> Iterator[tuple[str, str, Endpoint]]:
    """A PgBouncer with a pool of two (no pool of one: the harness cannot ask for one), as a team runs it."""
    pg = measure.pg(TEST_PG[0])
    with native.pooler(pg, measure.bouncer("1.24"), PoolSettings(PoolMode.TRANSACTION, 2), "staging") as pooled:
        direct = native.postgres(pg)
        yield uri(pooled), uri(direct), direct


def outcomes(path: Path) -> dict[tuple[str, str, str], str]:
    data = json.loads(path.read_text())
    return {(o["route"], o["driver"], o["probe"]): o["verdict"] for o in data["outcomes"]}


def test_a_running_pooler_gives_the_verdicts_of_the_same_pooler_leakcheck_starts(
    pytester: pytest.Pytester, staging: tuple[str, str, Endpoint], measure: Measure
) -> None:
    pooled, direct, _ = staging
    result = pytester.runpytest_inprocess(f"--pooled-dsn={pooled}", f"--direct-dsn={direct}", "--dsn-name=staging",
                                          f"--probes={PROBES}", "--results=r.json", "-v")
    result.stdout.fnmatch_lines_random([
        "*test_leak?pg16.*-dsn-staging-psycopg*-statement_timeout? FAILED*",
        "*test_control?pg16.*-direct-psycopg*-timezone? PASSED*",
        "running pooler at postgresql://leakcheck_app:***@127.0.0.1:*",
    ])
    assert "session control" not in result.stdout.str()  # leakcheck cannot switch that pooler's mode
    measured = outcomes(pytester.path / "r.json")
    for driver in NATIVE_DRIVERS:
        for probe in PROBES.split(","):
            if probe == "session_authorization":  # the DSN's user is no superuser: measured as not applicable
                assert measured[("transaction", driver.value, probe)] == "not_applicable"
                continue
            ours = measure(probe, TEST_PG[0], "1.24", driver)
            assert measured[("transaction", driver.value, probe)] == ours.verdict.value, (probe, ours.evidence)
    assert {v for (route, _, _), v in measured.items() if route == "direct"} <= {"isolated", "not_applicable"}


def test_an_application_role_probe_through_a_superusers_dsn_is_not_applicable(
    pytester: pytest.Pytester, staging: tuple[str, str, Endpoint]
) -> None:
    _, _, direct = staging
    app, superuser = (f"{role}:{direct.as_user(role).password}@" for role in (APP_ROLE, USER))
    pooled = staging[0].replace(app, superuser, 1)  # the same pooler, as the superuser
    assert pooled != staging[0]
    result = pytester.runpytest_inprocess(f"--pooled-dsn={pooled}", f"--direct-dsn={staging[1]}", "--probes=rls_tenant",
                                          "--drivers=psycopg", "--controls=no", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*logs in as an application role (no superuser, no BYPASSRLS)*a superuser*"])


def test_a_dsn_where_clients_never_share_a_server_is_an_error_that_says_so(
    pytester: pytest.Pytester, staging: tuple[str, str, Endpoint]
) -> None:
    _, direct, _ = staging  # PostgreSQL itself: every connection its own backend
    result = pytester.runpytest_inprocess(f"--pooled-dsn={direct}", f"--direct-dsn={direct}", "--probes=timezone",
                                          "--drivers=psycopg", "--controls=no")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["ERROR: the harness failed: ProbeError: B never got A's server connection through "
                                 "the running pooler: 40 connections in 10 s gave pid(s) *"])


def test_a_probe_needing_the_test_roles_is_not_applicable_until_leakcheck_fixtures_creates_them(
    pytester: pytest.Pytester, staging: tuple[str, str, Endpoint], capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, direct = staging
    with psycopg.connect(direct.as_user(USER).conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS lc_bare")
        conn.execute("CREATE DATABASE lc_bare")
    bare = uri(direct, dbname="lc_bare")
    args = [f"--pooled-dsn={bare}", f"--direct-dsn={bare}", "--probes=set_role", "--drivers=psycopg", "--controls=no",
            "-rs"]
    before = pytester.runpytest_inprocess(*args)
    before.assert_outcomes(skipped=1)
    before.stdout.fnmatch_lines(["*not applicable: this probe uses leakcheck's test roles and tables*"])
    superuser = uri(direct, user=USER, dbname="lc_bare")
    assert cli.main(["fixtures", f"--dsn={superuser}"]) == 0
    assert "created leakcheck's test roles and tables" in capsys.readouterr().out
    after = pytester.runpytest_inprocess(*args)  # a pooled DSN straight to PostgreSQL still proves nothing:
    after.assert_outcomes(failed=1)  # set_role now runs, and fails on the missing sharing
    assert "B never got A's server connection" in after.stdout.str()
    assert cli.main(["fixtures", f"--dsn={superuser}", "--drop"]) == 0


@pytest.mark.parametrize(("args", "message"), [
    (["--pooled-dsn=localhost:6432"], "--pooled-dsn: 'localhost:6432' is not a postgresql:// URI"),
    (["--pooled-dsn=postgresql://u:secret@h/db", "--bouncer=1.24"], "--pooled-dsn measures the pooler already "
     "running there, so --bouncer"),
    (["--direct-dsn=postgresql://u@h/db"], "--direct-dsn go with --pooled-dsn"),
    (["--pooled-dsn=postgresql://u:secret@h/db", "--direct-dsn=postgresql://u:secret@h/db", "--dsn-name=a b"],
     "--dsn-name='a b' is not valid"),
    (["--pooled-dsn=postgresql://u:secret@h/db"], "--pooled-dsn without --direct-dsn"),
])
def test_bad_dsn_options_are_one_line_and_never_show_a_password(pytester: pytest.Pytester, args: list[str],
                                                                 message: str) -> None:
    result = pytester.runpytest_inprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and message in errors[0] and "secret" not in result.stderr.str()


def test_the_shared_control_of_a_dsn_run_drives_one_direct_session(
    pytester: pytest.Pytester, staging: tuple[str, str, Endpoint]
) -> None:
    pooled, direct, _ = staging
    result = pytester.runpytest_inprocess(f"--pooled-dsn={pooled}", f"--direct-dsn={direct}", "--probes=custom_setting",
                                          "--drivers=asyncpg", "-k", "shared", "--results=r.json")
    result.assert_outcomes(passed=1, deselected=2)
    assert outcomes(pytester.path / "r.json") == {(Route.SHARED.value, "asyncpg", "custom_setting"): "leaks"}


def test_discovery_runs_through_a_running_pooler_too(staging: tuple[str, str, Endpoint], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from leakcheck.discover import command
    from leakcheck.discover.options import Options

    pooled, direct, _ = staging
    opts = Options(cell=(("leakcheck_pooled_dsn", pooled), ("leakcheck_direct_dsn", direct),
                         ("leakcheck_dsn_name", "staging")), budget=3.0, seed=3, max_examples=200, out=tmp_path,
                   database=None)
    code = command.run(opts)
    out = capsys.readouterr().out
    assert "behind the running pooler dsn-staging" in out and code in (0, 1), out[-2000:]
    assert list(tmp_path.glob("pg16.*-dsn-staging-psycopg-transaction-*.sql"))
