"""`leakcheck merge` and the one judging rule it shares with the plugin (pure, tmp_path)."""

from __future__ import annotations

import gzip
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from leakcheck.cli import main as cli
from leakcheck.cli import merge
from leakcheck.cli.exits import EXIT_USAGE
from leakcheck.gate import expectations
from leakcheck.gate.baseline import Expectation
from leakcheck.gate.judge import problem
from leakcheck.model.safe_text import xml_safe
from leakcheck.model.target import Route
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.probes import PROBES
from leakcheck.reports.terminal import render_matrix
from leakcheck.results import results
from leakcheck.results.results import Results
from tests.pure.outcomes import make, with_controls

PROBE = {p.id: p for p in PROBES}
KEY_TZ = "pg16/pgbouncer1.24/psycopg/timezone"
KEY_ST = "pg16/pgbouncer1.24/psycopg/statement_timeout"


def outcome(probe: str, verdict: Verdict, bouncer: str = "1.24.1", route: Route = Route.TRANSACTION) -> Outcome:
    return make(probe, "16.14", bouncer, route, "psycopg", verdict, f"{probe} evidence")


def job(tmp_path: Path, name: str, *outcomes: Outcome) -> Path:
    path = tmp_path / name
    results.save(path, Results(outcomes))
    return path


def gate(tmp_path: Path, verdicts: dict[str, str]) -> Path:
    path = tmp_path / "prod.json"
    path.write_text(json.dumps({"format": 1, "verdicts": verdicts}))
    return path


# --- the rule ----------------------------------------------------------------------------------


def test_a_leak_test_passes_without_expectations_only_when_isolated() -> None:
    assert problem(PROBE["timezone"], outcome("timezone", Verdict.ISOLATED), None) is None
    assert problem(PROBE["timezone"], outcome("timezone", Verdict.LEAKS), None) == "LEAKS: timezone evidence"


def test_a_leak_test_passes_with_expectations_when_it_measured_the_expected_verdict() -> None:
    expected = {KEY_ST: Expectation(Verdict.LEAKS)}
    assert problem(PROBE["statement_timeout"], outcome("statement_timeout", Verdict.LEAKS), expected) is None
    assert problem(PROBE["statement_timeout"], outcome("statement_timeout", Verdict.ISOLATED),
                   expected) == ("the expected leaks went away: measured isolated. Good news; re-record with --update "
                                 "so the gate holds it: statement_timeout evidence")


def test_a_control_must_measure_what_its_route_requires() -> None:
    shared = outcome("statement_timeout", Verdict.LEAKS, bouncer="", route=Route.SHARED)
    assert problem(PROBE["statement_timeout"], shared, None) is None  # session state leaks on one session
    direct = outcome("statement_timeout", Verdict.LEAKS, bouncer="", route=Route.DIRECT)
    message = problem(PROBE["statement_timeout"], direct, None)
    assert message is not None and message.startswith("control (direct) must measure isolated, measured leaks")
    xact = outcome("set_local", Verdict.LEAKS, bouncer="", route=Route.SHARED)
    assert problem(PROBE["set_local"], xact, None) is not None  # transaction state never leaks


@pytest.mark.parametrize("route", list(Route))
def test_an_error_never_passes(route: Route) -> None:
    error = outcome("timezone", Verdict.ERROR, route=route)
    for expected in (None, {KEY_TZ: Expectation(Verdict.ERROR)}, {KEY_TZ: Expectation(Verdict.ISOLATED)}):
        assert problem(PROBE["timezone"], error, expected) is not None


# --- the command -------------------------------------------------------------------------------


def test_merging_prints_the_plugins_matrix_and_passes_when_everything_matches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = job(tmp_path, "a.json", outcome("timezone", Verdict.ISOLATED), outcome("statement_timeout", Verdict.LEAKS))
    b = job(tmp_path, "b.json", outcome("timezone", Verdict.ISOLATED, bouncer="1.26.1"))
    expect = gate(tmp_path, {KEY_TZ: "isolated", KEY_ST: "leaks", "pg16/pgbouncer1.26/psycopg/timezone": "isolated"})
    assert cli.main(["merge", str(a), str(b), f"--expect={expect}"]) == 0
    out = capsys.readouterr().out
    merged = results.combine([("a", results.load(a)), ("b", results.load(b))]).outcomes
    assert render_matrix(merged) in out and "through the pooler, 3 leak tests: 2 isolated, 1 leaks" in out
    assert out.splitlines()[-1] == "leakcheck: 3 passed, 0 failed"


def test_merging_reads_gzip_results_and_a_gzip_baseline_as_the_plain_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = job(tmp_path, "a.json", outcome("timezone", Verdict.ISOLATED), outcome("statement_timeout", Verdict.LEAKS))
    expect = gate(tmp_path, {KEY_TZ: "isolated", KEY_ST: "leaks"})
    assert cli.main(["merge", str(a), f"--expect={expect}"]) == 0
    plain = capsys.readouterr().out
    for path in (a, expect):
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
    assert cli.main(["merge", f"{a}.gz", f"--expect={expect}.gz"]) == 0
    assert capsys.readouterr().out == plain


def test_merging_fails_on_a_difference_and_names_the_test(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = job(tmp_path, "a.json", outcome("timezone", Verdict.LEAKS))
    assert cli.main(["merge", str(a), f"--expect={gate(tmp_path, {KEY_TZ: 'isolated'})}"]) == 1
    out = capsys.readouterr().out
    assert ("FAILED test_leak[pg16.14-pgbouncer1.24.1-psycopg-timezone]: new leaks: expected isolated, "
            "measured leaks") in out
    assert out.splitlines()[-1] == "leakcheck: 0 passed, 1 failed"


def test_merging_without_expectations_passes_only_isolated_leak_tests(tmp_path: Path) -> None:
    assert cli.main(["merge", str(job(tmp_path, "a.json", outcome("timezone", Verdict.ISOLATED)))]) == 0
    assert cli.main(["merge", str(job(tmp_path, "b.json", outcome("timezone", Verdict.LOST)))]) == 1


def test_a_test_that_measured_nothing_fails_the_merge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.json"
    results.save(path, Results((outcome("timezone", Verdict.ISOLATED),),
                               (results.Unmeasured("leakcheck::test_leak[x]", "worker 'gw0' crashed"),)))
    assert cli.main(["merge", str(path)]) == 1
    assert "FAILED leakcheck::test_leak[x]: measured nothing (worker 'gw0' crashed)" in capsys.readouterr().out


def test_results_with_no_outcome_fail_the_merge(tmp_path: Path) -> None:
    assert cli.main(["merge", str(job(tmp_path, "a.json"))]) == 1


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "does not exist"),
        (lambda p: p.write_text("{"), "is not JSON"),
        (lambda p: p.write_text('{"schema": "leakcheck-results", "version": 9, "outcomes": []}'), "is version 9"),
    ],
)
def test_a_missing_or_corrupt_results_file_is_one_line_and_exit_code_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, message: str
) -> None:
    path = tmp_path / "r.json"
    assert callable(make)
    make(path)
    good = job(tmp_path, "good.json", outcome("timezone", Verdict.ISOLATED))
    assert cli.main(["merge", str(good), str(path)]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1 and message in captured.err


def test_conflicting_files_and_a_bad_gate_file_are_usage_errors(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    a = job(tmp_path, "a.json", outcome("timezone", Verdict.ISOLATED))
    b = job(tmp_path, "b.json", outcome("timezone", Verdict.LEAKS))
    assert cli.main(["merge", str(a), str(b)]) == EXIT_USAGE
    assert "disagree on" in capsys.readouterr().err
    assert cli.main(["merge", str(a), f"--expect={gate(tmp_path, {})}"]) == EXIT_USAGE
    assert "holds no verdicts" in capsys.readouterr().err
    with pytest.raises(SystemExit) as caught:  # argparse: at least one file
        cli.main(["merge"])
    assert caught.value.code == EXIT_USAGE


def test_merging_records_as_the_plugin_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = job(tmp_path, "a.json", *with_controls(outcome("timezone", Verdict.ISOLATED)),  # a shared control leaks
            outcome("statement_timeout", Verdict.ERROR))
    target = gate(tmp_path, {"pg15/pgbouncer1.18/psycopg/timezone": "lost", KEY_ST: "leaks"})
    cli.main(["merge", str(a), f"--record={target}"])
    assert expectations.load(target) == {  # the error kept the old value; controls not written
        "pg15/pgbouncer1.18/psycopg/timezone": Expectation(Verdict.LOST), KEY_ST: Expectation(Verdict.LEAKS),
        KEY_TZ: Expectation(Verdict.ISOLATED)}
    assert f"leakcheck: recorded 1 verdicts in {target} (1 kept from the previous file)" in capsys.readouterr().out


def test_a_record_target_that_is_not_a_matrix_stops_the_merge_before_any_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "m.json").write_text("not json")
    a = job(tmp_path, "a.json", outcome("timezone", Verdict.ISOLATED))
    assert cli.main(["merge", str(a), f"--record={tmp_path / 'm.json'}"]) == EXIT_USAGE
    assert capsys.readouterr().out == "" and (tmp_path / "m.json").read_text() == "not json"


def test_merging_writes_junit_with_the_plugins_names_and_properties(tmp_path: Path) -> None:
    a = job(tmp_path, "a.json", outcome("timezone", Verdict.ISOLATED), outcome("statement_timeout", Verdict.LEAKS))
    assert cli.main(["merge", str(a), f"--junitxml={tmp_path / 'out' / 'j.xml'}"]) == 1
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "out" / "j.xml").iter("testcase")}
    leak = cases["test_leak[pg16.14-pgbouncer1.24.1-psycopg-statement_timeout]"]
    props = {p.get("name"): p.get("value") for p in leak.iter("property")}
    assert props["verdict"] == "leaks" and props["bouncer_version"] == "1.24.1" and props["facts"] == "-"
    failure = leak.find("failure")
    assert failure is not None and failure.get("message") == "LEAKS: statement_timeout evidence"
    assert cases["test_leak[pg16.14-pgbouncer1.24.1-psycopg-timezone]"].find("failure") is None
    suite = next(ET.parse(tmp_path / "out" / "j.xml").iter("testsuite"))
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")


#: Every character XML 1.0 cannot hold (and DEL, as pytest escapes it), with a terminal colour code.
CONTROLS = ("".join(chr(c) for c in range(0x20) if chr(c) not in "\t\n\r")
            + "\x7f \x1b[31mred\x1b[0m \ud800 \ufffe\uffff")


def test_junit_from_evidence_holding_control_characters_parses_and_shows_them_escaped(tmp_path: Path) -> None:
    leak = make("statement_timeout", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.LEAKS, CONTROLS)
    broken = make("timezone", "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.ERROR, "x\x00y",
                  details=(("b_reported", "\x1b]0;title\x07"),))
    a = job(tmp_path, "a.json", leak, broken)
    assert cli.main(["merge", str(a), f"--junitxml={tmp_path / 'j.xml'}"]) == 1
    text = (tmp_path / "j.xml").read_text(encoding="utf-8")
    assert [ch for ch in CONTROLS if ch not in " [red0m31]" and ch in text] == []
    cases = {c.get("name"): c for c in ET.fromstring(text).iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases[results.name_of(leak)].iter("property")}
    evidence = props["evidence"] or ""
    assert evidence.startswith("#x00#x01") and "#x1B[31mred" in evidence and "#xD800 #xFFFE#xFFFF" in evidence
    failure = cases[results.name_of(broken)].find("failure")
    assert failure is not None and "x#x00y" in (failure.get("message") or "") and "x#x00y" in (failure.text or "")
    assert {p.get("name"): p.get("value") for p in cases[results.name_of(broken)].iter("property")}[
        "b_reported"] == "#x1B]0;title#x07"


def test_merge_writes_what_xml_forbids_as_pytests_own_junitxml_does() -> None:
    # The plugin's JUnit report is pytest's --junitxml fed by record_property: pytest escapes the
    # properties' values itself, and `leakcheck merge` must say the same about the same outcome.
    from _pytest.junitxml import bin_xml_escape

    assert xml_safe(CONTROLS) == bin_xml_escape(CONTROLS)


# --- cost ----------------------------------------------------------------------------------------


def _calls_to_merge(tmp_path: Path, n: int, shape: str) -> int:
    """Python function calls one `leakcheck merge` (every output file written) makes for `n` outcomes,
    each in a cell of its own: a PostgreSQL version each (`versions`), or one version and a pooler
    column each (`columns`). Counting calls, not seconds: the count is the same on any machine."""
    def pg_and_bouncer(i: int) -> tuple[str, str]:
        return (f"16.{i}", "1.24.1") if shape == "versions" else ("16.14", f"1.{i}.0")

    here = tmp_path / f"{shape}{n}"
    here.mkdir()
    path = job(here, "a.json", *(make("timezone", *pg_and_bouncer(i), Route.TRANSACTION, "psycopg",
                                      Verdict.LEAKS if i % 3 else Verdict.ISOLATED, f"e{i}") for i in range(n)))
    calls = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        merge.run([path], None, here / "m.json", here / "j.xml", say=lambda line: None,
                  report_html=here / "r.html", report_md=here / "r.md")
    finally:
        sys.setprofile(None)
    return calls


@pytest.mark.parametrize("shape", ["versions", "columns"])
def test_merging_four_times_the_outcomes_costs_at_most_four_times_the_calls(tmp_path: Path, shape: str) -> None:
    small, large = _calls_to_merge(tmp_path, 100, shape), _calls_to_merge(tmp_path, 400, shape)
    assert large <= 4.4 * small, f"{small} calls for 100 outcomes, {large} for 400: not linear"
