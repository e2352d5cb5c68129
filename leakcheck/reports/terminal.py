"""The terminal matrix: plain text, or with ANSI colours when the caller's terminal takes them."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from typing import TextIO

from leakcheck.model.safe_text import terminal_safe
from leakcheck.model.target import Route
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.reports.grid import CONTROL, CONTROL_ROUTES, SHARED_RULE, canonical_order, pooled_grids
from leakcheck.reports.words import MEANING, MISSING, SECURITY, SUFFIX, cell, word
from leakcheck.reports.workarounds import TITLE, workarounds

__all__ = ["LONG_COLUMN", "WIDTH", "canonical_order", "cell", "painted", "render_counts", "render_legend",
           "render_matrix", "render_totals", "use_color", "word"]

#: Column names longer than this are numbered, with a legend under the table.
LONG_COLUMN = 40
#: The terminal matrix fits this many columns (a wider table numbers its columns, then is cut).
WIDTH = 120

#: SGR codes per verdict: problems stand out, measurements that passed are quiet.
_SGR = {
    Verdict.ISOLATED: "32",  # green
    Verdict.LEAKS: "1;31",  # bold red
    Verdict.LOST: "1;33",  # bold yellow
    Verdict.BREAKS: "1;35",  # bold magenta
    Verdict.LOSES_WRITES: "1;97;45",  # white on magenta: the most severe
    Verdict.ERROR: "1;97;41",  # white on red: not a verdict about the pooler
    Verdict.NOT_APPLICABLE: "2",  # dim
    Verdict.SKIPPED: "2",
}
_SECURITY_SGR = "35"
_HEADER_SGR = "1"


def use_color(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Whether to colour output for `stream`, as pytest decides: PY_COLORS=1/0 first, then NO_COLOR
    (any non-empty value: no colour), FORCE_COLOR (non-empty: colour), else a terminal that is not dumb."""
    if environ.get("PY_COLORS") in ("0", "1"):
        return environ["PY_COLORS"] == "1"
    if environ.get("NO_COLOR"):
        return False
    if environ.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty()) and environ.get("TERM") != "dumb"


def _paint(text: str, sgr: str, color: bool) -> str:
    return f"\x1b[{sgr}m{text}\x1b[0m" if color and sgr and text else text


def painted(text: str, verdict: Verdict, color: bool) -> str:
    """`text` in the colour of `verdict` (as the matrix paints it), or as it is without `color`."""
    return _paint(text, _SGR[verdict], color)


def _table(rows: Sequence[Sequence[tuple[str, str]]], color: bool) -> list[str]:
    """Columns padded on the plain text, then painted: colour never shifts alignment. A text holds no
    control character of its own (a pooler's name given by a team, a version a server reported)."""
    rows = [[(terminal_safe(text, newlines=False), sgr) for text, sgr in row] for row in rows]
    widths = [max(len(r[i][0]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        parts = [_paint(text, sgr, color) + " " * (w - len(text)) for (text, sgr), w in zip(row, widths, strict=False)]
        out.append("  ".join(parts).rstrip())
    return out


def _probe_label(probe: str, security: bool) -> tuple[str, str]:
    return (probe + " [security]", _SECURITY_SGR) if security else (probe, "")


def _width(rows: Sequence[Sequence[tuple[str, str]]]) -> int:
    """How wide `_table` draws these rows (two spaces between columns)."""
    columns = range(len(rows[0]))
    return sum(max(len(terminal_safe(r[i][0], newlines=False)) for r in rows) for i in columns) + 2 * (len(rows[0]) - 1)


def _fitting(rows: list[list[tuple[str, str]]], width: int) -> list[list[list[tuple[str, str]]]]:
    """The table cut into tables of consecutive columns, each with the row labels, each at most
    `width` wide (a column that cannot fit next to the labels gets a table of its own)."""
    tables: list[list[list[tuple[str, str]]]] = []
    chosen: list[int] = []
    for i in range(1, len(rows[0])):
        trial = [*chosen, i]
        if chosen and _width([[r[0], *(r[j] for j in trial)] for r in rows]) > width:
            tables.append([[r[0], *(r[j] for j in chosen)] for r in rows])
            trial = [i]
        chosen = trial
    tables.append([[r[0], *(r[j] for j in chosen)] for r in rows])
    return tables


def render_matrix(outcomes: Iterable[Outcome], *, color: bool = False, legend: bool = False,
                  width: int = WIDTH) -> str:
    """Pooled-route verdicts: one table per PostgreSQL version, probes as rows, pooler (with its
    settings) x driver as columns, and their totals (`render_totals`); then one line per control route,
    counted apart (a control's leak is what it must measure). A table wider than `width` (or
    with a column name longer than LONG_COLUMN) numbers its columns, with a key under it; one still
    too wide is cut into tables of consecutive columns. `color` adds ANSI colours (the caller
    decides: `use_color`, or pytest's terminal writer); `legend` explains the words."""
    results = list(outcomes)
    lines: list[str] = []
    for g in pooled_grids(results):
        body = []
        for p in g.probes:
            row = [_probe_label(p, p in g.security)]
            for c in g.columns:
                o = g.at(p, c)
                row.append((cell(o), _SGR[o.verdict]) if o is not None else ("-", ""))
            body.append(row)
        named = [[(g.title, _HEADER_SGR), *((c, _HEADER_SGR) for c in g.columns)], *body]
        long = any(len(c) > LONG_COLUMN for c in g.columns) or _width(named) > width
        names = [f"({i})" for i in range(1, len(g.columns) + 1)] if long else list(g.columns)
        header = [(g.title, _HEADER_SGR), *((n, _HEADER_SGR) for n in names)]
        lines.append("through the pooler (pooler[settings]/driver; the poolers leakcheck starts run a pool of one)")
        for part in _fitting([header, *body], width):
            lines += _table(part, color)
        if long:
            lines += [terminal_safe(f"  {n} {c}", newlines=False) for n, c in zip(names, g.columns, strict=True)]
        lines.append("")
    totals = render_totals(results)
    if totals:
        lines += [totals, ""]
    for route in CONTROL_ROUTES:
        controls = [o for o in results if o.route is route]
        if controls:
            lines.append(f"{route.value} control ({CONTROL[route]}): {render_counts(controls)}")
    if any(o.route is Route.SHARED for o in results):
        lines.append(f"({SHARED_RULE})")
    said = workarounds(results)
    if said:
        lines += ["", f"{TITLE}:", *(terminal_safe(f"  {line}", newlines=False) for line in said)]
    if legend and results:
        lines += ["", *render_legend(results, color=color).splitlines()]
    return "\n".join(lines).rstrip() + "\n" if lines else ""


def render_legend(outcomes: Iterable[Outcome], *, color: bool = False) -> str:
    """What the words of these outcomes' cells mean: each verdict seen, the `+fact` suffix, `[security]`."""
    results = list(outcomes)
    seen = {o.verdict for o in results}
    lines = ["legend:"]
    lines += [f"  {_paint(word(v), _SGR[v], color)}: {MEANING[v]}" for v in Verdict if v in seen]
    lines += [f"  {SUFFIX}"] if any(o.other_facts for o in results) else []
    lines += [f"  {SECURITY}"] if any(o.security for o in results) else []
    lines.append(f"  {MISSING}")
    return "\n".join(wrapped for line in lines for wrapped in _wrap(line)) + "\n"


def _wrap(line: str) -> list[str]:
    """A legend line cut at WIDTH columns (its ANSI codes, if any, count for nothing)."""
    if len(re.sub(r"\x1b\[[0-9;]*m", "", line)) <= WIDTH:
        return [line]
    return textwrap.wrap(line, WIDTH, initial_indent="", subsequent_indent="    ", break_on_hyphens=False)


def render_totals(outcomes: Iterable[Outcome]) -> str:
    """The answer in one line: the verdicts through the pooler, counted without the controls ("" if none)."""
    pooled = [o for o in outcomes if o.route is Route.TRANSACTION]
    return f"through the pooler, {len(pooled)} leak tests: {render_counts(pooled)}" if pooled else ""


def render_counts(outcomes: Iterable[Outcome]) -> str:
    counts: dict[Verdict, int] = {}
    for o in outcomes:
        counts[o.verdict] = counts.get(o.verdict, 0) + 1
    return ", ".join(f"{n} {v.value}" for v, n in sorted(counts.items(), key=lambda kv: kv[0].value))
