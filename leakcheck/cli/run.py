"""`leakcheck run`: the matrix without pytest, for people who do not use it.

The same options (option_table.OPTIONS, one help text each), the same runner and lanes (matrix_run),
the same judging rule (judge.py, through merge.judge_all), the same reports and files, written by
the same rules: only a run that ran to its end writes, each file in one step. Progress (fetching,
building, starting, each cell as it finishes) goes to stderr; the report to stdout.

Exit codes: 0 the gate passed, 1 it failed (a leak, a difference, an error, a file not written),
4 bad input (one line, before any server starts), 130 interrupted (nothing written).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from leakcheck.cli import merge
from leakcheck.config import preflight
from leakcheck.config.config import Config, repeated
from leakcheck.config.options import FLAG_OPTIONS, FLAGS, LIST_OPTIONS, OPTIONS
from leakcheck.gate.judge import Policy, policy_of
from leakcheck.model.safe_text import terminal_safe
from leakcheck.model.target import Target
from leakcheck.model.verdicts import Outcome
from leakcheck.reports.about import About
from leakcheck.reports.diff import run_diff_lines
from leakcheck.reports.terminal import render_counts, use_color
from leakcheck.results import outputs
from leakcheck.results.results import Results, canonical
from leakcheck.run.matrix import MatrixRun

log = logging.getLogger("leakcheck")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run = sub.add_parser("run", help="run the leak matrix without pytest (same options, reports and gate; exit 0: "
                         "passed, 1: failed, 4: bad input)")
    for flag, ini, help_text, _ in OPTIONS:
        run.add_argument(flag, dest=ini, default=None, help=help_text)
    for flag, ini, help_text in LIST_OPTIONS:
        run.add_argument(flag, dest=ini, default=None, action="append", help=help_text)
    for flag, ini, help_text in FLAG_OPTIONS:
        run.add_argument(flag, dest=ini, default=None, action="store_const", const="yes", help=help_text)
    run.add_argument("--junitxml", type=Path, help="write a JUnit XML report (one test case per outcome)")


def raw_options(args: argparse.Namespace) -> dict[str, str | None]:
    """The options as the plugin reads them (a repeatable option's values joined by newlines)."""
    out: dict[str, str | None] = {}
    for ini in FLAGS:
        value = getattr(args, ini, None)
        out[ini] = repeated(ini, value) if isinstance(value, list) else value
    return out


def main(args: argparse.Namespace) -> int:
    return run_matrix(raw_options(args), args.junitxml)


def run_matrix(raw: dict[str, str | None], junit_to: Path | None = None) -> int:
    """The run of these options (ini keys to values): checked, measured, reported, its files written."""
    config = Config.from_strings(raw, junitxml=junit_to)
    run = MatrixRun(config)
    preflight.check(config, run.choice[0])  # every input, before any server
    policy = policy_of(config)
    outputs.check(outputs.of_config(config, junit_to))
    log.info(run.why)
    try:
        outcomes = measure(run)
    finally:
        run.close()
    return finish(run, outcomes, junit_to, policy)


def measure(run: MatrixRun) -> list[Outcome]:
    """Every selected test's outcome, in the plugin's order, with a progress line per finished cell."""
    work = [(probe, target) for _, probe, target in run.items()]
    for line in run.describe():
        log.info(line)
    run.start(work)
    outcomes: list[Outcome] = []
    cells = list(dict.fromkeys(target for _, target in work))
    done: dict[Target, list[Outcome]] = {}
    for probe, target in work:
        outcome = run.run(probe, target)
        outcomes.append(outcome)
        done.setdefault(target, []).append(outcome)
        if len(done[target]) == sum(1 for _, t in work if t == target):
            log.info(f"[{cells.index(target) + 1}/{len(cells)}] {target.test_id('*')[:-2]}: "
                     f"{render_counts(done[target])}")
    return outcomes


def finish(run: MatrixRun, outcomes: list[Outcome], junit_to: Path | None, policy: Policy) -> int:
    config = run.config
    measured = Results(tuple(canonical(outcomes)))
    judged = merge.judge_all(measured, policy.expected, policy.required, policy.update)
    for line in merge.report(judged, "leakcheck run", use_color(sys.stdout, os.environ)):
        print(line)
    if config.diff is not None and outcomes:
        print(terminal_safe("\n".join(["", *run_diff_lines(outcomes, *config.diff)])))
    lines, written = outputs.write(outputs.of_config(config, junit_to), measured, None,
                                   lambda: merge.junit(judged, policy.expected), About.now(run.describe()))
    for line in lines:
        print(terminal_safe(f"leakcheck: {line}", newlines=False))
    accepted = len(judged.passed_as)
    print(f"leakcheck: {judged.passed - accepted} passed, {accepted} accepted or not applicable, "
          f"{judged.failed} failed")
    return merge.EXIT_FAILED if judged.failed or not outcomes or not written else merge.EXIT_PASSED
