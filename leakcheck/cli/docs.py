"""`leakcheck docs`: the docs site's generated pages, printed (or written with --out).

    leakcheck docs options > docs/options.md
    leakcheck docs matrix RESULTS.json --date=2026-12-01 --machine="Debian 12, 2 cores" > docs/measured/native.md
    leakcheck docs matrix RESULTS.json --pg=18 ...     # one PostgreSQL major (the README's table)
    leakcheck docs findings --results=FINDINGS.json --date=... --machine=... --out=docs/measured/findings.md

Each page's first line is the command that made it (reports/site.py); tests/pure/test_docs_site.py
runs it again and fails when the page differs. Exit 0, or 4 for bad input.
"""

from __future__ import annotations

import argparse
import datetime
import re
from pathlib import Path

from leakcheck.discover import results_file
from leakcheck.discover.findings_page import render_findings_page
from leakcheck.model.errors import UsageError
from leakcheck.reports.site import check_command, render_measured, render_options_page
from leakcheck.results.results import load

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    docs = sub.add_parser("docs", help="print a generated page of the docs site (options; a measured matrix)")
    pages = docs.add_subparsers(dest="page", required=True)
    options = pages.add_parser("options", help="the options table, from leakcheck/config/options.py")
    options.add_argument("--out", type=Path, help="write the page to this file instead of stdout")
    matrix = pages.add_parser("matrix", help="the measured tables of a results file, dated")
    matrix.add_argument("results", type=Path, metavar="RESULTS.json", help="a file written by --results")
    matrix.add_argument("--date", help="when it was measured, YYYY-MM-DD (default today)")
    matrix.add_argument("--machine", required=True, help="what it was measured on, e.g. 'Debian 12, 2 cores'")
    matrix.add_argument("--pg", help="only this PostgreSQL major's table, e.g. 18")
    matrix.add_argument("--title", help="a title for the page (a heading of its own)")
    matrix.add_argument("--out", type=Path, help="write the page to this file instead of stdout")
    findings = pages.add_parser("findings", help="the discovery findings table of `discover --results` files, dated")
    findings.add_argument("--results", type=Path, action="append", required=True, metavar="FINDINGS.json",
                          help="a file written by `leakcheck discover --results` (repeatable: one row per run)")
    findings.add_argument("--date", help="when it was found, YYYY-MM-DD (default today)")
    findings.add_argument("--machine", required=True, help="what it ran on, e.g. 'Debian 12, 2 cores'")
    findings.add_argument("--out", type=Path, help="write the page to this file instead of stdout")


def render(args: argparse.Namespace) -> str:
    """The page the arguments ask for (checked first: a bad value is one line, exit 4)."""
    if args.page == "options":
        return render_options_page()
    date = args.date or datetime.date.today().isoformat()
    if not _DATE.fullmatch(date):
        raise UsageError(f"--date={date!r} is not a date: give YYYY-MM-DD")
    if not args.machine.strip():
        raise UsageError("--machine is empty: say what it was measured on")
    if args.page == "findings":
        argv = ["findings", *(f"--results={p}" for p in args.results), f"--date={date}", f"--machine={args.machine}"]
        check_command(argv)
        runs = [(str(p), results_file.load(p, "leakcheck docs findings --results")) for p in args.results]
        return render_findings_page(runs, argv, date=date, machine=args.machine)
    if args.pg is not None and not args.pg.isdigit():
        raise UsageError(f"--pg={args.pg!r} is not a PostgreSQL major: give e.g. 18")
    argv = ["matrix", str(args.results), f"--date={date}", f"--machine={args.machine}"]
    argv += [f"--pg={args.pg}"] if args.pg else []
    argv += [f"--title={args.title}"] if args.title else []
    check_command(argv)
    outcomes = load(args.results, "leakcheck docs matrix").outcomes
    if args.pg is not None and not any(o.pg.parts[0] == int(args.pg) for o in outcomes):
        raise UsageError(f"{args.results} holds no outcome of PostgreSQL {args.pg}: check --pg")
    return render_measured(outcomes, argv, source=str(args.results), date=date, machine=args.machine,
                           pg=args.pg, title=args.title)


def main(args: argparse.Namespace) -> int:
    page = render(args)
    if args.out is not None:
        args.out.write_text(page, encoding="utf-8")
    else:
        print(page, end="")
    return 0
