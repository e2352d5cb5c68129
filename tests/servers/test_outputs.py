"""The end-of-run files are written in one place (results/outputs.py) for the three ways a run ends:
pytest, `leakcheck run` and `leakcheck merge`. The same outcomes give the same files, byte for byte, but for
the reports' header (when, by which leakcheck, on which servers: a merge knows the releases only)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers.test_bad_input import SMALL

#: With the controls: --record writes a verdict only where its controls passed in the same run.
TWO = [*SMALL[:3], "--probes=timezone,statement_timeout"]
FILES = ("m.toml", "r.json", "r.html", "r.md")


def targets(folder: str, junit: bool = True) -> list[str]:
    named = [f"--record={folder}/m.toml", f"--results={folder}/r.json", f"--report-html={folder}/r.html",
             f"--report-md={folder}/r.md"]
    return [*named, f"--junitxml={folder}/j.xml"] if junit else named


def leakcheck(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leakcheck.cli.main", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300, check=False)


#: The reports' header (reports/about.py): between the Markdown title and its counts, and the HTML's about lines.
HEADER = {"r.md": re.compile(rb"(?<=\n\n)(measured|merged) .*?\n\n(?=verdicts: )", re.S),
          "r.html": re.compile(rb'<p data-testid="about">.*?</p>(<ul data-testid="servers">.*?</ul>)?')}


def contents(folder: Path, names: tuple[str, ...] = FILES) -> dict[str, bytes]:
    """Each file's bytes, the reports without their header (each checked on its own)."""
    out = {}
    for name in sorted(p.name for p in folder.iterdir()):
        if name in names:
            data = (folder / name).read_bytes()
            out[name] = HEADER[name].sub(b"", data, count=1) if name in HEADER else data
    return out


def test_merging_one_results_file_writes_the_files_of_the_run_that_wrote_it(pytester: pytest.Pytester) -> None:
    here = pytester.path
    for folder in ("pytest", "run", "merged-pytest", "merged-run"):
        (here / folder).mkdir()
    pytester.runpytest_inprocess(*TWO, *targets("pytest", junit=False)).assert_outcomes(passed=7, failed=1)
    ran = leakcheck("run", *TWO, *targets("run"), cwd=here)
    assert ran.returncode == 1, ran.stderr  # statement_timeout leaks
    for source, into in (("pytest", "merged-pytest"), ("run", "merged-run")):
        merged = leakcheck("merge", f"{source}/r.json", *targets(into), cwd=here)
        assert merged.returncode == 1, merged.stdout + merged.stderr
    assert set(contents(here / "pytest")) == set(FILES)
    assert contents(here / "merged-pytest") == contents(here / "pytest")
    assert contents(here / "merged-run", (*FILES, "j.xml")) == contents(here / "run", (*FILES, "j.xml"))
    for folder, said in (("pytest", b"measured "), ("run", b"measured "), ("merged-pytest", b"merged "),
                         ("merged-run", b"merged ")):
        for name, header in HEADER.items():
            found = header.search((here / folder / name).read_bytes())
            assert found is not None and said in found.group(0) and b" UTC by leakcheck " in found.group(0)
    # Two measurements: the verdicts are the same, so the baseline each recorded is too.
    assert (here / "run" / "m.toml").read_bytes() == (here / "pytest" / "m.toml").read_bytes()
