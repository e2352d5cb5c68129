"""The published dataset's pages (docs/measured/dataset/): an index and one page per driver, made from the
dataset's results file by `leakcheck docs dataset` (cli/docs.py), as pure functions of its outcomes.

Each page's first line names the command that made all of them (site.generated_by); the command is
`scripts/dataset`'s last step, and tests/pure/test_dataset.py runs it again and fails when a page differs.
"""

from __future__ import annotations

from collections.abc import Sequence

from leakcheck.model.target import Route
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.reports.grid import CONTROL, CONTROL_ROUTES
from leakcheck.reports.markdown import md_text
from leakcheck.reports.site import generated_by, render_measured
from leakcheck.reports.terminal import render_counts

INDEX = "index.md"


def page_name(driver: str) -> str:
    """The page of one driver's tables: `pgjdbc.md`."""
    return f"{driver}.md"


def _problems(outcomes: Sequence[Outcome]) -> str:
    measured = [o for o in outcomes if o.verdict not in (Verdict.ERROR, Verdict.SKIPPED)]
    bad = sum(1 for o in measured if o.verdict.is_problem)
    errors = len(outcomes) - len(measured)
    return f"{bad} / {len(measured)}" + (f" ({errors} error{'s' if errors != 1 else ''})" if errors else "")


def render_dataset(outcomes: Sequence[Outcome], argv: Sequence[str], *, source: str, date: str,
                   machine: str) -> dict[str, str]:
    """Every page of the dataset, by file name: the index, then one per driver."""
    pooled = [o for o in outcomes if o.route is Route.TRANSACTION]
    drivers = list(dict.fromkeys(o.target.drivers for o in outcomes))  # a mixed pair has a page of its own
    poolers = list(dict.fromkeys(o.pooler.label() for o in pooled if o.pooler is not None))
    file = source.rsplit("/", 1)[-1]
    lines = [generated_by(argv), "", "# The measured dataset", "",
             f"Measured on {md_text(date)} on {md_text(machine)}: every pooler, driver and workaround setting of "
             f"`matrices/dataset.toml`, {len(outcomes):,} outcomes in [`{file}`]({file}) (a leakcheck results "
             f"file), {len(pooled):,} of them through a pooler. Through the pooler: "
             f"{render_counts(pooled) or 'nothing'}.",
             "", "Use it without measuring: `leakcheck scan --results=" + file + " postgresql.log` gives the "
             "statements of your log their verdicts on these cells ([scan](../../scan.md)); `leakcheck diff` and "
             "`leakcheck docs matrix` read it too. `scripts/dataset` remakes the file and these pages.", "",
             "## Problems per pooler and driver", "",
             "Problem verdicts (leaks, lost, breaks) among the runs measured, over every PostgreSQL version and "
             "driver setting; each driver's page has the tables.", "",
             "| pooler | " + " | ".join(f"[{md_text(d)}]({page_name(d)})" for d in drivers) + " |",
             "|---|" + "---|" * len(drivers)]
    for pooler in poolers:
        here = [o for o in pooled if o.pooler is not None and o.pooler.label() == pooler]
        lines.append(f"| {md_text(pooler)} | " + " | ".join(
            _problems([o for o in here if o.target.drivers == d]) or "-" for d in drivers) + " |")
    lines += ["", "## Controls", ""]
    lines += [f"- {route.value} control ({CONTROL[route]}): {render_counts(c)}"
              for route in CONTROL_ROUTES if (c := [o for o in outcomes if o.route is route])]
    pages = {INDEX: "\n".join(lines) + "\n"}
    for driver in drivers:
        own = [o for o in outcomes if o.target.drivers == driver]
        pages[page_name(driver)] = render_measured(own, argv, source=source, date=date, machine=machine,
                                                   title=f"{driver}, measured")
    return pages
