"""pytest's failure summary scans every passed setup and teardown report once per failure (pytest#13360):
the plugin sets aside, around that summary, the reports that have nothing to print, and puts them back."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from leakcheck.plugin import _QuietReportsAside


@dataclass
class Report:
    sections: list[tuple[str, str]] = field(default_factory=list)


def test_around_pytests_summary_only_the_quiet_reports_with_something_to_print_are_seen_and_all_come_back() -> None:
    silent, talking = Report(), Report([("Captured stdout teardown", "bye")])
    reporter = SimpleNamespace(stats={"": [silent, talking], "failed": ["a failure"]})
    summary = _QuietReportsAside().pytest_terminal_summary(reporter)
    next(summary)  # pytest's own summary runs here
    assert reporter.stats == {"": [talking], "failed": ["a failure"]}
    with pytest.raises(StopIteration):
        summary.send(None)
    assert reporter.stats[""] == [silent, talking]


def test_the_reports_come_back_when_the_summary_fails() -> None:
    silent = Report()
    reporter = SimpleNamespace(stats={"": [silent]})
    summary = _QuietReportsAside().pytest_terminal_summary(reporter)
    next(summary)
    with pytest.raises(RuntimeError):
        summary.throw(RuntimeError("the terminal went away"))
    assert reporter.stats[""] == [silent]
