"""One self-contained HTML page: the matrix in verdict colours, filters, and per cell its evidence and advice.

Nothing is fetched: the style and script are inline and the page's Content-Security-Policy admits
exactly those two, by their sha256 hashes. Every text from an outcome (evidence holds arbitrary SQL)
is HTML-escaped. Cells carry stable hooks for tests and scripts: `data-testid="cell"`, `data-probe`, `data-column`,
`data-grid`, `data-verdict`, `data-detail` (the id of its hidden details article).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable

from leakcheck.model.target import Route
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.probes import PROBES
from leakcheck.reports.about import About
from leakcheck.reports.advice import advice
from leakcheck.reports.grid import SHARED_RULE, Grid, control_grids, pooled_grids
from leakcheck.reports.html_assets import CSP, CSS, JS
from leakcheck.reports.terminal import render_counts
from leakcheck.reports.words import (
    FACT_MEANING,
    MEANING,
    MISSING,
    SECURITY,
    SUFFIX,
    cell,
    code_spans,
    detail,
    word,
)
from leakcheck.reports.workarounds import TITLE, workarounds

_STATE = {p.id: p.state for p in PROBES}


def esc(text: object) -> str:
    """Text for an HTML element or a quoted attribute."""
    return html.escape(str(text), quote=True)


def advice_html(text: str) -> str:
    """Advice (code between backticks) as escaped HTML with <code> spans."""
    return code_spans(text, esc, lambda code: f"<code>{esc(code)}</code>")


def _article(key: str, grid_title: str, o: Outcome) -> str:
    """A cell's details, hidden in the page until its cell is clicked (the script copies it to the panel)."""
    pooler = o.pooler.label() if o.pooler else "none (direct to PostgreSQL)"
    rows = [("probe", o.probe + (" [security]" if o.security else "")), ("state", _STATE.get(o.probe, "")),
            ("verdict", cell(o)), ("facts", ", ".join(o.facts) or "none"), ("table", grid_title),
            ("PostgreSQL", str(o.pg)), ("pooler", pooler), ("route", o.route.value), ("driver", o.target.client),
            *(detail(k, v) for k, v in o.details)]
    facts = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows if v)
    tip = advice(o)
    said = (f'<h4>What to do</h4><p data-testid="advice">{advice_html(tip)}</p>' if tip is not None
            else '<p data-testid="advice" class="none">Nothing to do: this cell measured no problem.</p>')
    return (f'<article id="{key}" data-testid="cell-details" hidden><h3>{esc(o.probe)} · {esc(o.column)}</h3>'
            f'<dl>{facts}</dl><h4>Evidence</h4><pre data-testid="evidence">{esc(o.evidence)}</pre>{said}</article>')


def _breakable(text: str) -> str:
    """Escaped, with line-break chances after `/` and `+` and before a version (`pgbouncer<wbr>1.24.1`), so
    a narrow column wraps instead of widening the table."""
    # split before escaping: `&#x27;` (an apostrophe) has a letter before a digit too
    return "<wbr>".join(esc(piece) for piece in re.split(r"(?<=[/+])|(?<=[a-z])(?=[0-9])", text))


def _table(g: Grid, section: str, keys: dict[tuple[str, str, str], str]) -> str:
    """A grid as a table; each cell's details key is recorded in `keys` (by grid title, probe and column)."""
    head = "".join(f'<th scope="col">{_breakable(c)}</th>' for c in g.columns)
    body = []
    for p in g.probes:
        secure = p in g.security
        mark = '<span class="sec" title="the state guards data or identity">security</span>' if secure else ""
        cells = []
        for c in g.columns:
            o = g.at(p, c)
            if o is None:
                cells.append('<td class="missing">-</td>')
                continue
            key = keys.setdefault((g.title, p, c), f"d{len(keys) + 1}")
            cells.append(f'<td class="cell v-{o.verdict.value}" tabindex="0" data-testid="cell" data-probe="{esc(p)}" '
                         f'data-column="{esc(c)}" data-grid="{esc(g.title)}" data-verdict="{o.verdict.value}" '
                         f'data-detail="{key}" title="{esc(MEANING[o.verdict])}">{_breakable(cell(o))}</td>')
        body.append(f'<tr data-testid="row" data-probe="{esc(p)}" data-security="{str(secure).lower()}">'
                    f'<th scope="row">{esc(p)}{mark}</th>{"".join(cells)}</tr>')
    return (f'<section data-grid="{esc(g.title)}" data-section="{section}"><h2>{esc(g.title)}</h2><table>'
            f'<thead><tr><th scope="col">probe</th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></section>')


def _filters(verdicts: list[Verdict]) -> str:
    boxes = "".join(f'<label class="v-{v.value}"><input type="checkbox" data-verdict-filter value="{v.value}" '
                    f'data-testid="verdict-filter-{v.value}" checked> {esc(word(v))}</label>' for v in verdicts)
    return ('<section class="filters" data-testid="filters"><label>probe <input type="search" id="probe-filter" '
            'data-testid="probe-filter" placeholder="part of a probe id" autocomplete="off"></label>'
            f'<fieldset><legend>verdicts</legend>{boxes}</fieldset><label><input type="checkbox" '
            'id="security-filter" data-testid="security-filter"> security probes only</label></section>')


def _legend(verdicts: list[Verdict], shared: bool) -> str:
    rows = [f'<dt><span class="v-{v.value}">{esc(word(v))}</span></dt><dd>{esc(MEANING[v])}</dd>' for v in verdicts]
    rows += [f"<dt>+{esc(f.value)}</dt><dd>{esc(FACT_MEANING[f])}</dd>" for f in FACT_MEANING]
    notes = "".join(f"<li>{esc(n)}</li>" for n in (SUFFIX, SECURITY, MISSING, *([SHARED_RULE] if shared else [])))
    return (f'<section class="legend" data-testid="legend"><h2>Legend</h2><dl>{"".join(rows)}</dl>'
            f"<ul>{notes}</ul><p>Click a cell (or focus it and press Enter) to see its evidence and advice.</p>"
            "</section>")


def _about(about: About | None) -> str:
    """The header's lines on the run: when, which leakcheck, on which servers ("" without one)."""
    if about is None:
        return ""
    servers = "".join(f"<li>{esc(line)}</li>" for line in about.servers)
    return (f'<p data-testid="about">{esc(about.headline())}{", on:" if servers else ""}</p>'
            + (f'<ul data-testid="servers">{servers}</ul>' if servers else ""))


def render_html(outcomes: Iterable[Outcome], *, title: str = "leakcheck report", about: About | None = None) -> str:
    """The whole page as one string (no I/O; nothing in it loads anything)."""
    results = list(outcomes)
    verdicts = [v for v in Verdict if any(o.verdict is v for o in results)]
    keys: dict[tuple[str, str, str], str] = {}
    grids = [(g, "pooled") for g in pooled_grids(results)] + [(g, "control") for _, g in control_grids(results)]
    tables = "".join(_table(g, section, keys) for g, section in grids)
    articles = "".join(_article(keys[(g.title, p, c)], g.title, o) for g, _ in grids
                       for p in g.probes for c in g.columns if (o := g.at(p, c)) is not None)
    legend = _legend(verdicts, any(o.route is Route.SHARED for o in results))
    said = workarounds(results)
    if said:
        items = "".join(f"<li>{esc(line)}</li>" for line in said)
        legend = f'<section data-testid="workarounds"><h2>{esc(TITLE)}</h2><ul>{items}</ul></section>{legend}'
    empty = "" if results else '<p data-testid="empty">No outcomes: nothing was measured.</p>'
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc(title)}</title>'
        f"<style>{CSS}</style></head>\n<body><header><h1>{esc(title)}</h1>{_about(about)}"
        f'<p data-testid="counts">verdicts: {esc(render_counts(results) or "none")}</p></header>'
        f"{_filters(verdicts)}{empty}"
        f'<div class="layout"><main class="tables">{tables}</main>'
        f'<aside id="panel" data-testid="details-panel" aria-live="polite">Click a cell to see its evidence and '
        f"advice.</aside></div>\n{legend}<div hidden>{articles}</div>\n<script>{JS}</script></body></html>\n"
    )
