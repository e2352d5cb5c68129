"""Writing the reports: the JSON report's advice, --report-html/--report-md at the end of a run and of merge."""

from __future__ import annotations

import importlib.metadata
import json
import re
from pathlib import Path

import pytest

from leakcheck.cli import main as cli
from leakcheck.cli.exits import EXIT_USAGE
from leakcheck.config.config import Config
from leakcheck.config.options import FLAGS
from leakcheck.model.errors import UsageError
from leakcheck.model.target import Route
from leakcheck.model.verdicts import Fact, Outcome, Verdict
from leakcheck.reports import output
from leakcheck.results import results
from leakcheck.results.results import Results
from tests.pure.outcomes import make


def outcomes() -> tuple[Outcome, ...]:
    return (make("statement_timeout", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.LEAKS, "A: SET",
                 facts=(Fact.LEAKED,)),
            make("timezone", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.ISOLATED, "tz"),
            make("timezone", "16.14", "", Route.SHARED, "psycopg", Verdict.LEAKS, "shared"))


# --- the JSON report -------------------------------------------------------------------------------


def test_the_results_file_carries_advice_per_outcome_within_its_version() -> None:
    data = json.loads(results.dumps(Results(outcomes())))
    assert data["version"] == results.WITHOUT_PAIRS  # no pair among them: readable by a leakcheck of version 3
    advice = {(o["probe"], o["route"]): o["advice"] for o in data["outcomes"]}
    assert advice[("statement_timeout", "transaction")].startswith("Set statement_timeout per transaction")
    assert advice[("timezone", "transaction")] is None and advice[("timezone", "shared")] is None


def test_a_results_file_without_advice_reads_the_same() -> None:
    data = json.loads(results.dumps(Results(outcomes())))
    for o in data["outcomes"]:
        del o["advice"]
    assert results.parse(data, "r.json") == results.parse(json.loads(results.dumps(Results(outcomes()))), "r.json")


# --- the files -------------------------------------------------------------------------------------


def test_both_reports_are_written_in_one_step_each(tmp_path: Path) -> None:
    html, md = tmp_path / "out" / "r.html", tmp_path / "r.md"
    lines, ok = output.write_all(outcomes(), html, md, None)
    assert ok and lines == [f"wrote the HTML report to {html}", f"wrote the Markdown report to {md}"]
    assert html.read_text().startswith("<!doctype html>") and md.read_text().startswith("## leakcheck")
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["r.html", "r.md"]  # no temp file left


def test_a_run_that_did_not_finish_or_measured_nothing_writes_no_report(tmp_path: Path) -> None:
    html = tmp_path / "r.html"
    html.write_text("before")
    lines, ok = output.write_all(outcomes(), html, None, "the run was interrupted")
    assert ok and lines == [f"{html} not written: the run was interrupted (the file is unchanged)"]
    assert html.read_text() == "before"
    lines, _ = output.write_all((), None, tmp_path / "r.md", None)
    assert lines == [f"{tmp_path / 'r.md'} not written: no leak test or control ran"]


def test_a_failed_write_is_one_line_and_fails(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    lines, ok = output.write_all(outcomes(), tmp_path / "f" / "r.html", None, None)
    assert not ok and lines[0].startswith(f"{tmp_path / 'f' / 'r.html'} not written: writing it failed")


@pytest.mark.parametrize("option", [output.HTML_OPTION, output.MD_OPTION])
def test_a_path_that_cannot_be_written_is_one_usage_error_naming_the_option(tmp_path: Path, option: str) -> None:
    with pytest.raises(UsageError, match=f"^{option}: .* is a folder"):
        output.check_target(tmp_path, option)
    (tmp_path / "f").write_text("")
    with pytest.raises(UsageError, match=f"^{option}: cannot create .*: .* is a file"):
        output.check_target(tmp_path / "f" / "r.html", option)


def test_the_options_are_flags_and_ini_keys_like_the_others() -> None:
    assert FLAGS["leakcheck_report_html"] == "--report-html" and FLAGS["leakcheck_report_md"] == "--report-md"
    config = Config.from_strings({"leakcheck_pg": "16", "leakcheck_report_html": "r.html",
                                  "leakcheck_report_md": "out/r.md"})
    assert (config.report_html, config.report_md) == (Path("r.html"), Path("out/r.md"))
    with pytest.raises(UsageError, match="--report-md is given but empty"):
        Config.from_strings({"leakcheck_pg": "16", "leakcheck_report_md": " "})


# --- leakcheck merge ---------------------------------------------------------------------------------


def test_merge_writes_the_reports_it_is_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.json"
    results.save(path, Results(outcomes()))
    html, md = tmp_path / "m.html", tmp_path / "m.md"
    assert cli.main(["merge", str(path), f"--report-html={html}", f"--report-md={md}"]) == 1  # a leak fails
    out = capsys.readouterr().out
    assert f"leakcheck: wrote the HTML report to {html}" in out
    assert f"leakcheck: wrote the Markdown report to {md}" in out
    assert 'data-probe="statement_timeout"' in html.read_text() and "statement\\_timeout" in md.read_text()
    assert "legend:" in out and "\x1b[" not in out  # not a terminal: no colour
    # The header: when and by which leakcheck they were merged, and the releases the results name.
    release = importlib.metadata.version("leakcheck")
    head = md.read_text().split("verdicts:")[0]
    when = r"20\d\d-\d\d-\d\d \d\d:\d\d UTC"
    assert re.search(rf"merged {when} by leakcheck {re.escape(release)} from 1 results file measured, on:", head)
    assert "- PostgreSQL 16.14 (where each came from is not in a results file)" in head
    assert "- PgBouncer 1.24.1" in head
    assert f"by leakcheck {release} from 1 results file measured, on:</p>" in html.read_text()


def test_merge_refuses_a_bad_report_path_before_printing_anything(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.json"
    results.save(path, Results(outcomes()))
    assert cli.main(["merge", str(path), f"--report-md={tmp_path}"]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == "" and f"--report-md: {tmp_path} is a folder" in captured.err


def test_a_file_a_command_cannot_write_ends_it_with_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    from leakcheck.cli.exits import guarded

    def full_disk() -> int:
        raise OSError(28, "No space left on device", "findings/x.sql")

    assert guarded(full_disk) == 1
    assert capsys.readouterr().err == ("leakcheck: error: could not use findings/x.sql: No space left on device; "
                                       "check the path and the disk\n")
