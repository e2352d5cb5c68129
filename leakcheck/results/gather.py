"""The run's outcomes as the test reports carry them: the same in a serial run and under pytest-xdist.

A serial run gets its own tests' reports; pytest-xdist's controller runs no test but gets every
worker's reports (properties included) through `pytest_runtest_logreport`. So the matrix,
--record and --results are built here from reports, never from the memory of the process that
happened to run a test. Workers also hand over what their backend says about the servers
(`WORKER_OUTPUT_KEY` in xdist's `workeroutput`), for the summary's header lines.
"""

from __future__ import annotations

from typing import Any

import pytest

from leakcheck.model.verdicts import Outcome
from leakcheck.results.results import Results, Unmeasured, canonical, from_properties

#: The node ids of generated tests start with the LeakMatrix collector's ('leakcheck::test_leak[...]').
PREFIX = "leakcheck::"
#: Where a worker puts its backend's description lines in xdist's `workeroutput`.
WORKER_OUTPUT_KEY = "leakcheck_describe"
#: The name this plugin object is registered under.
NAME = "leakcheck-gather"


class Gathered:
    """A pytest plugin object (registered per session) collecting outcomes from test reports."""

    def __init__(self) -> None:
        self._outcomes: dict[str, Outcome] = {}  # by node id: a report repeated (teardown) counts once
        self._failed: dict[str, str] = {}
        self.descriptions: list[str] = []  #: the workers' backend lines (xdist only), first seen first

    @property
    def outcomes(self) -> list[Outcome]:
        """Every outcome reported, in `results.canonical` order."""
        return canonical(self._outcomes.values())

    @property
    def unmeasured(self) -> list[Unmeasured]:
        """Generated tests that failed without an outcome (a crashed worker, a failed setup)."""
        return [Unmeasured(test, why) for test, why in sorted(self._failed.items()) if test not in self._outcomes]

    def results(self) -> Results:
        return Results(tuple(self.outcomes), tuple(self.unmeasured))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.nodeid.startswith(PREFIX):
            return
        if report.when == "call":
            outcome = from_properties(report.user_properties)
            if outcome is not None:
                self._outcomes[report.nodeid] = outcome
        if report.failed:
            self._failed.setdefault(report.nodeid, _why(report))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """pytest-xdist: a worker finished; keep the servers it described."""
        lines = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT_KEY, [])
        self.descriptions = list(dict.fromkeys([*self.descriptions, *(str(line) for line in lines)]))


def _why(report: pytest.TestReport) -> str:
    """One line on a failure: the exception line of a traceback (`E   ...`), else the last line."""
    lines = [line.strip() for line in report.longreprtext.strip().splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return (errors or lines or [f"failed in {report.when}"])[0 if errors else -1]


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (its controller writes the reports and files)."""
    return hasattr(config, "workerinput")
