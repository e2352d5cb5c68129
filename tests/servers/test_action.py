"""The composite action (action.yml) runs here, step by step, as a runner would run it: the matrix on real
servers gated on a baseline, the scan of a team's log and migrations against the verdicts it measured, the
repository's knobs, the reports in the job summary; and its exit code is the gate's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.servers import TEST_PG, enterable_folder
from tests.support.workflows import Step, load_action, run_action

pytestmark = pytest.mark.servers

BASELINE = f"""\
format = 2

["pg{TEST_PG[0]}/pgbouncer1.26".psycopg]
statement_timeout = {{ verdict = "leaks", reason = "accepted: the application sets it per transaction" }}
set_local = "isolated"
advisory_xact_lock = "isolated"
"""
SAFE_LOG = """\
2026-12-01 10:00:00.001 UTC [11] LOG:  statement: BEGIN
2026-12-01 10:00:00.002 UTC [11] LOG:  statement: SET LOCAL statement_timeout = '5s'
2026-12-01 10:00:00.003 UTC [11] LOG:  statement: COMMIT
"""


@pytest.fixture
def home() -> Iterator[Path]:
    with enterable_folder("leakcheck-action-") as folder:
        yield folder


def _outputs(steps: list[Step]) -> str:
    return "\n".join(f"--- {s.name} (exit {s.returncode})\n{s.output[-3000:]}" for s in steps)


def _workspace(home: Path, log: str) -> None:
    workspace = home / "workspace"
    (workspace / "db" / "migrate").mkdir(parents=True)
    (workspace / "db" / "migrate" / "001_init.sql").write_text("CREATE TABLE t (a int);\nSELECT "
                                                               "pg_advisory_xact_lock(1);\n")
    (workspace / "postgresql.log").write_text(log)
    (workspace / "prod.toml").write_text(BASELINE)
    (workspace / ".env").write_text("DATABASE_URL=postgresql://app@pgbouncer:6432/app?pgbouncer=true\n")


@pytest.mark.timeout(900)
def test_the_actions_steps_run_in_order_and_pass_on_a_baseline_and_a_safe_workload(home: Path) -> None:
    _workspace(home, SAFE_LOG)
    steps = run_action({"pg": TEST_PG[0], "bouncer": "1.26", "drivers": "psycopg", "jobs": "2",
                        "probes": "statement_timeout,set_local,advisory_xact_lock", "expect": "prod.toml",
                        "scan": "postgresql.log\ndb/migrate\n", "scan-repo": "."}, home)
    assert [s.name for s in steps] == [s.get("id") or s.get("uses") for s in load_action()["runs"]["steps"]]
    assert all(s.returncode == 0 for s in steps), _outputs(steps)
    install, matrix, scan, repo, summary = steps[1:]
    assert "Would install leakcheck" in install.output  # pip built it from the action's folder (dry run here)
    assert "1 accepted or not applicable, 0 failed" in matrix.output
    assert "0 of 2 classes affected on 1 cell" in scan.output
    assert ".env:1: prisma pgbouncer=true" in repo.output
    assert "matrix exit 0, scan exit 0" in summary.output
    page = (home / "summary.md").read_text()
    assert "## leakcheck" in page and "## leakcheck scan" in page
    workspace = home / "workspace"
    for name in ("leakcheck-results.json", "leakcheck.md", "leakcheck.html", "leakcheck.xml", "leakcheck-scan.md",
                 "leakcheck-scan.json", "leakcheck-scan.xml"):
        assert (workspace / name).is_file(), name
    classes = {c["key"]: c["status"] for c in json.loads((workspace / "leakcheck-scan.json").read_text())["classes"]}
    assert classes == {"set_local:statement_timeout": "ok", "advisory_xact_lock:pg_advisory_xact_lock": "ok"}


def test_the_action_fails_when_the_scan_finds_an_affected_statement(home: Path) -> None:
    """Without measuring (an earlier results file), a session SET in the log fails the action's last step."""
    _workspace(home, SAFE_LOG + "2026-12-01 10:00:00.004 UTC [12] LOG:  statement: SET statement_timeout = 0\n")
    results = Path(__file__).resolve().parents[2] / "docs" / "measured" / "native-bookworm.results.json.gz"
    steps = run_action({"measure": "false", "results": str(results), "scan": "postgresql.log"}, home)
    *passed, summary = steps
    assert all(s.returncode == 0 for s in passed), _outputs(steps)
    assert summary.returncode == 1 and "matrix exit 0, scan exit 1" in summary.output
    assert "**AFFECTED**: SET statement\\_timeout" in (home / "summary.md").read_text()
