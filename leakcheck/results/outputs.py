"""The files a run writes at its end, in one place for the three ways a run ends: the pytest plugin,
`leakcheck run` and `leakcheck merge`.

`--record` (a baseline), `--results` (every outcome), `--report-html`, `--report-md` and `--junitxml`
(for pytest, pytest writes its own): each target is checked before anything starts (`check`, a one-line
UsageError), each file is written from the same `Results` by the same rule (`write`): only a run that
ran to its end writes, each file in one step; a failed write is one line and makes the run fail. So
`leakcheck merge` of one results file writes what the run that wrote it wrote (the reports' header says
when, and by which leakcheck, each was made).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from leakcheck.config.config import Config
from leakcheck.config.output_files import check_writable, write_atomic
from leakcheck.gate import record
from leakcheck.reports import output
from leakcheck.reports.about import About
from leakcheck.results import results as results_file
from leakcheck.results.results import Results

JUNIT_OPTION = "--junitxml"


@dataclass(frozen=True)
class Outputs:
    """Where a run writes its files (None: not asked for)."""

    record: Path | None = None
    results: Path | None = None
    report_html: Path | None = None
    report_md: Path | None = None
    junit: Path | None = None  #: `leakcheck run` and `merge` only: under pytest, pytest's own --junitxml

    def named(self) -> dict[str, Path | None]:
        """Each target by its option, for messages and the distinct-paths check."""
        return {"--record": self.record, results_file.OPTION: self.results, output.HTML_OPTION: self.report_html,
                output.MD_OPTION: self.report_md, JUNIT_OPTION: self.junit}


def check(outputs: Outputs) -> None:
    """Before the run: every target can be written, and none is something else (one line if not)."""
    if outputs.record is not None:
        record.check_target(outputs.record)
    if outputs.results is not None:
        results_file.check_target(outputs.results)
    for path, option in ((outputs.report_html, output.HTML_OPTION), (outputs.report_md, output.MD_OPTION)):
        if path is not None:
            output.check_target(path, option)
    if outputs.junit is not None:
        check_writable(outputs.junit, JUNIT_OPTION, "leakcheck.xml")


def write(outputs: Outputs, measured: Results, reason: str | None,
          junit: Callable[[], str] | None = None, about: About | None = None) -> tuple[list[str], bool]:
    """Every file asked for, from `measured`: the summary lines, and False when a write failed.

    `reason` (record.not_written): the run did not run to its end, so nothing is written. `junit`
    renders the JUnit XML (the caller judged the outcomes); it is asked for only when there is a target.
    `about`: the reports' header (when, which leakcheck, which servers).
    """
    lines: list[str] = []
    ok = True
    if outputs.record is not None:
        said, written = record.finish(outputs.record, measured.outcomes, reason)
        lines, ok = lines + said, ok and written
    if outputs.results is not None:
        said, written = results_file.finish(outputs.results, measured, reason)
        lines, ok = lines + said, ok and written
    said, written = output.write_all(measured.outcomes, outputs.report_html, outputs.report_md, reason, about)
    lines, ok = lines + said, ok and written
    if outputs.junit is not None and junit is not None:
        if reason is not None:
            lines.append(f"{outputs.junit} not written: {reason}")
        else:
            try:
                write_atomic(outputs.junit, junit())
                lines.append(f"wrote JUnit to {outputs.junit}")
            except OSError as exc:
                lines.append(f"{outputs.junit} not written: writing it failed ({exc.strerror or exc})")
                ok = False
    return lines, ok


def of_config(config: Config, junit: Path | None = None) -> Outputs:
    """The targets a run's options name."""
    return Outputs(record=config.record, results=config.results, report_html=config.report_html,
                   report_md=config.report_md, junit=junit)
