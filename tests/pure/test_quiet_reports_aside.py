"""Around pytest's summary the plugin sets reports aside, then puts them back: the passed setup and teardown
reports with nothing to print (pytest's failure summary scans them all once per failure, pytest#13360), and
in a plain measurement the leak tests that failed on the verdict their matrix cell shows."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import SimpleNamespace

import pytest

from leakcheck.config.config import Config
from leakcheck.model.target import Route
from leakcheck.model.verdicts import Verdict
from leakcheck.plugin import _QuietReportsAside, folds
from leakcheck.results.results import properties
from tests.pure.outcomes import make


@dataclass
class Report:
    sections: list[tuple[str, str]] = field(default_factory=list)
    nodeid: str = ""
    when: str = "call"
    user_properties: list[tuple[str, str]] = field(default_factory=list)


def failed(route: Route, verdict: Verdict) -> Report:
    """A generated test's failed report, with the properties its outcome gives it."""
    outcome = make("timezone", "16.14", "" if route in (Route.DIRECT, Route.SHARED) else "1.24.1", route,
                   "psycopg", verdict, "e")
    kind = "test_control" if route.is_control else "test_leak"
    return Report(nodeid=f"leakcheck::{kind}[{outcome.target.test_id('timezone')}]",
                  user_properties=properties(outcome))


def test_around_pytests_summary_only_the_quiet_reports_with_something_to_print_are_seen_and_all_come_back() -> None:
    silent, talking = Report(), Report([("Captured stdout teardown", "bye")])
    reporter = SimpleNamespace(stats={"": [silent, talking], "failed": ["a failure"]})
    summary = _QuietReportsAside(fold=False).pytest_terminal_summary(reporter)
    next(summary)  # pytest's own summary runs here
    assert reporter.stats == {"": [talking], "failed": ["a failure"]}
    with pytest.raises(StopIteration):
        summary.send(None)
    assert reporter.stats[""] == [silent, talking]


def test_the_reports_come_back_when_the_summary_fails() -> None:
    silent = Report()
    reporter = SimpleNamespace(stats={"": [silent]})
    summary = _QuietReportsAside(fold=False).pytest_terminal_summary(reporter)
    next(summary)
    with pytest.raises(RuntimeError):
        summary.throw(RuntimeError("the terminal went away"))
    assert reporter.stats[""] == [silent]


def test_a_plain_measurement_leaves_to_the_matrix_only_the_leak_tests_failed_on_the_verdict_their_cell_shows() -> None:
    # 568 such failures were ~1,140 lines of blocks before the matrix and 568 FAILED lines after it.
    leak, lost, broke = failed(Route.TRANSACTION, Verdict.LEAKS), failed(Route.TRANSACTION, Verdict.LOST), \
        failed(Route.TRANSACTION, Verdict.BREAKS)
    error, control = failed(Route.TRANSACTION, Verdict.ERROR), failed(Route.DIRECT, Verdict.LEAKS)
    other = Report(nodeid="tests/test_own.py::test_x")
    reporter = SimpleNamespace(stats={"failed": [leak, error, lost, control, broke, other]})
    aside = _QuietReportsAside(fold=True)
    summary = aside.pytest_terminal_summary(reporter)
    next(summary)
    assert reporter.stats["failed"] == [error, control, other] and aside.folded == 3
    with pytest.raises(StopIteration):
        summary.send(None)
    assert reporter.stats["failed"] == [leak, error, lost, control, broke, other]


def test_with_fold_off_every_failure_is_summarised_as_pytest_does() -> None:
    reporter = SimpleNamespace(stats={"failed": [failed(Route.TRANSACTION, Verdict.LEAKS)]})
    aside = _QuietReportsAside(fold=False)
    summary = aside.pytest_terminal_summary(reporter)
    next(summary)
    assert len(reporter.stats["failed"]) == 1 and aside.folded == 0


@pytest.mark.parametrize(("verbosity", "chars", "typed", "gate", "fold"), [
    (0, "fE", (), False, True), (0, None, (), False, True), (1, "fE", ("-v",), False, False),
    (0, "A", ("-rA",), False, False), (0, "fE", ("-r", "fE"), False, False), (0, "fEs", (), False, False),
    (0, "fE", (), True, False),
], ids=["default", "no-r", "-v", "-rA", "-r fE", "ini -rfEs", "--require"])
def test_the_failures_fold_into_the_matrix_only_at_pytests_default_output_without_a_gate(
        verbosity: int, chars: str | None, typed: tuple[str, ...], gate: bool, fold: bool) -> None:
    config = SimpleNamespace(get_verbosity=lambda: verbosity, getoption=lambda name, default=None: chars,
                             invocation_params=SimpleNamespace(args=("--pg=16", *typed)))
    settings = Config.from_strings({"leakcheck_pg": "16"})
    if gate:
        settings = replace(settings, require=frozenset({"timezone"}))
    assert folds(config, settings) is fold  # type: ignore[arg-type]
