"""`leakcheck scan`: the arguments, checked, and the scan behind them (what the CLI calls).

    leakcheck scan [matrix options] [--results=RESULTS.json] [--fail-on=leaks] [reports] PATH...
    leakcheck scan --repo=DIR [--run] [matrix options]

Order: every option and every input is checked first (a one-line UsageError, exit 4: no server has
started, nothing is written); then the inputs are read, streaming; then the verdicts of the probes the
workload maps to are read from --results or measured (only then can a server start); then the reports.

Exit codes: 0 nothing the workload does is affected on the target cells, 1 something is (or a cell
could not be measured, or a control failed), 4 bad input.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from leakcheck.config import matrix_file
from leakcheck.config.config import Config
from leakcheck.config.distinct_paths import check_own_files
from leakcheck.config.options import FLAGS, LIST_OPTIONS, MATRIX_SWITCHES, OPTIONS
from leakcheck.config.output_files import check_writable, write_atomic
from leakcheck.model.errors import UsageError
from leakcheck.model.safe_text import encodable, terminal_safe
from leakcheck.model.target import PoolerKind
from leakcheck.model.verdicts import Outcome
from leakcheck.model.versions import Spec, Version
from leakcheck.results.results import Results, load
from leakcheck.scan import inputs, report
from leakcheck.scan.verdicts import FAIL_ON, Scan, Selection, Verdicts, assemble, cells_of, mapped, measured, pick
from leakcheck.scan.workload import Workload

log = logging.getLogger(__name__)

EXIT_CLEAN, EXIT_AFFECTED = 0, 1
#: The matrix options scan takes to name (and, without --results, measure) the target cells. Left out:
#: what it reads or writes its own way (--results, the reports) and the gate's options (--expect,
#: --record, --update, --require, --diff): scan's gate is --fail-on. --probes goes with --repo --run only
#: (a scan of statements measures the probes its classes map to).
LEFT_OUT = ("--results", "--report-html", "--report-md", "--expect", "--record", "--require", "--diff")
MatrixOptions = dict[str, str | None]
#: Measures the given probes on the cells the matrix options name: (options with --probes set) -> outcomes.
Measure = Callable[[MatrixOptions], Sequence[Outcome]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, ini, help_text, _ in OPTIONS:
        if flag not in LEFT_OUT:
            parser.add_argument(flag, dest=ini, default=None, help=help_text)
    for flag, ini, help_text in LIST_OPTIONS:
        parser.add_argument(flag, dest=ini, default=None, action="append", help=help_text)
    parser.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                        help="a PostgreSQL log (stderr, csvlog or jsonlog, with log_statement=all or "
                        "log_min_duration_statement=0), a pg_stat_statements export (CSV or JSON) or a folder of "
                        ".sql files; the kind is found from the content (gzip is read as such)")
    parser.add_argument("--results", dest="scan_results", type=Path, metavar="RESULTS.json",
                        help="read the verdicts from this results file (written by --results of a matrix run) "
                        "instead of measuring; the matrix options, when given, choose its cells")
    parser.add_argument("--fail-on", default="leaks", metavar="LEVEL",
                        help="what makes the scan exit 1: leaks (any problem: leaks, lost, breaks; the default), "
                        "breaks (breaks and lost writes) or lost-write (lost writes only); an error always does")
    parser.add_argument("--report-md", dest="scan_md", type=Path, metavar="FILE",
                        help="write the scan as Markdown (a pull-request comment) to this file")
    parser.add_argument("--report-html", dest="scan_html", type=Path, metavar="FILE",
                        help="write the scan as one self-contained HTML page to this file")
    parser.add_argument("--report-json", dest="scan_json", type=Path, metavar="FILE",
                        help="write the scan as JSON (schema leakcheck-scan) to this file")
    parser.add_argument("--junitxml", dest="scan_junit", type=Path, metavar="FILE",
                        help="write a JUnit XML report (one test case per class and cell) to this file")
    parser.add_argument("--repo", type=Path, metavar="DIR",
                        help="instead of statements: the pooler knobs a repository sets (Rails, Django, Prisma, "
                        "JDBC/Spring, asyncpg, psycopg, pgx, postgres.js, PDO), as the --driver-set axes of a matrix "
                        "of their settings")
    parser.add_argument("--run", action="store_true", help="with --repo: run that matrix (the drivers this "
                        "leakcheck ships) on the cells the matrix options name")


@dataclass(frozen=True)
class Options:
    """One scan, checked."""

    paths: tuple[Path, ...]
    kinds: tuple[inputs.Kind, ...]
    matrix: MatrixOptions
    results: Path | None = None
    fail_on: str = "leaks"
    reports: dict[str, Path] = field(default_factory=dict)  #: option -> path
    repo: Path | None = None
    run: bool = False
    #: the --results file's outcomes of the target cells (read once, before the inputs)
    loaded: Results | None = None


_REPORTS = {"--report-md": "scan_md", "--report-html": "scan_html", "--report-json": "scan_json",
            "--junitxml": "scan_junit"}


def matrix_options(args: argparse.Namespace) -> MatrixOptions:
    """The matrix options given (ini keys to values; a repeatable one's values joined by newlines)."""
    out: MatrixOptions = {}
    for ini in FLAGS:
        value = getattr(args, ini, None)
        out[ini] = "\n".join(value) if isinstance(value, list) else value
    return out


def options(args: argparse.Namespace) -> Options:
    """The arguments checked, every input's kind found (its head read): a UsageError on the first problem."""
    matrix = matrix_options(args)
    reports = {option: Path(getattr(args, dest)) for option, dest in _REPORTS.items()
               if getattr(args, dest) is not None}
    if args.fail_on not in FAIL_ON:
        raise UsageError.bad_value("--fail-on", args.fail_on, " or ".join(FAIL_ON))
    if args.run and args.repo is None:
        raise UsageError("--run runs the matrix of a repository's settings: give --repo=DIR too")
    if args.repo is not None:
        if args.paths or args.scan_results is not None:
            raise UsageError("--repo reads a repository's settings, PATHs and --results its statements: give one "
                             "or the other")
        if not args.repo.is_dir():
            raise UsageError(f"--repo={args.repo} is not a folder; give the repository's root, e.g. --repo=.")
        if args.run:
            Config.from_strings(matrix)  # every matrix option checked before the repository is read
        return Options((), (), matrix, repo=args.repo, run=args.run)
    if not args.paths:
        raise UsageError("scan needs a PATH: a PostgreSQL log, a pg_stat_statements export or a folder of .sql files "
                         "(or --repo=DIR for a repository's settings)")
    if matrix.get("leakcheck_probes") is not None:
        raise UsageError("--probes goes with --repo --run: a scan of statements measures the probes its classes map "
                         "to; leave --probes out")
    given = [FLAGS[k] for k in MATRIX_SWITCHES if matrix.get(k) is not None]
    if args.scan_results is None and not given:
        raise UsageError("scan needs the target cells: give --results=RESULTS.json (the verdicts of an earlier run) "
                         "or the matrix to measure (e.g. --pg=16 --bouncer=1.24,1.26, or --matrix=FILE)")
    Config.from_strings(matrix)  # every matrix option checked, as `leakcheck run` checks it
    loaded = None
    if args.scan_results is not None:  # read now: a file that is not one, or holds none of the cells, fails first
        loaded = cells_of(load(args.scan_results, "--results"), str(args.scan_results), selection(matrix))
    check_own_files(reports, {"the --results file": args.scan_results,
                              **{f"an input ({p})": p for p in args.paths if not p.is_dir()}})
    for option, path in reports.items():
        check_writable(path, option, {"--report-md": "scan.md", "--report-html": "scan.html",
                                      "--report-json": "scan.json", "--junitxml": "scan.xml"}[option])
    kinds = tuple(inputs.detect(p) for p in args.paths)
    return Options(tuple(args.paths), kinds, matrix, args.scan_results, args.fail_on, reports, loaded=loaded)


def selection(matrix: MatrixOptions) -> Selection:
    """The target cells a results file is filtered to: the axes the options (or the --matrix file) give."""
    given = {k: v for k, v in matrix.items() if v is not None}
    if given.get("leakcheck_matrix"):
        given = {**matrix_file.load(Path(str(given["leakcheck_matrix"]))), **given}
    config = Config.from_strings(matrix)
    pg = poolers = drivers = None
    if "leakcheck_pg" in given:
        pg = tuple(_version(s, "--pg") for s in config.pg)
    if any(k in given for k in ("leakcheck_bouncer", "leakcheck_pooler", matrix_file.TABLES)):
        poolers = tuple((kind, _version(spec, "--pooler")) for t in config.pooler_tables for kind, spec in t.poolers)
    if "leakcheck_drivers" in given:
        drivers = tuple(d.value for d in config.drivers)
    if "leakcheck_pooled_dsn" in given:
        poolers = ((PoolerKind.RUNNING, Version(())),)
    return Selection(pg, poolers, drivers)


def _version(spec: Spec, option: str) -> Version:
    if spec.version is None:
        raise UsageError(f"{option}={spec.raw}: with --results the cells are chosen by version; give a version "
                         "such as 16 or 1.24 instead of a path")
    return spec.version


def read(opts: Options) -> Workload:
    """Every input, read and counted (streaming)."""
    workload = Workload()
    for path, kind in zip(opts.paths, opts.kinds, strict=True):
        workload.read(str(path), kind.value, inputs.read(path, kind))
    if not workload.statements:
        raise UsageError(f"scan: no statement in {', '.join(map(str, opts.paths))}: a log needs log_statement=all or "
                         "log_min_duration_statement=0 (and messages in English, lc_messages=C); an export needs "
                         "its query column")
    return workload


def verdicts(opts: Options, workload: Workload, measure: Measure) -> Verdicts | None:
    """The outcomes of the probes the workload maps to: from --results, or measured now (None: no class
    has a probe, so nothing needs measuring)."""
    probes = mapped(workload)
    if not probes:
        return None
    if opts.loaded is not None:
        return pick(opts.loaded, str(opts.results), probes)
    log.info(f"scan: measuring {len(probes)} probe(s) the workload maps to: {', '.join(probes)}")
    return measured(measure({**opts.matrix, "leakcheck_probes": ",".join(probes)}))


def write(scan: Scan, targets: dict[str, Path]) -> tuple[list[str], bool]:
    """Each report asked for, in one step each; the summary lines, and False when a write failed."""
    render = {"--report-md": report.render_markdown, "--report-html": report.render_html,
              "--report-json": report.render_json, "--junitxml": report.render_junit}
    lines, ok = [], True
    for option, path in targets.items():
        try:
            write_atomic(path, encodable(render[option](scan)))
            lines.append(f"wrote the scan ({option}) to {path}")
        except OSError as exc:
            lines.append(f"{path} not written: writing it failed ({exc.strerror or exc}); the file is unchanged")
            ok = False
    return lines, ok


def run(opts: Options, measure: Measure, say: Callable[[str], None] = print, color: bool = False) -> int:
    workload = read(opts)
    scan = assemble(workload, verdicts(opts, workload, measure), opts.fail_on)
    say(report.render_terminal(scan, color=color).rstrip("\n"))
    lines, written = write(scan, opts.reports)
    for line in lines:
        say(terminal_safe(f"leakcheck: {line}", newlines=False))
    return EXIT_AFFECTED if scan.failed or not written else EXIT_CLEAN
