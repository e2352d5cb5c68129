"""Writing the reports at the end of a run (`--report-html`, `--report-md`) or of `leakcheck merge`.

The same rules as `--results`: each path is checked before anything starts (a one-line UsageError);
only a run that ran to its end writes, in one step (config/output_files.py); a failed write is one line
and makes the run fail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from leakcheck.config.output_files import check_writable, write_atomic
from leakcheck.model.safe_text import encodable
from leakcheck.model.verdicts import Outcome
from leakcheck.reports.about import About
from leakcheck.reports.html import render_html
from leakcheck.reports.markdown import render_markdown

HTML_OPTION, MD_OPTION = "--report-html", "--report-md"
_EXAMPLES = {HTML_OPTION: "leakcheck.html", MD_OPTION: "leakcheck.md"}


def check_target(path: Path, option: str) -> None:
    """Before the run: a file can be written at `path` (a file there is replaced: it is a report)."""
    check_writable(path, option, _EXAMPLES.get(option, "report"))


def finish(path: Path, render: Callable[[], str], reason: str | None, what: str) -> tuple[list[str], bool]:
    """Write one report: the summary lines, and False when writing failed. `reason` (record.not_written)
    means the run did not run to its end: nothing is written."""
    if reason is not None:
        unchanged = " (the file is unchanged)" if path.exists() else ""
        return [f"{path} not written: {reason}{unchanged}"], True
    try:
        write_atomic(path, encodable(render()))
    except OSError as exc:
        return [f"{path} not written: writing it failed ({exc.strerror or exc}); the file is unchanged"], False
    return [f"wrote the {what} to {path}"], True


def write_all(outcomes: Sequence[Outcome], html: Path | None, md: Path | None,
              reason: str | None, about: About | None = None) -> tuple[list[str], bool]:
    """Both reports, as asked, `about` in their headers; a run with no outcome writes neither (it measured
    nothing)."""
    if reason is None and not outcomes:
        reason = "no leak test or control ran"
    lines: list[str] = []
    ok = True
    for path, render, what in ((html, lambda: render_html(outcomes, about=about), "HTML report"),
                               (md, lambda: render_markdown(outcomes, about=about), "Markdown report")):
        if path is not None:
            said, written = finish(path, render, reason, what)
            lines, ok = lines + said, ok and written
    return lines, ok
