"""`leakcheck prepare`: resolve, fetch and build the servers a matrix needs, ahead of time.
`leakcheck merge`: several runs' --results files as one report and one gate decision.
`leakcheck discover`: search for session-state leaks no probe lists (hypothesis; see README).
`leakcheck cache-dir`, `fetch-pg`, `fetch-pgbouncer-tarball`: for scripts that build local images.

The matrix itself runs under pytest (`pytest --pg=16,18 --bouncer=1.24,1.26`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

from . import cli_images, merge, preflight, progress
from .config import DEFAULT_BOUNCER, DEFAULT_PG, Config
from .discover import command as discover
from .exits import EXIT_USAGE, guarded
from .matrix_run import make_backend


class _Parser(argparse.ArgumentParser):
    """argparse, except that a usage error is one line and exit code 4, as in the pytest plugin."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"leakcheck: error: {message}; see `{self.prog} --help`\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="leakcheck", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    prepare = sub.add_parser("prepare", help="fetch/build and cache PostgreSQL and PgBouncer binaries")
    prepare.add_argument("--pg", default=DEFAULT_PG, help=f"PostgreSQL versions (default {DEFAULT_PG})")
    prepare.add_argument("--bouncer", default=DEFAULT_BOUNCER, help=f"PgBouncer versions (default {DEFAULT_BOUNCER})")
    prepare.add_argument("--backend", default="native", help="native or containers (default native)")
    merging = sub.add_parser("merge", help="merge --results files of several runs into one report and one gate "
                             "decision (exit 0: all passed, 1: some failed, 4: bad input)")
    merging.add_argument("results", nargs="+", type=Path, metavar="RESULTS.json",
                         help="files written by pytest --results (e.g. one per CI job)")
    merging.add_argument("--expect", type=Path, help="a matrices/*.json of expected verdicts, as pytest --expect")
    merging.add_argument("--record", type=Path, help="merge the measured verdicts into this matrices/*.json file, "
                         "as pytest --record")
    merging.add_argument("--junitxml", type=Path, help="write a JUnit XML report (one test case per outcome)")
    discovering = sub.add_parser("discover", help="search for session-state leaks no probe lists (exit 0: nothing "
                                 "new, 1: new findings, 3: could not measure, 4: bad input)")
    discover.add_arguments(discovering)
    cli_images.add_parsers(sub)
    args = parser.parse_args(argv)
    with progress.on_stderr():  # "leakcheck: fetching ..." lines; results go to stdout
        if args.command == "merge":
            return _merge(args)
        if args.command == "discover":
            return guarded(lambda: discover.run(discover.options(args)))
        if args.command in cli_images.COMMANDS:
            return cli_images.run(args)
        return guarded(lambda: _prepare(args))


def _prepare(args: argparse.Namespace) -> int:
    config = Config.for_prepare(args.pg, args.bouncer, args.backend)
    preflight.check_environment(os.environ)  # LEAKCHECK_* variables, before anything is fetched
    preflight.check_paths(config)
    preflight.check_temp_folder(os.environ, 0)
    with make_backend(config) as backend:
        for spec in config.pg:
            print(f"--pg {spec} -> PostgreSQL {backend.resolve_pg(spec)}")
        for spec in config.bouncer:
            print(f"--bouncer {spec} -> PgBouncer {backend.resolve_bouncer(spec)}")
        for line in backend.describe():
            print(f"  {line}")
    return 0


def _merge(args: argparse.Namespace) -> int:
    return guarded(lambda: merge.run(args.results, args.expect, args.record, args.junitxml))


if __name__ == "__main__":
    sys.exit(main())
