"""The docs' discovery findings table, made from `discover --results` files (pure), dated as the
measured matrix pages are (reports/site.py): `leakcheck docs findings` prints it."""

from __future__ import annotations

from collections.abc import Sequence

from leakcheck.discover.results_file import Found, Run
from leakcheck.reports.markdown import md_text
from leakcheck.reports.site import generated_by


def _span(text: str) -> str:
    """Text as a code span in a table cell: one line, no backtick, `|` escaped (GFM tables)."""
    return "`" + " ".join(text.split()).replace("`", "'").replace("|", "\\|") + "`"


def _code(items: Sequence[str]) -> str:
    return ", ".join(_span(i) for i in items) or "—"


def _label(f: Found) -> str:
    label = ("known: " + _code(f.probes)) if f.known else ("new: " + _code(f.unlisted))
    if not f.known and f.probes:
        label += f" (with {_code(f.probes)})"
    return label + (f" — accepted: {md_text(f.accepted)}" if f.accepted else "")


def render_findings_page(runs: Sequence[tuple[str, Run]], argv: Sequence[str], *, date: str, machine: str) -> str:
    """One row per run (cell, driver, search, what it found known and new), then each finding."""
    lines = [generated_by(argv), "", "# Discovery findings, measured", "",
             f"Found on {md_text(date)} on {md_text(machine)} by `leakcheck discover`, read from "
             + ", ".join(f"`{source}`" for source, _ in runs) + ". *Known*: a probe lists it and reports a problem "
             "on that cell; *new*: what no probe covers.", "",
             "| cell | driver, route | search | known | new (what no probe covers) |", "|---|---|---|---|---|"]
    for _, run in runs:
        known = sorted({p for f in run.findings if f.known for p in f.probes})
        new = list(dict.fromkeys(u for f in run.findings if not f.known for u in f.unlisted))
        lines.append(f"| {md_text(run.cell)} | {md_text(run.driver)}, {md_text(run.route)} | {run.budget:g} s, seed "
                     f"{run.seed}, {run.sequences} sequences | {_code(known)} | {_code(new)} |")
    for _, run in runs:
        lines += ["", f"## {md_text(run.cell)}, {md_text(run.driver)}", "", "| signature | finding | shrunk steps |",
                  "|---|---|---|"]
        lines += [f"| {_span(f.signature)} | {_label(f)} | {_code(f.steps)} |" for f in run.findings]
    return "\n".join(lines) + "\n"
