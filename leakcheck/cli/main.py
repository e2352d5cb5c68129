"""`leakcheck run`: the leak matrix without pytest (the plugin's options, gate and reports).
`leakcheck diff FROM TO`: what changes between two cells (e.g. pg16/pgbouncer1.24 pg18/pgbouncer1.26).
`leakcheck prepare`: resolve, fetch and build the servers a matrix needs, ahead of time.
`leakcheck merge`: several runs' --results files as one report and one gate decision.
`leakcheck fixtures`: the probes' test roles and tables in a running pooler's database (--pooled-dsn).
`leakcheck discover`: search for session-state leaks no probe lists (hypothesis; see docs/discovery.md).
`leakcheck scan`: what your application sends (logs, pg_stat_statements, .sql files), classified and measured;
`--repo`: your repository's pooler knobs as driver-set axes (see docs/scan.md).
`leakcheck docs`: the docs site's generated pages (the options table; a measured matrix, dated).
`leakcheck sweep`: remove what killed runs left on this machine and its Docker engine (each run does so as it starts).
`leakcheck cache-dir`, `fetch-pg`, `fetch-pgbouncer-tarball`: for scripts that build local images.

Under pytest the matrix is `pytest --pg=16,18 --bouncer=1.24,1.26`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import psycopg

from leakcheck.cli import diff as diff_cli
from leakcheck.cli import docs as docs_cli
from leakcheck.cli import images as cli_images
from leakcheck.cli import merge
from leakcheck.cli import run as run_cli
from leakcheck.cli import scan as scan_cli
from leakcheck.cli.exits import EXIT_USAGE, guarded
from leakcheck.config import preflight
from leakcheck.config.config import Config, required_probes
from leakcheck.config.options import DEFAULT_BOUNCER, DEFAULT_PG, OPTIONS
from leakcheck.discover import command as discover
from leakcheck.drivers.clients import driver_version
from leakcheck.model.errors import ProvisionError, UsageError, one_line
from leakcheck.model.redact import redacted
from leakcheck.model.safe_text import terminal_safe
from leakcheck.model.versions import leakcheck_release
from leakcheck.provision.dsn_backend import check_dsn, connect_timeout, shown_dsn
from leakcheck.provision.host.sweep import sweep
from leakcheck.provision.host.system import cache_root
from leakcheck.provision.postgres.fixtures import install
from leakcheck.reports.terminal import use_color
from leakcheck.run import progress
from leakcheck.run.matrix import make_backend

#: The pytest options' help texts, for the merge options that mean the same.
OPTION_HELP = {flag: help_text for flag, _, help_text, _ in OPTIONS}


class _Parser(argparse.ArgumentParser):
    """argparse, except that a usage error is one line and exit code 4, as in the pytest plugin."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"leakcheck: error: {message}; see `{self.prog} --help`\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="leakcheck", description=__doc__)
    parser.add_argument("--version", action="version", version=f"leakcheck {leakcheck_release()}")
    sub = parser.add_subparsers(dest="command", required=True)
    prepare = sub.add_parser("prepare", help="fetch/build and cache PostgreSQL and PgBouncer binaries")
    prepare.add_argument("--pg", default=DEFAULT_PG, help=f"PostgreSQL versions (default {DEFAULT_PG})")
    prepare.add_argument("--bouncer", help=f"PgBouncer versions (default {DEFAULT_BOUNCER} when no --pooler is given)")
    prepare.add_argument("--pooler", help="poolers as KIND:VERSION, e.g. odyssey:1.5,pgpool:4.3 (as for the matrix)")
    prepare.add_argument("--backend", default="native", help="native or containers (default native)")
    prepare.add_argument("--drivers", help="also install these drivers' agents, e.g. node-postgres,postgres-js "
                         "(npm packages into the cache; Debian packages as root)")
    merging = sub.add_parser("merge", help="merge --results files of several runs into one report and one gate "
                             "decision (exit 0: all passed, 1: some failed, 4: bad input)")
    merging.add_argument("results", nargs="+", type=Path, metavar="RESULTS.json",
                         help="files written by pytest --results (e.g. one per CI job)")
    merging.add_argument("--expect", type=Path, help="a matrices/*.json of expected verdicts, as pytest --expect")
    merging.add_argument("--record", type=Path, help="merge the measured verdicts into this matrices/*.json file, "
                         "as pytest --record")
    merging.add_argument("--results", dest="write_results", type=Path, help="write the merged outcomes to this "
                         "results file, as pytest --results (to merge further)")
    merging.add_argument("--junitxml", type=Path, help="write a JUnit XML report (one test case per outcome)")
    merging.add_argument("--require", help="probe ids that must be isolated, as pytest --require (or security)")
    merging.add_argument("--report-html", type=Path, help=OPTION_HELP["--report-html"])
    merging.add_argument("--report-md", type=Path, help=OPTION_HELP["--report-md"])
    fixtures = sub.add_parser("fixtures", help="create leakcheck's test roles and tables in a database behind a "
                              "running pooler (for --pooled-dsn), as a superuser")
    fixtures.add_argument("--dsn", required=True, help="a postgresql:// URI of that database, as a superuser")
    fixtures.add_argument("--role", help="the role --pooled-dsn logs in as: it gets what leakcheck_app has")
    fixtures.add_argument("--drop", action="store_true", help="remove them again")
    run_cli.add_parser(sub)
    diff_cli.add_parser(sub)
    docs_cli.add_parser(sub)
    scan_cli.add_parser(sub)
    discovering = sub.add_parser("discover", help="search for session-state leaks no probe lists (exit 0: nothing "
                                 "new, 1: new findings, 3: could not measure, 4: bad input)")
    discover.add_arguments(discovering)
    cli_images.add_parsers(sub)
    sub.add_parser("sweep", help="remove what killed leakcheck runs left on this machine: their server processes, "
                   "folders (with their sockets) and System V shared memory and semaphores, and the containers and "
                   "networks of containers runs (when a Docker engine answers); one line each, never a live run's "
                   "(each run does its backend's part as it starts)")
    args = parser.parse_args(argv)
    with progress.on_stderr():  # "leakcheck: fetching ..." lines; results go to stdout
        if args.command == "merge":
            return _merge(args)
        if args.command == "discover":
            return guarded(lambda: discover.run(discover.options(args)))
        if args.command in cli_images.COMMANDS:
            return cli_images.run(args)
        if args.command == "run":
            return guarded(lambda: run_cli.main(args))
        if args.command == "diff":
            return guarded(lambda: diff_cli.main(args))
        if args.command == "docs":
            return guarded(lambda: docs_cli.main(args))
        if args.command == "scan":
            return guarded(lambda: scan_cli.main(args))
        if args.command == "fixtures":
            return guarded(lambda: _fixtures(args))
        if args.command == "sweep":
            return guarded(_sweep)
        return guarded(lambda: _prepare(args))


def _prepare(args: argparse.Namespace) -> int:
    config = Config.for_prepare(args.pg, args.bouncer, args.backend, args.pooler, args.drivers)
    preflight.check_environment(os.environ)  # LEAKCHECK_* variables, before anything is fetched
    preflight.check_paths(config)
    preflight.check_temp_folder(os.environ, 0)
    with make_backend(config) as backend:
        for spec in config.pg:
            print(f"--pg {spec} -> PostgreSQL {backend.resolve_pg(spec)}")
        for kind, spec in config.poolers:
            print(f"--pooler {kind.value}:{spec} -> {kind.product} {backend.resolve_pooler(kind, spec)}")
        for line in backend.describe():
            print(terminal_safe(f"  {line}", newlines=False))
    for driver in config.drivers if args.drivers is not None else ():
        print(f"--drivers {driver.value} -> {driver.value} {driver_version(driver) or '(release unknown)'}")
    return 0


def _sweep() -> int:
    try:
        cache: Path | None = cache_root()  # unfinished template builds
    except UsageError:
        cache = None  # no cache: nothing was built in it

    def say(line: str) -> None:
        print(terminal_safe(line, newlines=False), flush=True)

    swept = sweep(cache, say=say)
    if not (_sweep_containers(say) or swept):
        print("leakcheck: no killed run left anything here", file=sys.stderr)
    return 0


def _sweep_containers(say: Callable[[str], None]) -> list[str]:
    """The containers and networks of killed containers runs, when a Docker engine answers (one line on stderr
    when none does; none is started); nothing without the containers extra (no such run could have been)."""
    try:
        from leakcheck.provision.containers import engine
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] in ("docker", "testcontainers"):
            return []
        raise
    try:
        api = engine.connect(unreachable="no leakcheck container or network was looked for").client
        try:
            return engine.sweep_dead_runs(api, say)
        finally:
            api.close()
    except ProvisionError as exc:
        print(terminal_safe(f"leakcheck: {exc}", newlines=False), file=sys.stderr)
        return []


def _fixtures(args: argparse.Namespace) -> int:
    dsn = check_dsn(args.dsn, "--dsn")
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout(dsn)) as conn:
            for line in install(conn, args.role, args.drop):
                print(terminal_safe(f"leakcheck: {line}", newlines=False))
    except psycopg.Error as exc:
        raise UsageError(f"leakcheck fixtures --dsn={shown_dsn(dsn)} failed: {one_line(redacted(str(exc), dsn), 200)} "
                         "(it needs a superuser of that database)") from None
    return 0


def _merge(args: argparse.Namespace) -> int:
    def merging() -> int:
        return merge.run(args.results, args.expect, args.record, args.junitxml, required=required_probes(args.require),
                         report_html=args.report_html, report_md=args.report_md, results_to=args.write_results,
                         color=use_color(sys.stdout, os.environ))

    return guarded(merging)


if __name__ == "__main__":
    sys.exit(main())
