"""`leakcheck diff FROM TO`: read saved results, run the cells that are missing, print what changes.

    leakcheck diff pg16/pgbouncer1.24 pg18/pgbouncer1.26 [--results=r1.json ...] [--md=diff.md]

A side no results file measured is run here (native backend unless --backend says otherwise),
with both drivers and the controls, exactly as `leakcheck run` would. Exit 0: the diff was
printed; 1: a side measured an error for some probe (compare nothing you could not measure);
4: bad input.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from leakcheck.cli.run import measure
from leakcheck.config import preflight
from leakcheck.config.config import Config
from leakcheck.config.diff_sides import DiffSide, parse_side
from leakcheck.config.output_files import check_writable, write_atomic
from leakcheck.drivers.agents.team import PREFIX, is_team, registered, spelled, team_driver
from leakcheck.model.errors import UsageError
from leakcheck.model.safe_text import encodable, terminal_safe
from leakcheck.model.target import PAIR_JOIN, Driver, settings_label
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.reports.diff import compare, render_markdown, render_text, settings_notes, sides_measured
from leakcheck.results.results import combine, load
from leakcheck.run.matrix import MatrixRun

log = logging.getLogger("leakcheck")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    diff = sub.add_parser("diff", help="what changes from one cell to another, e.g. pg16/pgbouncer1.24 "
                          "pg18/pgbouncer1.26 (runs what no --results file measured)")
    diff.add_argument("before", metavar="FROM", help="the cell you run today, e.g. pg16/pgbouncer1.24")
    diff.add_argument("after", metavar="TO", help="the cell you move to, e.g. pg18/pgbouncer1.26")
    diff.add_argument("--results", action="append", type=Path, default=[], metavar="RESULTS.json",
                      help="results files (pytest --results, leakcheck run --results) to read instead of running")
    diff.add_argument("--drivers", default="psycopg,asyncpg", help="drivers (default both)")
    diff.add_argument("--probes", default="all", help="probe ids, comma separated (default all)")
    diff.add_argument("--controls", default="yes", help="run the controls with a missing side: yes or no")
    diff.add_argument("--backend", default="native", help="native, containers or auto, for a missing side")
    diff.add_argument("--bouncer-ini", help="a team pgbouncer.ini for a side written with [ini=...]")
    diff.add_argument("--md", type=Path, help="also write the diff as Markdown (for a pull-request comment)")


def main(args: argparse.Namespace) -> int:
    for name in args.drivers.split(","):  # a team agent's hello first: a cell's settings meet its defaults
        if is_team(name.strip()):
            team_driver(name.strip(), "--drivers")
    before, after = parse_side(args.before, "FROM"), parse_side(args.after, "TO")
    saved = combine([(str(p), load(p, "--results")) for p in args.results]).outcomes if args.results else ()
    if args.md is not None:
        check_writable(args.md, "--md", "diff.md")
    outcomes: list[Outcome] = list(saved)
    for cell in sides_measured(outcomes, [before, after]):
        outcomes += _run(cell, args)
    missing = sides_measured(outcomes, [before, after])
    if missing:
        raise UsageError(f"nothing measured {missing[0].raw}: check the cell (its versions and settings)")
    changes, same = compare(outcomes, before, after)
    notes = settings_notes(outcomes, before, after)
    print(terminal_safe(render_text(changes, same, before, after, notes)), end="")
    if args.md is not None:
        write_atomic(args.md, encodable(render_markdown(changes, same, before, after, notes)))
        print(f"leakcheck: wrote the diff to {args.md}")
    errors = [o for o in outcomes if o.verdict is Verdict.ERROR and (before.matches(o) or after.matches(o))]
    if errors:
        print(terminal_safe(f"leakcheck: {len(errors)} outcomes are errors (nothing measured), e.g. "
                            f"{errors[0].target.column} {errors[0].probe}: {errors[0].evidence}", newlines=False))
    return 1 if errors else 0


def _run(cell: DiffSide, args: argparse.Namespace) -> list[Outcome]:
    """One side, measured now: its PostgreSQL, its pooler with its settings, its driver with its
    settings, or its mixed pair (else --drivers)."""
    axes = "\n".join(f"{cell.kind.value}:{name}={value}" for name, value in cell.settings) or None
    if cell.config and not args.bouncer_ini:
        raise UsageError(f"{cell.raw} names a team ini ({cell.config}): give its path with --bouncer-ini")
    for driver in (cell.driver, cell.driver_b):
        if driver.startswith(PREFIX) and registered(driver) is None:
            raise UsageError(f"{cell.raw} names a team agent ({driver}): give its path with --drivers=cmd:PATH")
    driver_axes = "\n".join(f"{cell.driver}:{name}={value}" for name, value in cell.driver_settings) or None
    drivers = spelled(Driver(cell.driver)) if cell.driver else args.drivers  # a team agent by its cmd:PATH
    pairs = None
    if cell.driver_b:  # a mixed pair: its two sides, each with its settings in brackets (--pairs)
        pairs = PAIR_JOIN.join(spelled(Driver(d)) + settings_label(s) for d, s in (
            (cell.driver, cell.driver_settings), (cell.driver_b, cell.driver_b_settings)))
        drivers = driver_axes = None
    config = Config.from_strings({
        "leakcheck_pg": str(cell.pg), "leakcheck_pooler": f"{cell.kind.value}:{cell.version}",
        "leakcheck_pooler_set": axes, "leakcheck_drivers": drivers, "leakcheck_pairs": pairs,
        "leakcheck_driver_set": driver_axes, "leakcheck_probes": args.probes,
        "leakcheck_controls": args.controls, "leakcheck_backend": args.backend,
        "leakcheck_bouncer_ini": args.bouncer_ini if cell.config else None,
    })
    run = MatrixRun(config)
    preflight.check(config, run.choice[0])
    log.info(f"measuring {cell.raw} ({run.why})")
    try:
        return measure(run)
    finally:
        run.close()
