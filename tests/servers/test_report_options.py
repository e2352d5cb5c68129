"""--report-html and --report-md: a bad path stops the run before any server starts; a real run writes both."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

from tests.servers.test_bad_input import SMALL, one_usage_error


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("--report-html=", "--report-html is given but empty"),
        ("--report-md=.", "--report-md: . is a folder"),
        ("--report-html=conftest.py/r.html", "is a file; give --report-html another path"),
    ],
)
def test_a_bad_report_path_is_one_line_and_exit_code_4(pytester: pytest.Pytester, arg: str, message: str) -> None:
    pytester.makeconftest("")
    assert message in one_usage_error(pytester.runpytest_inprocess(*SMALL, arg))


def test_the_report_ini_keys_are_checked_too(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nleakcheck_report_md =\n")
    assert "--report-md is given but empty" in one_usage_error(pytester.runpytest_inprocess(*SMALL))


def test_a_report_without_the_matrix_is_refused(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--report-html=r.html")
    assert "--report-html given, but the leak matrix is off" in one_usage_error(result)
    assert not Path(pytester.path / "r.html").exists()


@pytest.mark.servers
def test_a_real_run_writes_both_reports_and_colours_the_matrix(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(
        "--pg=16", "--bouncer=1.24", "--drivers=psycopg", "--probes=timezone,statement_timeout", "--controls=no",
        "--report-html=out/r.html", "--report-md=r.md", "--color=yes")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "\x1b[1;31mLEAKS\x1b[0m" in out and "legend:" in out  # pytest's markup is on: the matrix is coloured
    assert "leakcheck: wrote the HTML report to out/r.html" in out
    assert "leakcheck: wrote the Markdown report to r.md" in out
    page = (pytester.path / "out" / "r.html").read_text()
    assert 'data-probe="statement_timeout"' in page and 'data-verdict="leaks"' in page and "57014" in page
    md = (pytester.path / "r.md").read_text()
    assert "| statement\\_timeout | **LEAKS** |" in md and "<details><summary>statement_timeout" in md
    # Each says when, by which leakcheck and on which servers (a report read later said none of it).
    release = importlib.metadata.version("leakcheck")
    assert re.search(rf"^measured 20\d\d-\d\d-\d\d \d\d:\d\d UTC by leakcheck {re.escape(release)}, on:$", md, re.M)
    assert re.search(r"^- PostgreSQL 16\.\d+: .*postgres/16\.\d+/bin \(cache", md, re.M)
    assert re.search(r"^- PgBouncer 1\.24\.\d+: .*pgbouncer", md, re.M)
    assert f"UTC by leakcheck {release}, on:</p>" in page and '<ul data-testid="servers"><li>PostgreSQL 16.' in page
