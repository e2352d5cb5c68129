"""The CI workflows the docs show are the repository's files, and their steps work on real servers here.

The fan-out: every job of the cell matrix as its own processes, with its own cache and temp folder
(two at a time, as a runner pool would), then the merge job over what they uploaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.servers import enterable_folder
from tests.support.workflows import LOCAL, Step, load, matrix_of, run_job


@pytest.fixture
def runner_home() -> Iterator[Path]:
    """Where the jobs run: a folder the server user can enter (pytest's tmp_path is private to root)."""
    with enterable_folder("leakcheck-workflows-") as folder:
        yield folder


def _passed(steps: list[Step]) -> None:
    failed = [s for s in steps if s.returncode != 0]
    assert not failed, "\n".join(f"step {s.name!r} exited {s.returncode}:\n{s.output[-3000:]}" for s in failed)


def test_every_step_the_local_runner_maps_is_one_the_workflows_have() -> None:
    ids = {s.get("id") for name in ("leakcheck.yml", "leakcheck-gate.yml")
           for job in load(name)["jobs"].values() for s in job["steps"]}
    assert set(LOCAL) <= ids


@pytest.mark.timeout(900)
def test_the_fan_out_workflow_measures_each_cell_in_its_own_job_and_the_merge_job_passes_the_gate(
        runner_home: Path) -> None:
    workflow = load("leakcheck.yml")
    cells = matrix_of(workflow["jobs"]["cell"])
    assert len(cells) == 4
    artifacts = runner_home / "artifacts"
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = list(pool.map(lambda m: run_job(workflow, "cell", m, runner_home / f"cell-{m['pg']}-{m['bouncer']}",
                                               artifacts), cells))
    for steps in jobs:
        _passed(steps)
    for m in cells:
        job = runner_home / f"cell-{m['pg']}-{m['bouncer']}"
        assert (job / "cache").is_dir() and (artifacts / f"leakcheck-{m['pg']}-{m['bouncer']}").is_dir()
        results = json.loads((job / "workspace" / f"results-{m['pg']}-{m['bouncer']}.json").read_text())
        assert {o["pg"].split(".")[0] for o in results["outcomes"]} == {m["pg"]}
    gate = run_job(workflow, "gate", {}, runner_home / "gate", artifacts)
    _passed(gate)
    merged = next(s for s in gate if s.name.startswith("leakcheck merge"))
    assert "pgbouncer1.24" in merged.output and "pgbouncer1.26" in merged.output
    summary = (runner_home / "gate" / "summary.md").read_text()
    assert "PostgreSQL 16." in summary and "PostgreSQL 18." in summary


@pytest.mark.timeout(900)
def test_the_gate_workflow_runs_the_matrix_file_writes_its_reports_and_the_upgrade_diff(runner_home: Path) -> None:
    workflow = load("leakcheck-gate.yml")
    steps = run_job(workflow, "gate", {}, runner_home / "gate", runner_home / "artifacts")
    _passed(steps)
    reports = runner_home / "artifacts" / "leakcheck-reports"
    assert sorted(p.name for p in reports.iterdir()) == ["diff.md", "leakcheck.html", "leakcheck.md", "leakcheck.xml"]
    assert "pg16" in (reports / "diff.md").read_text() and "<testcase" in (reports / "leakcheck.xml").read_text()
