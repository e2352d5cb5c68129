"""The `--out` folder: checked up front, and a run's scripts swapped in (no servers)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from leakcheck.discover import command, output
from leakcheck.discover.options import Options
from leakcheck.model.errors import UsageError

STEM = "pg16.14-pgbouncer1.24.1-psycopg-transaction"


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_run_replaces_its_configurations_earlier_files_of_any_number_and_keeps_others(tmp_path: Path) -> None:
    output.write(tmp_path, STEM, [("a", "1"), ("b", "2"), ("c", "3")])
    (tmp_path / f"{STEM}-100-old.sql").write_text("old")
    other = tmp_path / "pg16.14-direct-psycopg-direct-01-x.sql"
    other.write_text("theirs")
    (tmp_path / "notes.sql").write_text("mine")
    written, removed = output.write(tmp_path, STEM, [("z", "new")])
    assert [p.name for p in written] == [f"{STEM}-01-z.sql"] and len(removed) == 4
    assert names(tmp_path) == sorted([f"{STEM}-01-z.sql", other.name, "notes.sql"])
    assert (tmp_path / f"{STEM}-01-z.sql").read_text() == "new"


def test_a_run_without_findings_removes_its_configurations_earlier_files(tmp_path: Path) -> None:
    output.write(tmp_path, STEM, [("a", "1")])
    assert output.write(tmp_path, STEM, []) == ([], [tmp_path / f"{STEM}-01-a.sql"])
    assert names(tmp_path) == []


def test_an_interrupted_write_leaves_every_file_whole_and_no_temporary_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    output.write(tmp_path, STEM, [("a", "old a"), ("b", "old b")])
    real, calls = os.replace, []

    def interrupted(src: str, dst: str) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        output.write(tmp_path, STEM, [("a", "new a"), ("b", "new b")])
    assert names(tmp_path) == [f"{STEM}-01-a.sql", f"{STEM}-02-b.sql"]
    assert [(tmp_path / n).read_text() for n in names(tmp_path)] == ["new a", "old b"]


def test_out_is_none_a_folder_or_one_that_can_be_made_and_nothing_is_made_up_front(tmp_path: Path) -> None:
    assert output.parse_out("none") is None
    assert output.parse_out(str(tmp_path)) == tmp_path
    assert output.parse_out(str(tmp_path / "new" / "deeper")) == tmp_path / "new" / "deeper"
    assert names(tmp_path) == []


def test_an_out_that_cannot_take_files_is_a_usage_error_before_any_server_starts(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("")
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    for bad, why in ((file, "not a folder"), (file / "sub", "is not a folder"), ("", "empty")):
        with pytest.raises(UsageError, match=why):
            command.options(parser.parse_args(["--pg=16", "--route=direct", f"--out={bad}"]))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_out_folder_without_write_permission_is_a_usage_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(UsageError, match="cannot"):
        output.parse_out(str(locked))
    with pytest.raises(UsageError, match="cannot be made"):
        output.parse_out(str(locked / "sub"))


def test_an_out_folder_that_cannot_be_made_is_a_usage_error_even_for_root() -> None:
    # /proc is a folder whose permission bits let root write; making a folder there fails.
    with pytest.raises(UsageError, match="cannot be made"):
        output.parse_out("/proc/leakcheck-out")
    assert not Path("/proc/leakcheck-out").exists()


def _options(*argv: str) -> Options:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return command.options(parser.parse_args(["--pg=16", "--bouncer=1.24", "--database=none", "--out=none", *argv]))


@pytest.mark.parametrize(("given", "message"), [
    ("", "--results is given but empty"),
    (".", "--results: . is a folder"),
    ("pyproject.toml", "exists and is not a leakcheck discovery results file"),
])
def test_a_bad_discover_results_path_is_a_usage_error_before_any_server(given: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _options(f"--results={given}")


def test_a_discovery_results_file_reads_back_what_was_written_and_may_be_written_again(tmp_path: Path) -> None:
    from leakcheck.discover import results_file

    path = tmp_path / "f.json"
    found = {"signature": "setting:work_mem", "known": False, "probes": [], "unlisted": ["session:work_mem"],
             "accepted": None, "steps": ["A:set(work_mem)"], "diffs": []}
    results_file.save(path, results_file.document("PostgreSQL 16.14", "psycopg", "transaction", 1, 60.0, 619, 4,
                                                  "the budget was spent", [found]))
    run = results_file.load(path, "--results")
    assert run.seed == 1 and run.findings[0].unlisted == ("session:work_mem",)
    assert run.findings[0].steps == ("A:set(work_mem)",)
    opts = _options(f"--results={path}")  # an earlier discovery results file may be replaced
    assert opts.results == path


def test_a_discovery_results_file_keeps_what_the_route_showed_before_any_op_apart_from_its_findings(
        tmp_path: Path) -> None:
    import json

    from leakcheck.discover import results_file
    from leakcheck.discover.compare import Diff
    from leakcheck.discover.ops import Who

    path = tmp_path / "f.json"
    start = (Diff(0, Who.A, "reported:DateStyle", "'ISO'", "'ISO, MDY'"),)
    results_file.save(path, results_file.document("PostgreSQL 16.14", "pgjdbc", "transaction", 1, 60.0, 619, 4,
                                                  "the budget was spent", [], start))
    assert json.loads(path.read_text())["before_any_op"] == [
        {"who": "A or B", "key": "reported:DateStyle", "through_pooler": "'ISO'", "direct": "'ISO, MDY'"}]
    assert results_file.load(path, "--results").findings == ()
