"""`pytest -n 2` on real servers: the controller gets every worker's outcomes from the test reports,
so it prints, records and writes results exactly as a serial run does; `leakcheck merge` reads them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from leakcheck.cli import main as cli

pytestmark = pytest.mark.servers

#: 2 probes x 1 cell x 1 driver, with the controls --record needs: eight tests, so two workers get four each.
TINY = ["--pg=16", "--bouncer=1.24", "--drivers=psycopg", "--probes=timezone,statement_timeout"]


def run(pytester: pytest.Pytester, name: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess(*TINY, f"--record={name}.json", f"--results={name}-results.json", *args)


def matrix(result: pytest.RunResult) -> list[str]:
    """The summary's matrix, from its table to its totals (the server lines under it name paths)."""
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if line.startswith("through the pooler ("))
    end = next(i for i, line in enumerate(lines) if line.startswith("through the pooler, "))
    return lines[start : end + 1]


def measured(path: Path) -> list[tuple[str, ...]]:
    """Every outcome of a results file without its evidence (which names server pids)."""
    data = json.loads(path.read_text())
    return [(o["route"], o["pg"], json.dumps(o["pooler"]), o["driver"], o["probe"], o["verdict"], ",".join(o["facts"]))
            for o in data["outcomes"]]


def test_two_xdist_workers_and_a_serial_run_give_the_same_verdicts_matrix_and_files(
    pytester: pytest.Pytester,
) -> None:
    serial = run(pytester, "serial")
    parallel = run(pytester, "parallel", "-n", "2")
    serial.assert_outcomes(passed=7, failed=1)
    parallel.assert_outcomes(passed=7, failed=1)
    assert "2 workers [8 items]" in parallel.stdout.str()
    assert matrix(parallel) == matrix(serial) and "statement_timeout  LEAKS" in matrix(serial)
    assert (pytester.path / "parallel.json").read_bytes() == (pytester.path / "serial.json").read_bytes()
    outcomes = measured(pytester.path / "serial-results.json")
    assert measured(pytester.path / "parallel-results.json") == outcomes
    assert [(o[0], o[4], o[5], o[6]) for o in outcomes if o[0] == "transaction"] == [
        ("transaction", "statement_timeout", "leaks", "leaked"), ("transaction", "timezone", "isolated", "")]
    assert parallel.stdout.str().count("leakcheck: recorded 2 verdicts in parallel.json") == 1
    # The controller starts no server: the lines naming the servers are its workers'.
    assert any(re.match(r"PostgreSQL 16\.\d+: ", line) for line in parallel.stdout.lines)

    # The two runs' results merge into one report; against the recorded matrix, the gate passes.
    files = [str(pytester.path / "serial-results.json"), str(pytester.path / "parallel-results.json")]
    assert cli.main(["merge", *files, f"--expect={pytester.path / 'serial.json'}"]) == 0
    assert cli.main(["merge", *files]) == 1  # without expectations the leak fails, as in the plugin


def test_a_test_whose_worker_crashed_measured_nothing_and_fails_the_merge(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import os

        def pytest_runtest_call(item):
            if item.name.startswith("test_leak[") and item.name.endswith("-timezone]"):
                os._exit(1)  # the worker dies in the middle of the test: no report carries an outcome
    """)
    result = run(pytester, "crashed", "-n", "2")
    result.assert_outcomes(passed=6, failed=2)  # the controls pass
    result.stdout.fnmatch_lines(["leakcheck: 1 leak tests failed before measuring anything, e.g. *-timezone]: "
                                 "worker 'gw*' crashed while running*"])
    data = json.loads((pytester.path / "crashed-results.json").read_text())
    assert [o["probe"] for o in data["outcomes"] if o["route"] == "transaction"] == ["statement_timeout"]
    assert [u["test"].endswith("-timezone]") for u in data["unmeasured"]] == [True]
    merged = [str(pytester.path / "crashed-results.json"), f"--expect={pytester.path / 'crashed.json'}"]
    assert cli.main(["merge", *merged]) == 1  # what was measured matches, but a gate over a hole fails
