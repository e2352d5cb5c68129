"""The pytest plugin: options, one test item per (cell, driver, probe), JUnit properties, the matrix."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from . import matrices, preflight, record, signals
from .config import Config, add_options
from .errors import LeakcheckError
from .lab import Lab
from .probes import Probe
from .report import render_counts, render_matrix
from .runner import Target
from .verdicts import Route

LAB = pytest.StashKey[Lab]()
#: What --record did (or why it did not), for the terminal summary.
RECORDED = pytest.StashKey[list[str]]()


class LeakFound(Exception):
    """A probe's verdict fails its test; the message is the evidence."""


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def _say(config: pytest.Config, message: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capman = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        print(f"leakcheck: {message}", file=sys.stderr)
        return
    if capman is not None:
        with capman.global_and_fixture_disabled():
            reporter.write_line(f"leakcheck: {message}")
    else:
        reporter.write_line(f"leakcheck: {message}")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs real PostgreSQL/PgBouncer processes")
    config.addinivalue_line("markers", "containers: needs a Docker engine")
    config.addinivalue_line("markers", "leakcheck: a generated leak-matrix test (test_leak / test_control)")
    try:
        settings = Config.from_pytest(config)
    except LeakcheckError as exc:
        raise pytest.UsageError(str(exc)) from None
    if settings is None:
        return
    lab = Lab(settings, progress=lambda m: _say(config, m))
    try:  # the environment, the server user, TMPDIR, --expect and --record: once, before any server
        lab.expected = preflight.check(settings, lab.choice[0]).expected
    except LeakcheckError as exc:
        raise pytest.UsageError(str(exc)) from None
    # SIGTERM (CI cancelling a job), SIGHUP (terminal closed) and SIGQUIT clean up like Ctrl-C does;
    # installed first so the previous handlers come back only after lab.close (cleanups run last-in first).
    config.add_cleanup(signals.install())
    config.stash[LAB] = lab
    config.add_cleanup(lab.close)


def pytest_report_header(config: pytest.Config) -> list[str]:
    lab = config.stash.get(LAB, None)
    return [f"leakcheck: {lab.why}"] if lab is not None else []


class LeakMatrix(pytest.Collector):
    """The parent node of every generated leak test ('leakcheck::test_leak[...]')."""

    def __init__(self, *, lab: Lab, generated: list[tuple[str, Probe, Target]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lab, self.generated = lab, generated

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        items: list[pytest.Item | pytest.Collector] = []
        for name, probe, target in self.generated:
            item = LeakItem.from_parent(self, name=name, probe=probe, target=target, lab=self.lab)
            item.add_marker("leakcheck")
            items.append(item)
        return items


class LeakItem(pytest.Item):
    def __init__(self, *, probe: Probe, target: Target, lab: Lab, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.probe, self.target, self.lab = probe, target, lab

    def runtest(self) -> None:
        outcome = self.lab.run(self.probe, self.target)
        self.user_properties.extend([
            ("probe", outcome.probe), ("pg_version", outcome.pg), ("bouncer_version", outcome.bouncer or "-"),
            ("route", outcome.route.value), ("driver", outcome.driver), ("verdict", outcome.verdict.value),
            ("evidence", outcome.evidence), ("facts", ",".join(outcome.facts) or "-"),
            ("security", str(outcome.security).lower()), *outcome.details,
        ])
        if self.lab.config.expect is not None and not outcome.route.is_control:
            self.user_properties.append(("matrix_key", matrices.key(outcome)))
        problem = self.lab.judge(self.probe, outcome)
        if problem is not None:
            raise LeakFound(problem)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, LeakFound):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"leakcheck {self.name}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    lab = config.stash.get(LAB, None)
    if lab is None:
        return
    try:
        generated = list(lab.items())  # resolves every version: bad input stops the run here
    except LeakcheckError as exc:
        raise pytest.UsageError(str(exc)) from None
    # genitems reports the collection like any other, so counts, -k and --collect-only see the tests.
    matrix = LeakMatrix.from_parent(session, name="leakcheck", nodeid="leakcheck", lab=lab, generated=generated)
    items.extend(session.genitems(matrix))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """--record: write only after a run that ran its tests to the end; a failed write is one line and exit 1."""
    lab = session.config.stash.get(LAB, None)
    if lab is None or lab.config.record is None:
        return
    path = lab.config.record
    reason = record.not_written(int(exitstatus), bool(session.shouldstop))
    if reason is None and not any(o.route is Route.TRANSACTION for o in lab.outcomes):
        reason = "no leak test ran"
    if reason is not None:
        unchanged = " (the file is unchanged)" if path.exists() else ""
        session.config.stash[RECORDED] = [f"{path} not recorded: {reason}{unchanged}"]
        return
    try:
        session.config.stash[RECORDED] = record.save(path, lab.outcomes)
    except (LeakcheckError, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        session.config.stash[RECORDED] = [f"{path} not recorded: writing it failed ({why}); the file is unchanged"]
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lab = config.stash.get(LAB, None)
    if lab is None:
        return
    if lab.outcomes:
        terminalreporter.write_sep("=", "leakcheck matrix")
        for line in lab.describe():
            terminalreporter.write_line(line)
        terminalreporter.write_line("")
        terminalreporter.write(render_matrix(lab.outcomes))
        terminalreporter.write_line(f"verdicts: {render_counts(lab.outcomes)}")
    for line in config.stash.get(RECORDED, []):
        terminalreporter.write_line(f"leakcheck: {line}")
