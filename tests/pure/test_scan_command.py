"""`leakcheck scan PATH... --results=FILE`: the exit code, the reports, and bad input refused in one line."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import cast

import pytest

from leakcheck.cli.main import main
from leakcheck.model.target import Route
from leakcheck.model.verdicts import Fact, Verdict
from leakcheck.results.results import Results, dumps
from leakcheck.scan.verdicts import FAIL_ON, fails
from tests.pure.outcomes import make

LOG = """\
2026-12-01 10:00:00.001 UTC [101] LOG:  statement: SET statement_timeout = 5000
2026-12-01 10:00:00.002 UTC [101] LOG:  statement: BEGIN
2026-12-01 10:00:00.003 UTC [101] LOG:  statement: SET LOCAL search_path = app
2026-12-01 10:00:00.004 UTC [101] LOG:  statement: COMMIT
2026-12-01 10:00:00.005 UTC [102] LOG:  execute S_1: SELECT id FROM orders WHERE id = $1
2026-12-01 10:00:00.006 UTC [102] LOG:  statement: LOAD 'auto_explain'
"""
CLEAN = """\
2026-12-01 10:00:00.001 UTC [101] LOG:  statement: BEGIN
2026-12-01 10:00:00.002 UTC [101] LOG:  execute <unnamed>: SELECT id FROM orders WHERE id = $1
2026-12-01 10:00:00.003 UTC [101] LOG:  statement: SELECT pg_advisory_xact_lock(7)
2026-12-01 10:00:00.004 UTC [101] LOG:  statement: COMMIT
"""


def _results(tmp_path: Path, protocol: Verdict = Verdict.BREAKS, with_controls: bool = True) -> Path:
    outcomes = []
    for bouncer in ("1.24.1", "1.26.1"):
        for probe, verdict, facts in (("statement_timeout", Verdict.LEAKS, (Fact.LEAKED,)),
                                      ("set_local", Verdict.ISOLATED, ()),
                                      ("advisory_xact_lock", Verdict.ISOLATED, ()),
                                      ("protocol_prepare", protocol if bouncer == "1.24.1" else Verdict.ISOLATED,
                                       (Fact.BROKE,) if protocol is Verdict.BREAKS and bouncer == "1.24.1" else ()),
                                      ("protocol_prepare_moved", Verdict.ISOLATED, ()),
                                      ("prepared_disclosure", Verdict.ISOLATED, ())):
            outcomes.append(make(probe, "16.14", bouncer, Route.TRANSACTION, "psycopg", verdict, f"{probe} said so",
                                 driver_version="3.3.9", facts=facts))
            if with_controls:
                outcomes.append(make(probe, "16.14", bouncer, Route.SESSION, "psycopg", Verdict.ISOLATED, "s",
                                     driver_version="3.3.9"))
    outcomes.append(make("statement_timeout", "18.4", "1.26.1", Route.TRANSACTION, "psycopg", Verdict.ISOLATED, "x",
                         driver_version="3.3.9"))
    path = tmp_path / "results.json"
    path.write_text(dumps(Results(tuple(outcomes))))
    return path


def _log(tmp_path: Path, text: str = LOG, name: str = "postgresql.log") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _scan(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(["scan", *argv])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_log_with_session_state_that_leaks_on_the_target_cells_exits_1_with_each_class(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _scan([f"--results={_results(tmp_path)}", "--pg=16", str(_log(tmp_path))], capsys)
    assert code == 1
    assert "AFFECTED: SET statement_timeout (session), 1 statement" in out
    assert "ok: SET LOCAL search_path (transaction)" in out
    assert "AFFECTED: protocol-level prepared statements (named as pgjdbc's)" in out
    assert "no probe: LOAD (session)" in out
    assert "(1) pg16.14/pgbouncer1.24.1/psycopg3.3.9" in out and "pg18.4" not in out  # --pg=16 chose the cells
    assert "SET statement_timeout = $1" in out and "postgresql.log:1" in out
    assert out.rstrip().endswith("--fail-on=leaks); 1 no probe measures")


def test_a_log_with_nothing_that_fails_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _scan([f"--results={_results(tmp_path)}", str(_log(tmp_path, CLEAN))], capsys)
    assert code == 0, out + err
    assert "ok: pg_advisory_xact_lock (transaction)" in out and "0 of 1 class affected" in out


def test_a_log_with_no_session_effect_at_all_exits_0_without_verdicts(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    plain = "2026-12-01 10:00:00.001 UTC [1] LOG:  statement: SELECT 1\n"
    code, out, _ = _scan([f"--results={_results(tmp_path)}", str(_log(tmp_path, plain))], capsys)
    assert code == 0 and "0 of 0 classes affected" in out


@pytest.mark.parametrize(("fail_on", "protocol", "code"), [
    ("leaks", Verdict.ISOLATED, 1),  # statement_timeout leaks
    ("breaks", Verdict.ISOLATED, 0),  # a leak is below the threshold
    ("breaks", Verdict.BREAKS, 1),  # protocol_prepare breaks on 1.24
    ("lost-write", Verdict.BREAKS, 0),  # no lost write measured
])
def test_fail_on_is_a_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str], fail_on: str, protocol: Verdict,
                                code: int) -> None:
    results = _results(tmp_path, protocol)
    got, out, _ = _scan([f"--results={results}", f"--fail-on={fail_on}", str(_log(tmp_path))], capsys)
    assert got == code, out


def test_a_lost_write_fails_every_threshold_and_a_leak_only_the_lowest() -> None:
    lost_write = cast(Fact, "lost_write")  # issue 24's fact, as results files will name it
    written = make("protocol_prepare", "16.14", "1.24.1", Route.TRANSACTION, "pdo", Verdict.ISOLATED, "e",
                   facts=(lost_write,))
    leak = make("statement_timeout", "16.14", "1.24.1", Route.TRANSACTION, "pdo", Verdict.LEAKS, "e",
                facts=(Fact.LEAKED,))
    broke = make("protocol_prepare", "16.14", "1.18.0", Route.TRANSACTION, "pdo", Verdict.BREAKS, "e",
                 facts=(Fact.BROKE,))
    assert [fails(written, t) for t in FAIL_ON] == [True, True, True]
    assert [fails(leak, t) for t in FAIL_ON] == [True, False, False]
    assert [fails(broke, t) for t in FAIL_ON] == [True, True, False]


def test_an_error_on_a_target_cell_fails_the_scan_at_any_threshold(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    results = _results(tmp_path, Verdict.ERROR)
    code, out, _ = _scan([f"--results={results}", "--fail-on=lost-write", str(_log(tmp_path))], capsys)
    assert code == 1 and "ERROR: protocol-level prepared statements (named as pgjdbc's)" in out
    assert "0 of 4 classes affected on 3 cells (--fail-on=lost-write); 1 could not be measured (an error)" in out


def test_a_failed_control_of_a_mapped_probe_fails_the_scan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(_results(tmp_path).read_text())
    for o in data["outcomes"]:
        if o["probe"] == "set_local" and o["route"] == "session":
            o["verdict"], o["facts"] = "leaks", ["leaked"]
    path = tmp_path / "controls.json"
    path.write_text(json.dumps(data))
    code, out, _ = _scan([f"--results={path}", "--fail-on=lost-write", str(_log(tmp_path, CLEAN + LOG))], capsys)
    assert code == 1 and "PROBLEM test_control[pg16.14-pgbouncer1.24.1-session-psycopg3.3.9-set_local]" in out


def test_the_reports_say_the_same_in_markdown_html_json_and_junit(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    md, page, data, junit = (tmp_path / n for n in ("s.md", "s.html", "s.json", "s.xml"))
    code, _, _ = _scan([f"--results={_results(tmp_path)}", "--pg=16", str(_log(tmp_path)), f"--report-md={md}",
                        f"--report-html={page}", f"--report-json={data}", f"--junitxml={junit}"], capsys)
    assert code == 1
    assert "### **AFFECTED**: SET statement\\_timeout (session), 1 statement" in md.read_text()
    assert "| statement\\_timeout | **LEAKS** | **LEAKS** |" in md.read_text()
    html = page.read_text()
    assert 'data-class="set:statement_timeout" data-status="affected"' in html and "<script" not in html
    assert "default-src 'none'" in html
    said = json.loads(data.read_text())
    assert said["schema"] == "leakcheck-scan" and said["failed"] is True
    classes = {c["key"]: c for c in said["classes"]}
    assert classes["set:statement_timeout"]["status"] == "affected"
    assert classes["load"]["status"] == "no probe" and classes["load"]["probes"] == []
    assert classes["set_local:search_path"]["statements"][0]["sources"] == [f"{tmp_path}/postgresql.log:3"]
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["set:statement_timeout[pg16.14/pgbouncer1.24.1/psycopg3.3.9]"].find("failure") is not None
    assert cases["set_local:search_path[pg16.14/pgbouncer1.24.1/psycopg3.3.9]"].find("failure") is None
    assert cases["load"].find("skipped") is not None
    assert suite.get("tests") == str(len(cases))


def test_a_pg_stat_statements_export_is_scanned_as_a_log_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    export = tmp_path / "pgss.csv"
    export.write_text('queryid,calls,query\n11,40,SET statement_timeout = $1\n12,9,"SELECT 1"\n')
    code, out, _ = _scan([f"--results={_results(tmp_path)}", str(export)], capsys)
    assert code == 1 and "x40" in out and f"{export}: queryid 11" in out and "49 statements read" in out


@pytest.mark.parametrize(("argv", "said"), [
    ([], "scan needs a PATH"),
    (["LOG"], "scan needs the target cells"),
    (["--results=RESULTS", "--fail-on=everything", "LOG"], "--fail-on='everything' is not valid"),
    (["--results=RESULTS", "NOWHERE"], "does not exist"),
    (["--results=RESULTS", "--pg=sixteen", "LOG"], "--pg"),
    (["--results=LOG", "LOG"], "is not JSON"),
    (["--results=RESULTS", "--report-md=LOG", "LOG"], "--report-md=.* is an input"),
    (["--results=RESULTS", "--run", "LOG"], "--run runs the matrix of a repository"),
    (["--results=RESULTS", "--pg=/opt/pg16/bin", "LOG"], "with --results the cells are chosen by version"),
    (["--results=RESULTS", "--pg=17", "LOG"], "holds no outcome through a pooler for the target cells"),
    (["--results=RESULTS", "EMPTY"], "is empty"),
    (["--results=RESULTS", "PROSE"], "is not a PostgreSQL log"),
    (["--results=RESULTS", "NOSTATEMENT"], "no statement in"),
    (["--results=RESULTS", "BROKEN"], "broken.json:2 is not a JSON object"),
])
def test_bad_input_is_one_line_and_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                          said: str) -> None:
    files = {"RESULTS": _results(tmp_path), "LOG": _log(tmp_path), "NOWHERE": tmp_path / "nowhere.log",
             "EMPTY": _log(tmp_path, "", "empty.log"), "PROSE": _log(tmp_path, "hello, world\n", "prose.txt"),
             "NOSTATEMENT": _log(tmp_path, "2026-12-01 10:00:00 UTC [1] LOG:  checkpoint starting: time\n", "n.log"),
             "BROKEN": _log(tmp_path, '{"query": "SELECT 1"}\n{"query": \n', "broken.json")}
    for key in sorted(files, key=len, reverse=True):
        argv = [a.replace(key, str(files[key])) for a in argv]
    code, out, err = _scan(argv, capsys)
    assert code == 4, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("leakcheck: error: "), err
    import re

    assert re.search(said, lines[0]), lines[0]
    assert out == ""
