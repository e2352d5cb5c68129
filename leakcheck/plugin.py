"""The pytest plugin: options, one test item per (cell, driver, probe), JUnit properties, the matrix."""

from __future__ import annotations

import collections
import logging
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from leakcheck.config import preflight
from leakcheck.config.config import Config, matrix_asked
from leakcheck.config.options import add_options
from leakcheck.gate import expectations, record
from leakcheck.gate.judge import Kind, Policy, judge, policy_of
from leakcheck.model.errors import LeakcheckError
from leakcheck.model.safe_text import terminal_safe
from leakcheck.model.target import Route, Target
from leakcheck.model.verdicts import Verdict
from leakcheck.probes.base import Probe
from leakcheck.provision.host.system import cache_path
from leakcheck.provision.host.timing import mark
from leakcheck.reports.about import About
from leakcheck.reports.diff import run_diff_lines
from leakcheck.reports.terminal import render_legend, render_matrix
from leakcheck.results import gather, outputs, results
from leakcheck.run import progress, signals
from leakcheck.run.matrix import MatrixRun

RUN = pytest.StashKey[MatrixRun]()
#: What the leak tests are held to (--expect, --require, --update), read before any server starts.
POLICY = pytest.StashKey[Policy]()
#: What --record and --results did (or why they did not), for the terminal summary.
RECORDED = pytest.StashKey[list[str]]()
#: Every outcome, from the test reports (a serial run's own, or under pytest-xdist every worker's).
GATHERED = pytest.StashKey[gather.Gathered]()
#: What pytest's summary sets aside (and counts) while it is written.
ASIDE = pytest.StashKey["_QuietReportsAside"]()


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
    try:  # the environment, the server user, TMPDIR and --expect: once, before any server
        preflight.check(settings, run.choice[0])
        config.stash[POLICY] = policy_of(settings)
    except LeakcheckError as exc:
        raise pytest.UsageError(terminal_safe(exc)) from None
    # SIGTERM (CI cancelling a job), SIGHUP (terminal closed) and SIGQUIT clean up like Ctrl-C does;
    # installed first so the previous handlers come back only after run.close (cleanups go last-in first).
    config.add_cleanup(signals.install())
    config.stash[RUN] = run
    config.add_cleanup(run.close)
    aside = config.stash[ASIDE] = _QuietReportsAside(folds(config, settings))
    config.pluginmanager.register(aside, "leakcheck-quiet-reports-aside")


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
        judged = judge(self.probe, outcome, self.config.stash[POLICY])
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
    """Check the files the run writes (pytest's own --junitxml too) before anything starts; gather
    outcomes from the test reports.

    Under pytest-xdist only the controller does either: it gets every worker's reports and writes.
    """
    config = session.config
    run = config.stash.get(RUN, None)
    if run is None or gather.is_worker(config):
        return
    try:
        xmlpath = getattr(config.option, "xmlpath", None)  # pytest's own --junitxml, written by pytest
        outputs.check(outputs.of_config(run.config, Path(xmlpath).expanduser() if xmlpath else None))
    except LeakcheckError as exc:
        raise pytest.UsageError(terminal_safe(exc)) from None
    config.stash[GATHERED] = gather.Gathered()
    config.pluginmanager.register(config.stash[GATHERED], gather.NAME)


def stopped_early(session: pytest.Session) -> bool:
    """Whether the session stopped before its last test: Ctrl-C and --stepwise set `shouldstop`, -x and --maxfail
    `shouldfail` (its tests then hold a fraction of the matrix, which --record must not write)."""
    return bool(session.shouldstop or session.shouldfail)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """--record, --results, --report-html and --report-md, from every test report: written only after
    a run that ran its tests to the end, by the controller (or the serial process), never by an xdist
    worker; a failed write is one line and exit 1."""
    config = session.config
    run = config.stash.get(RUN, None)
    if run is None:
        return
    mark("session finish")
    _quiet_unused_hypothesis(config)
    if gather.is_worker(config):  # the controller writes; it gets this worker's outcomes in its reports
        config.workeroutput[gather.WORKER_OUTPUT_KEY] = run.describe()  # type: ignore[attr-defined]
        return
    gathered = config.stash.get(GATHERED, gather.Gathered())
    reason = record.not_written(int(exitstatus), stopped_early(session))
    about = About.now(run.describe() or gathered.descriptions)  # a controller starts no server: its workers'
    lines, written = outputs.write(outputs.of_config(run.config), gathered.results(), reason, about=about)
    config.stash[RECORDED] = lines
    if not written and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


#: hypothesis' pytest plugin (installed with leakcheck[discover]): its terminal summary imports the hypothesis
#: package whether or not a test used it, about 1 s of a matrix's end where bytecode is not cached
#: (PYTHONDONTWRITEBYTECODE: pytest then rewrites the package's asserts at every run).
HYPOTHESIS_PLUGIN = "hypothesispytest"


def _quiet_unused_hypothesis(config: pytest.Config, modules: Mapping[str, object] = sys.modules) -> None:
    """A matrix session in which nothing imported hypothesis (`modules`) has nothing for its summary to say: its
    plugin is unregistered before the summary (a session with a hypothesis test, or discovery, keeps it)."""
    plugin = config.pluginmanager.get_plugin(HYPOTHESIS_PLUGIN)
    if plugin is not None and "hypothesis" not in modules:
        config.pluginmanager.unregister(plugin)


class _QuietReportsAside:
    """Reports set aside around pytest's summary (its failure blocks, and its short summary's FAILED lines),
    then put back, so pytest's counts and exit status are the same:

    - the passed setup and teardown reports with nothing to print: pytest's summary of failures (and of
      passes, with -rA) looks for each test's teardown output by scanning them all (pytest#13360,
      TerminalReporter._get_teardown_reports): 568 failures of 2,304 tests took 2 s, quadratic;
    - in a plain measurement, the leak tests that failed on their measured verdict (`folds`): the matrix
      shows each as its LEAKS, LOST or BREAKS cell, so their blocks and FAILED lines (1,700 lines for the
      default matrix) buried the answer. One line counts them; -v or another -r shows them as pytest does.
    """

    def __init__(self, fold: bool) -> None:
        self.fold = fold
        self.folded = 0  #: how many failed leak tests the summary leaves to the matrix

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Any:
        stats = getattr(terminalreporter, "stats", None)
        aside: dict[str, list[Any]] = {}
        if isinstance(stats, dict):
            quiet = stats.get("")
            if quiet:
                aside[""] = quiet
                stats[""] = [report for report in quiet if getattr(report, "sections", None)]
            failed = stats.get("failed")
            if self.fold and failed:
                shown = [report for report in failed if not _verdict_only(report)]
                self.folded = len(failed) - len(shown)
                if self.folded:
                    aside["failed"] = failed
                    stats["failed"] = shown
        try:
            return (yield)
        finally:
            if isinstance(stats, dict):
                stats.update(aside)


#: Verdicts a plain measurement fails a leak test on, each shown in the matrix as its own cell.
_CELL_VERDICTS = frozenset({Verdict.LEAKS, Verdict.LOST, Verdict.BREAKS})


def folds(config: pytest.Config, settings: Config) -> bool:
    """Whether pytest's summary leaves to the matrix the leak tests that failed on their measured verdict:
    a plain measurement (no --expect, no --require: every problem fails, by design) at pytest's default
    verbosity and -r (f and E, from no -r typed on the command line). A gate's failures (differences, a
    required probe) are few and are its answer: they are shown, as every error, failed control and test
    that measured nothing is."""
    if settings.expect is not None or settings.require is not None:
        return False
    typed = config.invocation_params.args
    asked = any(arg.startswith("-r") or arg == "--report-chars" for arg in typed)  # -rf, -r f, -rA
    chars = set(config.getoption("reportchars", None) or "fE")
    return config.get_verbosity() <= 0 and chars <= {"f", "E"} and not asked


def _verdict_only(report: Any) -> bool:
    """A leak test (the pooled route) that failed on a measured LEAKS, LOST or BREAKS."""
    if getattr(report, "when", None) != "call" or not str(report.nodeid).startswith(f"{gather.PREFIX}test_leak["):
        return False
    outcome = results.from_properties(report.user_properties)
    return outcome is not None and outcome.route is Route.TRANSACTION and outcome.verdict in _CELL_VERDICTS


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The answer first: the matrix through the pooler with its totals, the controls counted apart, the
    legend, then the servers it ran on."""
    run = config.stash.get(RUN, None)
    gathered = config.stash.get(GATHERED, None)
    if run is None or gathered is None:
        return
    outcomes = gathered.outcomes
    if outcomes:
        terminalreporter.write_sep("=", "leakcheck matrix")
        # Colour when pytest's own terminal writer uses markup (--color, NO_COLOR, FORCE_COLOR, a tty).
        color = config.get_terminal_writer().hasmarkup
        terminalreporter.write(render_matrix(outcomes, color=color))
        terminalreporter.write(render_legend(outcomes, color=color))
        for line in run.describe() or gathered.descriptions:  # a controller starts no server: its workers'
            terminalreporter.write_line(terminal_safe(line, newlines=False))
    aside = config.stash.get(ASIDE, None)
    if aside is not None and aside.folded:
        tests = f"{aside.folded} leak test{'s' if aside.folded != 1 else ''}"
        terminalreporter.write_line(f"leakcheck: {tests} failed on the verdict the matrix shows (LEAKS, LOST, BREAKS); "
                                    "the evidence: -v, --report-html or --report-md")
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
