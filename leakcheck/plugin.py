"""The pytest plugin: options, one test item per (cell, driver, probe), JUnit properties, the matrix."""

from __future__ import annotations

import collections
import logging
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from leakcheck.config import preflight
from leakcheck.config.config import Config, matrix_asked
from leakcheck.config.options import add_options
from leakcheck.gate import expectations, record
from leakcheck.gate.diff import run_diff_lines
from leakcheck.gate.judge import Kind
from leakcheck.model.errors import LeakcheckError
from leakcheck.model.verdicts import Target
from leakcheck.probes.base import Probe
from leakcheck.provision.host.system import cache_path
from leakcheck.provision.host.timing import mark
from leakcheck.reports.safe_text import terminal_safe
from leakcheck.reports.terminal import render_counts, render_legend, render_matrix
from leakcheck.results import gather, outputs, results
from leakcheck.run import progress, signals
from leakcheck.run.matrix import MatrixRun

RUN = pytest.StashKey[MatrixRun]()
#: What --record and --results did (or why they did not), for the terminal summary.
RECORDED = pytest.StashKey[list[str]]()
#: Every outcome, from the test reports (a serial run's own, or under pytest-xdist every worker's).
GATHERED = pytest.StashKey[gather.Gathered]()


class LeakFound(Exception):
    """A probe's verdict fails its test; the message is the evidence."""


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def _say(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capman = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        print(line, file=sys.stderr)
        return
    if capman is not None:
        with capman.global_and_fixture_disabled():
            reporter.write_line(line)
    else:
        reporter.write_line(line)


class _ProgressLines(logging.Handler):
    """leakcheck's progress (the `leakcheck` logger) as `leakcheck: <message>` lines on the terminal.

    Only the main thread suspends pytest's capture to write (capture is not thread-safe): a line
    logged by a lane's thread waits for the main thread's next line, or the end of the current test.
    """

    def __init__(self, config: pytest.Config) -> None:
        super().__init__(logging.INFO)
        self.config = config
        self.waiting: collections.deque[str] = collections.deque()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.waiting.append(self.format(record))  # a deque: safe from any thread
            if threading.current_thread() is threading.main_thread():
                self.show_waiting()
        except Exception:  # logging's own way: reported on stderr, never raised into the code that logged
            self.handleError(record)

    def show_waiting(self) -> None:
        """Write the lines logged so far; from the main thread only."""
        while self.waiting:
            _say(self.config, self.waiting.popleft())

    def close(self) -> None:
        self.show_waiting()
        super().close()


#: The handler that shows leakcheck's progress while a matrix run is configured.
SHOWN = pytest.StashKey[_ProgressLines]()


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A matrix-only run writes no `.pytest_cache/` into the folder it is typed in: pytest's cacheprovider
    (its --lf/--nf lists of test ids) is set aside before it is configured, with --stepwise, which needs it,
    as `-p no:cacheprovider` does. A run of tests keeps it."""
    if matrix_only(config) and not config.getoption("cacheshow", None):
        for name in ("cacheprovider", "stepwise", "pytest_stepwise"):
            config.pluginmanager.set_blocked(name)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "servers: needs real PostgreSQL/PgBouncer processes")
    config.addinivalue_line("markers", "containers: needs a Docker engine")
    config.addinivalue_line("markers", "leakcheck: a generated leak-matrix test (test_leak / test_control)")
    try:
        settings = Config.from_pytest(config)
    except LeakcheckError as exc:
        raise pytest.UsageError(terminal_safe(exc)) from None
    if settings is None:
        return
    shown = config.stash[SHOWN] = _ProgressLines(config)
    config.add_cleanup(shown.close)  # last (cleanups run last-in first): shows what is still waiting
    config.add_cleanup(progress.show(shown))  # hidden after run.close, whose lines it shows
    run = MatrixRun(settings)
    try:  # the environment, the server user, TMPDIR, --expect and --record: once, before any server
        run.expected = preflight.check(settings, run.choice[0]).expected
    except LeakcheckError as exc:
        raise pytest.UsageError(terminal_safe(exc)) from None
    # SIGTERM (CI cancelling a job), SIGHUP (terminal closed) and SIGQUIT clean up like Ctrl-C does;
    # installed first so the previous handlers come back only after run.close (cleanups go last-in first).
    config.add_cleanup(signals.install())
    config.stash[RUN] = run
    config.add_cleanup(run.close)
    config.pluginmanager.register(_QuietReportsAside(), "leakcheck-quiet-reports-aside")


@pytest.hookimpl(tryfirst=True)  # a firstresult hook: before the one that returns the report
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    """Show the progress lines that lanes' threads logged during this test phase (from the main thread)."""
    shown = item.config.stash.get(SHOWN, None)
    if shown is not None:
        shown.show_waiting()


def pytest_report_header(config: pytest.Config) -> list[str]:
    run = config.stash.get(RUN, None)
    if run is None:
        return []
    return [f"leakcheck: {run.why}", f"leakcheck: cache {cache_path()} (servers and agents; LEAKCHECK_CACHE)"]


class LeakMatrix(pytest.Collector):
    """The parent node of every generated leak test ('leakcheck::test_leak[...]')."""

    def __init__(self, *, matrix: MatrixRun, generated: list[tuple[str, Probe, Target]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.matrix, self.generated = matrix, generated

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        items: list[pytest.Item | pytest.Collector] = []
        for name, probe, target in self.generated:
            item = LeakItem.from_parent(self, name=name, probe=probe, target=target, matrix=self.matrix)
            item.add_marker("leakcheck")
            items.append(item)
        return items


class LeakItem(pytest.Item):
    def __init__(self, *, probe: Probe, target: Target, matrix: MatrixRun, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.probe, self.target, self.matrix = probe, target, matrix

    def runtest(self) -> None:
        if not self.matrix.started and not hasattr(self.config, "workerinput"):  # under pytest-xdist each
            # worker runs its share serially. The first test starts every selected one in concurrent lanes;
            # each takes its own outcome (the items are listed once: a list per test made the run quadratic).
            self.matrix.start([(i.probe, i.target) for i in self.session.items if isinstance(i, LeakItem)])
        outcome = self.matrix.run(self.probe, self.target)
        self.user_properties.extend(results.properties(outcome))
        if self.matrix.config.expect is not None and not outcome.route.is_control:
            self.user_properties.append(("matrix_key", expectations.key(outcome)))
        judged = self.matrix.judge(self.probe, outcome)
        if judged.kind is Kind.FAILED:
            raise LeakFound(judged.message)
        if judged.kind is Kind.ACCEPTED:  # an expected failure: the baseline or the policy accepts it
            pytest.xfail(terminal_safe(judged.message))  # pytest prints it: server text, made inert
        if judged.kind is Kind.NOT_APPLICABLE:
            pytest.skip(terminal_safe(judged.message))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        """The evidence of a failed verdict or of an accepted one (xfail: its message, without pytest's
        traceback, whose source parsing per item made a gate's end quadratic-slow), or pytest's own report
        of anything else (a start failure's log tail, a driver's error): each quotes servers, so it reaches
        the terminal made inert."""
        if isinstance(excinfo.value, LeakFound | pytest.xfail.Exception):
            return terminal_safe(excinfo.value)
        return terminal_safe(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"leakcheck {self.name}"


def matrix_only(config: pytest.Config) -> bool:
    """Whether this session runs the leak matrix and nothing else: a matrix option and no paths. Neither
    the ini's `testpaths` (this repository's own tests/) nor the folder it is typed in (a clone's parent,
    a project of the team's) are collected then. Name paths to run both (`pytest tests --pg=16`)."""
    return matrix_asked(config) and config.args_source is not pytest.Config.ArgsSource.ARGS


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A matrix run given no paths collects no test file, wherever it is typed (`matrix_only`)."""
    return True if matrix_only(config) else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    run = config.stash.get(RUN, None)
    if run is None:
        return
    try:
        generated = list(run.items())  # resolves every version: bad input stops the run here
    except LeakcheckError as exc:
        raise pytest.UsageError(terminal_safe(exc)) from None
    # genitems reports the collection like any other, so counts, -k and --collect-only see the tests.
    matrix = LeakMatrix.from_parent(session, name="leakcheck", nodeid="leakcheck", matrix=run, generated=generated)
    items.extend(session.genitems(matrix))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Check the --results path before anything starts; gather outcomes from the test reports.

    Under pytest-xdist only the controller does either: it gets every worker's reports and writes.
    """
    config = session.config
    run = config.stash.get(RUN, None)
    if run is None or gather.is_worker(config):
        return
    try:
        outputs.check(outputs.of_config(run.config))
    except LeakcheckError as exc:
        raise pytest.UsageError(terminal_safe(exc)) from None
    config.stash[GATHERED] = gather.Gathered()
    config.pluginmanager.register(config.stash[GATHERED], gather.NAME)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """--record, --results, --report-html and --report-md, from every test report: written only after
    a run that ran its tests to the end, by the controller (or the serial process), never by an xdist
    worker; a failed write is one line and exit 1."""
    config = session.config
    run = config.stash.get(RUN, None)
    if run is None:
        return
    mark("session finish")
    if gather.is_worker(config):  # the controller writes; it gets this worker's outcomes in its reports
        config.workeroutput[gather.WORKER_OUTPUT_KEY] = run.describe()  # type: ignore[attr-defined]
        return
    gathered = config.stash.get(GATHERED, gather.Gathered())
    reason = record.not_written(int(exitstatus), bool(session.shouldstop))
    lines, written = outputs.write(outputs.of_config(run.config), gathered.results(), reason)
    config.stash[RECORDED] = lines
    if not written and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


class _QuietReportsAside:
    """pytest's summary of failures (and of passes, with -rA) looks for each test's teardown output by
    scanning every passed setup and teardown report (TerminalReporter._get_teardown_reports, pytest#13360):
    568 failures of 2,304 tests took 2 s, quadratic. Around pytest's summary the reports with nothing
    to print are set aside, then put back: the same output, without the scan."""

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Any:
        stats = getattr(terminalreporter, "stats", None)
        quiet = stats.get("") if isinstance(stats, dict) else None
        if quiet:
            stats[""] = [report for report in quiet if getattr(report, "sections", None)]  # type: ignore[index]
        try:
            return (yield)
        finally:
            if quiet:
                stats[""] = quiet  # type: ignore[index]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    run = config.stash.get(RUN, None)
    gathered = config.stash.get(GATHERED, None)
    if run is None or gathered is None:
        return
    outcomes = gathered.outcomes
    if outcomes:
        terminalreporter.write_sep("=", "leakcheck matrix")
        for line in run.describe() or gathered.descriptions:  # a controller starts no server: its workers'
            terminalreporter.write_line(terminal_safe(line, newlines=False))
        terminalreporter.write_line("")
        # Colour when pytest's own terminal writer uses markup (--color, NO_COLOR, FORCE_COLOR, a tty).
        color = config.get_terminal_writer().hasmarkup
        terminalreporter.write(render_matrix(outcomes, color=color))
        terminalreporter.write_line(f"verdicts: {render_counts(outcomes)}")
        terminalreporter.write(render_legend(outcomes, color=color))
    unmeasured = gathered.unmeasured
    if unmeasured:
        terminalreporter.write_line(terminal_safe(f"leakcheck: {len(unmeasured)} leak tests failed before measuring "
                                                  f"anything, e.g. {unmeasured[0].test}: {unmeasured[0].why}",
                                                  newlines=False))
    for line in config.stash.get(RECORDED, []):
        terminalreporter.write_line(terminal_safe(f"leakcheck: {line}", newlines=False))
    if run.config.diff is not None and outcomes:
        terminalreporter.write_sep("=", "leakcheck diff")
        for line in run_diff_lines(outcomes, *run.config.diff):
            terminalreporter.write_line(terminal_safe(line, newlines=False))
