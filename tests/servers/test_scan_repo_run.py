"""`leakcheck scan --repo=DIR --run`: the matrix of a repository's settings, run on real servers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.servers import TEST_PG

pytestmark = pytest.mark.servers


def test_a_spring_repositorys_prepare_threshold_is_run_beside_pgjdbcs_and_hibernates_default(tmp_path: Path) -> None:
    properties = tmp_path / "repo" / "src" / "main" / "resources" / "application.properties"
    properties.parent.mkdir(parents=True)
    properties.write_text("spring.datasource.url=jdbc:postgresql://pgbouncer:6432/shop?prepareThreshold=0\n")
    ran = subprocess.run([sys.executable, "-m", "leakcheck.cli.main", "scan", f"--repo={tmp_path / 'repo'}", "--run",
                          f"--pg={TEST_PG[0]}", "--bouncer=1.18", "--probes=protocol_prepare", "--controls=no",
                          "--jobs=2"], capture_output=True, text=True, cwd=tmp_path, timeout=400, check=False)
    assert ran.returncode == 1, ran.stdout + ran.stderr  # pgjdbc's default breaks on 1.18
    assert "hibernate:prepareThreshold=0,5" in ran.stdout and "not runnable" not in ran.stdout  # both ship
    cells = [line for line in ran.stdout.splitlines() if line.startswith("protocol_prepare ")]
    assert len(cells) == 1, ran.stdout
    numbered = dict(line.split(maxsplit=1) for line in ran.stdout.splitlines() if line.startswith("  ("))
    said = {numbered[f"({i})"]: word for i, word in enumerate(cells[0].split()[1:], 1)}
    workaround = [v for k, v in said.items() if k.endswith("[prepareThreshold=0]")]
    default = [v for k, v in said.items() if ("/pgjdbc" in k or "/hibernate" in k) and "[" not in k]
    assert workaround == ["n/a", "n/a"], said  # pgjdbc and Hibernate never prepare: nothing to leak or break
    assert len(default) == 2 and all(v.startswith("BREAKS") for v in default), said
