"""`leakcheck discover`: the arguments, and the run behind them (what the CLI calls).

Exit codes: 0 nothing that fails the run (by default: known findings only, or none; `--fail-on` and
`--accept`, accept.py, say which findings fail it), 1 findings that fail it, 3 discovery could not
measure (a proof was missing or wrong, a server broke), 4 bad input (as every leakcheck command).
"""

from __future__ import annotations

import argparse
import logging
import secrets
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from leakcheck.config.config import checked_pairs
from leakcheck.config.options import FLAGS, LIST_OPTIONS, OPTIONS
from leakcheck.discover import accept, results_file
from leakcheck.discover import options as o
from leakcheck.discover.findings import Search
from leakcheck.discover.known import confirmed
from leakcheck.discover.output import parse_out, write
from leakcheck.drivers.agents.catalogue import known_drivers
from leakcheck.drivers.agents.team import is_team, spelled, team_driver
from leakcheck.drivers.settings import cell_settings, check_axis
from leakcheck.model.axes import parse_driver_axis
from leakcheck.model.errors import UsageError
from leakcheck.model.safe_text import terminal_safe
from leakcheck.model.target import PAIR_JOIN, Application, Driver, Route, Setting, settings_label
from leakcheck.run import signals

if TYPE_CHECKING:
    from leakcheck.discover.findings import Candidate, Discovery, Finding
    from leakcheck.discover.lab import Lab

log = logging.getLogger(__name__)

EXIT_NOTHING_NEW, EXIT_NEW, EXIT_UNMEASURED = 0, 1, 3
FLAGS_BY_NAME = {flag: ini for ini, flag in FLAGS.items()}
DEFAULT_OUT = "leakcheck-findings"


#: The matrix's options that name discovery's one cell (their help texts are the matrix's).
CELL_OPTIONS = ("--pg", "--bouncer", "--pooler", "--bouncer-ini", "--backend", "--pooled-dsn", "--direct-dsn",
                "--dsn-name", "--pg-image", "--bouncer-image", "--odyssey-image", "--pgpool-image")
CELL_LISTS = ("--bouncer-set", "--pooler-set")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    helps = {flag: (ini, text) for flag, ini, text, _ in OPTIONS}
    for flag in CELL_OPTIONS:
        ini, text = helps[flag]
        parser.add_argument(flag, dest=ini, help=f"{text} (one cell: one value)")
    lists = {flag: (ini, text) for flag, ini, text in LIST_OPTIONS}
    for flag in CELL_LISTS:
        ini, text = lists[flag]
        parser.add_argument(flag, dest=ini, action="append", help=f"{text} (one value each: one cell)")
    parser.add_argument("--driver", help="the driver of both clients: psycopg, asyncpg, a shipped "
                        "agent (node-postgres, pgjdbc, ...) or cmd:PATH, a team's own agent (default psycopg)")
    parser.add_argument("--pair", help="mixed applications instead of --driver: A's driver and B's, each with its "
                        "settings in brackets, one value each, as --pairs names one (e.g. "
                        "prisma[pgbouncer=true]+node-postgres)")
    parser.add_argument("--driver-set", action="append", metavar="DRIVER:NAME=V",
                        help="a setting of --driver's driver, as the matrix's --driver-set names it "
                        "(pgjdbc:prepareThreshold=0, cmd-myorm:pool=off); one value each: discover searches one "
                        "configuration (repeatable, one per setting)")
    parser.add_argument("--route", default="transaction",
                        help="transaction (the subject), session or direct (controls that must find nothing)")
    parser.add_argument("--budget", default=o.DEFAULT_BUDGET,
                        help=f"search time, e.g. 60s, 2m (default {o.DEFAULT_BUDGET})")
    parser.add_argument("--seed", help="hypothesis seed (default: random, printed, so a run can be repeated)")
    parser.add_argument("--max-examples", default=str(o.DEFAULT_MAX_EXAMPLES),
                        help=f"sequences per round at most (default {o.DEFAULT_MAX_EXAMPLES})")
    parser.add_argument("--max-ops", default=str(o.DEFAULT_MAX_OPS),
                        help=f"ops per sequence (default {o.DEFAULT_MAX_OPS})")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"folder for one .sql file per finding, or none "
                        f"(default {DEFAULT_OUT})")
    parser.add_argument("--results", help="also write the findings to this JSON file (schema leakcheck-discovery), "
                        "for `leakcheck docs findings`")
    parser.add_argument("--fail-on", default="new", help="which findings exit 1: new (those no probe lists; "
                        "the default) or any (known ones too); an accepted one (--accept) never does")
    parser.add_argument("--accept", help="a TOML (.toml) or JSON file of accepted findings: entries with a "
                        "signature (as discover prints it) and a reason")
    parser.add_argument("--database", help="hypothesis example database folder, or none (default: "
                        "discover/examples in leakcheck's cache)")


def options(args: argparse.Namespace) -> o.Options:
    route = Route(o.parse_choice(args.route, "--route", tuple(r.value for r in o.ROUTES)))
    b = None
    if args.pair is not None:
        driver, settings, b = _pair(args)
    else:
        given = "psycopg" if args.driver is None else args.driver
        driver = (team_driver(given, "--driver") if is_team(given)
                  else Driver(o.parse_choice(given, "--driver", (*known_drivers(), "cmd:PATH"))))
        settings = driver_settings(args.driver_set or [], driver)
    cell: dict[str, str] = {}
    for flag in (*CELL_OPTIONS, *CELL_LISTS):
        ini = FLAGS_BY_NAME[flag]
        value = getattr(args, ini, None)
        if isinstance(value, list):
            value = "\n".join(value)
        if value is None:
            continue
        if flag in ("--pg", "--bouncer", "--pooler") and ("," in value or not value.strip()):
            raise UsageError.bad_value(flag, value, "one version (discover measures one cell: run it per cell)")
        cell[ini] = value
    pooler = any(k in cell for k in ("leakcheck_bouncer", "leakcheck_pooler", "leakcheck_pooled_dsn"))
    if "leakcheck_pg" not in cell and "leakcheck_pooled_dsn" not in cell:
        raise UsageError("discover needs --pg (e.g. --pg=16), or --pooled-dsn for a running pooler")
    if route is Route.DIRECT and pooler:
        raise UsageError("--route=direct measures two direct sessions: leave out --bouncer, --pooler, --pooled-dsn")
    if route is not Route.DIRECT and not pooler:
        raise UsageError(f"--route={route} needs a pooler: --bouncer (e.g. --bouncer=1.24), --pooler or --pooled-dsn")
    budget = o.parse_budget(args.budget)
    seed = None if args.seed is None else o.parse_count(args.seed, "--seed", 0)
    max_examples, max_ops = o.parse_count(args.max_examples, "--max-examples"), o.parse_count(args.max_ops, "--max-ops")
    if args.database is None:
        from leakcheck.discover.lab import cache_dir

        database: Path | None = cache_dir() / "discover" / "examples"
    else:
        database = o.parse_database(args.database)
    fail_on = o.parse_choice(args.fail_on, "--fail-on", accept.FAIL_ON)
    accepted = accept.load(Path(args.accept).expanduser()) if args.accept is not None else {}
    results = None
    if args.results is not None:
        if not args.results.strip():
            raise UsageError.empty("--results", "a file path such as findings.json")
        results = Path(args.results).expanduser()
        results_file.check_target(results)
    return o.Options(
        cell=tuple(cell.items()), route=route, driver=driver, budget=budget, seed=seed,
        max_examples=max_examples, max_ops=max_ops,
        out=parse_out(args.out), results=results, database=database, fail_on=fail_on, accepted=tuple(accepted.items()),
        driver_settings=settings, b=b,
    )


def _pair(args: argparse.Namespace) -> tuple[Driver, tuple[Setting, ...], Application]:
    """--pair: one pair, each side checked as the matrix's --pairs checks it; --driver and --driver-set are the
    one-driver way, so neither goes with it."""
    given = [flag for flag, value in (("--driver", args.driver), ("--driver-set", args.driver_set)) if value]
    if given:
        raise UsageError(f"--pair={args.pair} names both drivers with their settings: leave out {', '.join(given)} "
                         "(a side's settings go in its brackets, e.g. prisma[pgbouncer=true]+node-postgres)")
    pairs = checked_pairs(args.pair, "--pair")
    if len(pairs) != 1:
        raise UsageError.bad_value("--pair", args.pair, "one pair A+B (discover measures one cell: run it per pair)")
    (a, b), = pairs
    return a.driver, a.settings, b


def driver_settings(given: list[str], driver: Driver) -> tuple[Setting, ...]:
    """--driver-set, each parsed and checked as the matrix's (one value, of --driver's driver, a setting
    it takes, given once); those that differ from the driver's defaults, in the order given."""
    chosen: dict[str, str] = {}
    for raw in given:
        axis = parse_driver_axis(raw)
        if axis.driver != driver.value:
            raise UsageError(f"--driver-set={raw}: {axis.driver} is not --driver ({driver}): discover drives one "
                             f"driver; name its settings as {driver}:NAME=V")
        if len(axis.values) != 1:
            raise UsageError.bad_value("--driver-set", raw, f"one value ({axis.driver}:{axis.name}={axis.values[0]}): "
                                       "discover searches one configuration; run it once per value")
        check_axis(axis)
        if axis.name in chosen:
            raise UsageError(f"--driver-set: the {driver} setting {axis.name} is given twice; give it once")
        chosen[axis.name] = axis.values[0]
    return cell_settings(driver.value, tuple(chosen.items()))


def _checked(lab: Lab, found: Discovery, opts: o.Options) -> list[Finding]:
    """Every candidate labelled, then merged: known only where the probes it maps to report a
    problem on this very cell (they run once each, now)."""
    from leakcheck.discover import engine

    ids = {p for c in found.candidates for p in engine.mapped(c)[0]}
    if not ids:
        return found.findings
    log.info("discover: running the probe(s) the findings map to: %s", ", ".join(sorted(ids)))
    try:
        verdicts = lab.probe_verdicts(ids, opts.driver, opts.driver_settings, opts.b)
    except Exception as exc:  # noqa: BLE001 - a harness failure: exit 3, like the searches'
        from leakcheck.discover.trace import Abort
        from leakcheck.model.errors import one_line

        raise Abort(f"the probe(s) {', '.join(sorted(ids))} failed: {type(exc).__name__}: {one_line(exc)}") from exc

    def checked(c: Candidate) -> tuple[tuple[str, ...], tuple[str, ...]]:
        probes, unlisted = engine.mapped(c)
        return probes, confirmed(c.ops, probes, unlisted, verdicts)

    return engine.merge(found.candidates, checked)


def run(opts: o.Options) -> int:
    """Discover, print every finding's script and the summary, write the files; the exit code."""
    try:
        from hypothesis.database import DirectoryBasedExampleDatabase

        from leakcheck.discover import engine, report
        from leakcheck.discover.differential import Differential
        from leakcheck.discover.lab import open_lab
        from leakcheck.discover.ops import universe
        from leakcheck.discover.trace import Abort
    except ImportError as exc:
        raise UsageError(f"leakcheck discover needs hypothesis ({exc}): pip install 'leakcheck[discover]'") from None
    seed = opts.seed if opts.seed is not None else secrets.randbelow(2**32)
    database = DirectoryBasedExampleDatabase(opts.database) if opts.database is not None else None
    started = time.monotonic()
    sides = ((opts.driver, opts.driver_settings), *(((opts.b.driver, opts.b.settings),) if opts.b else ()))
    clients = ({"leakcheck_drivers": spelled(opts.driver)} if opts.b is None else
               {"leakcheck_pairs": PAIR_JOIN.join(spelled(d) + settings_label(s) for d, s in sides)})
    with open_lab({**dict(opts.cell), **clients}, opts.route) as lab:
        where, stem = lab.where.describe(), _stem(lab, opts)
        log.info("discover: %s, %s; budget %.0f s, seed %d (repeat with --seed=%d)", where, opts.client, opts.budget,
                 seed, seed)
        try:
            with Differential(lab, opts.driver, settings=opts.driver_settings, b=opts.b) as measure:
                ops = universe(measure.abilities())
                for diff in measure.learn_start():  # the connections' start: said once, then never a finding
                    who = diff.who if opts.b is not None else "a client"  # one application: either client's
                    print(terminal_safe(f"discover: before any op, {who}'s {diff.key}: {diff.subject} through the "
                                        f"route, {diff.reference} direct (the connections' start; left out of "
                                        "every comparison while a client shows these values)"))
                found = engine.discover(measure, Search(seed, opts.budget, opts.max_examples, opts.max_ops,
                                                        database, stem, ops))
                findings = list(engine.confirm(measure, _checked(lab, found, opts)))
        except Abort as exc:
            print(terminal_safe(f"leakcheck: error: discovery could not measure: {exc}"), file=sys.stderr)
            return EXIT_UNMEASURED
    signals.check()  # never print or write --out after a Ctrl-C, even one something swallowed
    scripts = [(report.slug(f), report.script(f, where, opts.driver, n, len(findings), opts.client,
                                              opts.b.driver if opts.b is not None else None))
               for n, f in enumerate(findings, 1)]
    for _, text in scripts:  # the files keep the server's text as it was; the terminal sees it made inert
        print(terminal_safe(text))
    accepted = dict(opts.accepted)
    for n, f in enumerate(findings, 1):
        why = accepted.get(f.signature)
        print(terminal_safe(f"discover: finding {n}: signature {f.signature!r} "
                            + (f"(accepted: {why})" if why is not None else f"({'known' if f.known else 'new'})")))
    sequences = sum(r.examples for r in found.rounds)
    print(f"discover: {where}, {opts.client}: {report.summary(findings)} "
          f"({sequences} sequences in {len(found.rounds)} round(s), "
          f"{time.monotonic() - started:.0f} s; {found.stopped}; seed {seed})")
    if opts.results is not None:
        entries = [results_file.entry(f, accepted.get(f.signature)) for f in findings]
        body = results_file.document(where, opts.client, str(opts.route), seed, opts.budget, sequences,
                                     len(found.rounds), found.stopped, entries, measure.start, opts.b is None)
        print(terminal_safe(f"discover: {results_file.save(opts.results, body)}"))
    if opts.out is not None:
        files, removed = write(opts.out, stem, scripts)
        print(f"discover: wrote {len(files)} file(s) to {opts.out}/ ({stem}-NN-*.sql)"
              + (f", removed {len(removed)} earlier one(s)" if removed else ""))
    return EXIT_NEW if accept.failing(findings, opts.fail_on, accepted) else EXIT_NOTHING_NEW


def _stem(lab: Lab, opts: o.Options) -> str:
    """What a run measured, as file names and example-database keys spell it."""
    pooler = _safe(lab.where.pooler.label()) if lab.where.pooler else ""
    return f"pg{lab.where.pg}-{pooler + '-' if pooler else ''}{_safe(opts.client)}-{opts.route}"


def _safe(label: str) -> str:
    """An id as a file name: `pgbouncer1.24.1[a=1]` -> `pgbouncer1.24.1_a=1`."""
    return "".join(ch if ch.isalnum() or ch in "._=-" else "_" for ch in label.replace("[", "_").rstrip("]"))
