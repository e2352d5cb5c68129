"""`leakcheck scan`: the parser, and the two things only the CLI may do for it: measure the probes a
workload maps to with `leakcheck run`'s own runner (cli/run.py), and run the matrix of a repository's
settings (`--repo --run`). The scan itself is leakcheck/scan/command.py."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from leakcheck.cli import run as run_cli
from leakcheck.config import preflight
from leakcheck.config.config import Config
from leakcheck.model.errors import UsageError
from leakcheck.model.safe_text import terminal_safe
from leakcheck.model.verdicts import Outcome
from leakcheck.reports.terminal import use_color
from leakcheck.run.matrix import MatrixRun, choose_backend
from leakcheck.scan import command, knobs

log = logging.getLogger("leakcheck")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    scan = sub.add_parser("scan", help="classify the session effect of every statement your application sends "
                          "(PostgreSQL logs, a pg_stat_statements export, .sql files) and give each class its "
                          "probes' verdicts on your cells; or --repo: your repository's pooler knobs as driver-set "
                          "axes (exit 0: nothing affected, 1: affected, 4: bad input)")
    command.add_arguments(scan)


def _measure(raw: command.MatrixOptions) -> Sequence[Outcome]:
    config = Config.from_strings(raw)
    run = MatrixRun(config)
    log.info(run.why)
    try:
        return run_cli.measure(run)
    finally:
        run.close()


def _repo(opts: command.Options) -> int:
    assert opts.repo is not None
    found = knobs.scan_repo(opts.repo)
    for line in knobs.proposal(found):
        print(terminal_safe(line, newlines=False))
    if not opts.run:
        return command.EXIT_CLEAN
    runnable = [a for a in knobs.axes(found) if a.runnable]
    if not runnable:
        raise UsageError(f"--run: {opts.repo} sets no knob of a driver this leakcheck ships (see above); nothing to "
                         "run")
    given = opts.matrix.get("leakcheck_driver_set")
    proposed = knobs.run_options(runnable)
    raw = {**opts.matrix, **proposed,
           "leakcheck_driver_set": "\n".join(filter(None, [given, proposed["leakcheck_driver_set"]]))}
    return run_cli.run_matrix(raw)


def main(args: argparse.Namespace) -> int:
    opts = command.options(args)
    if opts.repo is not None:
        return _repo(opts)
    if opts.results is None:  # the environment checked before the inputs are read, as before any server starts
        config = Config.from_strings(opts.matrix)
        preflight.check(config, choose_backend(config.backend, config.pooled_dsn)[0])
    return command.run(opts, _measure, color=use_color(sys.stdout, os.environ))
