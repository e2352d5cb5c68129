"""The plugin end to end on real servers: test ids, verdicts as pass/fail, JUnit, the matrix, the gate."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from leakcheck.drivers.clients import driver_version
from leakcheck.model.target import Driver

pytestmark = pytest.mark.servers

_PSYCOPG = driver_version(Driver.PSYCOPG)
assert _PSYCOPG is not None
PSYCOPG = _PSYCOPG
SMALL = ["--pg=16", "--bouncer=1.24", "--drivers=psycopg", "--probes=statement_timeout,timezone"]


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess(*SMALL, *args)


def test_a_leak_fails_its_test_and_an_isolated_state_passes(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--controls=no", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*test_leak?pg16.*-pgbouncer1.24.*-psycopg*-statement_timeout? FAILED*",
        "*test_leak?pg16.*-pgbouncer1.24.*-psycopg*-timezone? PASSED*",
        "*LEAKS: A: SET statement_timeout*",  # the evidence is the failure message
        "*leakcheck matrix*",
        "PostgreSQL 16.*1.24.*/psycopg*",
    ])


def test_by_default_the_answer_leads_and_a_leak_is_not_repeated_as_a_failure_block(pytester: pytest.Pytester) -> None:
    # The README's main command printed ~1,140 lines of failure blocks before the matrix and 568 FAILED lines
    # after it, and counted the controls' required leaks with the pooler's.
    result = run(pytester)
    result.assert_outcomes(passed=7, failed=1)
    text = result.stdout.str()
    assert "FAILURES" not in text and "FAILED leakcheck::" not in text and "verdicts:" not in text
    result.stdout.fnmatch_lines([
        "*= leakcheck matrix =*",
        "through the pooler (*",
        "PostgreSQL 16.*",
        "statement_timeout*LEAKS*",
        "through the pooler, 2 leak tests: 1 isolated, 1 leaks",
        "direct control (*): 2 isolated",
        "legend:",
        "PostgreSQL 16.*: *",  # the servers it measured on
        "leakcheck: 1 leak test failed on the verdict the matrix shows (LEAKS, LOST, BREAKS); the evidence: -v, *",
        "*= 1 failed, 7 passed*",
    ])
    verbose = run(pytester, "--controls=no", "-rf")  # -rf given: pytest's own summary, as asked
    verbose.stdout.fnmatch_lines(["*= FAILURES =*", "*LEAKS: A: SET statement_timeout*", "FAILED leakcheck::*"])


def test_negative_and_positive_controls_run_as_their_own_tests(pytester: pytest.Pytester) -> None:
    result = run(pytester, "-v", "-k", "control")
    result.assert_outcomes(passed=6, deselected=2)
    result.stdout.fnmatch_lines_random([
        "*test_control?pg16.*-direct-psycopg*-timezone? PASSED*",
        "*test_control?pg16.*-pgbouncer1.24.*-session-psycopg*-statement_timeout? PASSED*",
        "*test_control?pg16.*-shared-psycopg*-statement_timeout? PASSED*",  # passes because it leaks
    ])


def test_junit_carries_the_verdict_and_evidence_as_properties(pytester: pytest.Pytester) -> None:
    run(pytester, "--controls=no", "--junitxml=report.xml")
    tree = ET.parse(pytester.path / "report.xml")
    cases = {c.get("name"): c for c in tree.iter("testcase")}
    [case] = [c for name, c in cases.items() if name and name.endswith("-statement_timeout]")]
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["verdict"] == "leaks" and props["probe"] == "statement_timeout" and props["driver"] == "psycopg"
    assert props["driver_version"] == str(driver_version(Driver.PSYCOPG))
    assert props["pooler_kind"] == "pgbouncer" and (props["pooler"] or "").startswith("pgbouncer1.24.")
    assert (props["pg_version"] or "").startswith("16.") and (props["bouncer_version"] or "").startswith("1.24.")
    assert "57014" in (props["evidence"] or "") and props["facts"] == "leaked" and props["security"] == "false"
    assert case.find("failure") is not None


def test_a_recorded_matrix_is_a_gate_that_fails_only_on_differences(pytester: pytest.Pytester) -> None:
    first = run(pytester, "--record=matrices/m.json")  # with the controls: a verdict rests on them
    first.stdout.fnmatch_lines(["leakcheck: recorded 2 verdicts in matrices/m.json (0 kept from the previous file)"])
    recorded = json.loads((pytester.path / "matrices" / "m.json").read_text())
    psycopg = f"psycopg{PSYCOPG.prefix(2)}"  # a new file names the driver release it measured
    assert recorded["verdicts"] == {
        f"pg16/pgbouncer1.24/{psycopg}/statement_timeout": "leaks",
        f"pg16/pgbouncer1.24/{psycopg}/timezone": "isolated",
    }
    run(pytester, "--controls=no", "--expect=matrices/m.json").assert_outcomes(passed=1, xfailed=1)  # leak accepted

    recorded["verdicts"][f"pg16/pgbouncer1.24/{psycopg}/timezone"] = "leaks"
    Path(pytester.path / "matrices" / "m.json").write_text(json.dumps(recorded))
    result = run(pytester, "--controls=no", "--expect=matrices/m.json")
    result.assert_outcomes(xfailed=1, failed=1)  # the leak still accepted; the vanished one fails
    assert "the expected leaks went away: measured isolated" in result.stdout.str()


def test_an_unobtainable_pgbouncer_version_is_one_line_naming_what_was_tried(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--pg=16", "--bouncer=1.21")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and "PgBouncer 1.21" in errors[0] and "tried" in errors[0]
