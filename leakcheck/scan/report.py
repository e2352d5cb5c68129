"""A scan's reports, each a pure function of one `Scan` (no I/O): terminal, Markdown, HTML, JSON and JUnit.

Every report says the same, in this order: what was read (inputs, statements, what did not parse),
where the verdicts come from and the target cells, then one section per class of the workload
(session-scoped first): its status (`AFFECTED`: a probe fails at the `--fail-on` threshold on some
cell; `ERROR`: nothing fails but a cell could not be measured; `ok`: measured, nothing fails;
`unmeasured`: its probes are not in the verdicts; `no probe`: no probe measures it), its normalized
statements with how often and where they ran, its probes' verdicts per cell, and what to do (the
class's own advice, and each failing cell's measured advice).

The JSON report (schema `leakcheck-scan`, version 1):

    {"schema": "leakcheck-scan", "version": 1, "fail_on": "leaks", "failed": true,
     "inputs": [{"path": "app.log", "kind": "stderr", "statements": 1200}],
     "statements": 1200, "unparsed": 3, "unparsed_examples": [{"where": "app.log:7", "text": "SELEC 1"}],
     "drivers": {"pgjdbc": 40},
     "verdicts": "results.json", "cells": ["pg16.14/pgbouncer1.24.1/psycopg3.3.9"], "problems": [],
     "classes": [{"key": "set:statement_timeout", "label": "SET statement_timeout", "scope": "session",
                  "status": "affected", "count": 120, "more": 0,
                  "statements": [{"text": "SET statement_timeout = $1", "count": 120, "sources": ["app.log:12"]}],
                  "probes": [{"probe": "statement_timeout", "outcomes": [{"cell": "...", "verdict": "leaks",
                              "facts": ["leaked"], "fails": true, "evidence": "...", "advice": "..."}]}],
                  "advice": "A session `SET` outlives ..."}]}

JUnit: one test case per (class, cell), failed when a probe of the class fails there, skipped when none
of its probes was measured there; a class no probe measures is one skipped case; each problem of the
verdicts (a failed control, a test that measured nothing) one failed case.
"""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from typing import Any

from leakcheck.model.safe_text import terminal_safe, xml_safe
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.reports.advice import advice
from leakcheck.reports.html_assets import CSS, csp_hash
from leakcheck.reports.markdown import md_advice, md_text
from leakcheck.reports.terminal import painted
from leakcheck.reports.words import MEANING, cell, code_spans
from leakcheck.scan.mapping import advice_for
from leakcheck.scan.verdicts import Row, Scan, fails

SCHEMA, VERSION = "leakcheck-scan", 1
#: Statements shown per class in the Markdown report (the others are in the JSON and HTML reports).
MD_STATEMENTS = 5
_CSP = f"default-src 'none'; style-src {csp_hash(CSS)}; base-uri 'none'; form-action 'none'"


def status(row: Row) -> str:
    """affected, error (a cell could not be measured; nothing else fails), ok, unmeasured or no probe."""
    if not row.probes:
        return "no probe"
    if row.failing:
        return "error" if all(o.verdict is Verdict.ERROR for o in row.failing) else "affected"
    return "ok" if row.measured else "unmeasured"


def _n(count: int, what: str) -> str:
    plural = "es" if what.endswith("s") else "s"
    return f"{count:,} {what}{'' if count == 1 else plural}"


#: Measured advice lines a class shows in the terminal and Markdown reports (the others: HTML and JSON).
SHOWN_ADVICE = 2


def _advice_lines(row: Row, shown: int | None = None) -> list[str]:
    """The class's own advice, then each distinct measured advice of its failing outcomes (the first
    `shown` of them, and how many more there are)."""
    measured: list[str] = []
    for o in row.failing:
        tip = advice(o)
        if tip is not None and tip not in measured:
            measured.append(tip)
    more = len(measured) - shown if shown is not None and len(measured) > shown else 0
    cut = measured[:shown] if shown is not None else measured
    return [advice_for(row.effect), *cut, *([f"({more} more measured advice in the HTML and JSON reports)"]
                                            if more else [])]


def _heading(row: Row) -> str:
    found = row.found
    return f"{found.effect.label} ({found.effect.scope.value}), {_n(found.count, 'statement')}"


def summary(scan: Scan) -> str:
    """The closing line: how many classes are affected, on how many cells, at which threshold."""
    rows = scan.rows
    unprobed = sum(1 for r in rows if not r.probes)
    unmeasured = sum(1 for r in rows if r.probes and not r.measured)
    errors = sum(1 for r in rows if status(r) == "error")
    parts = [f"{len(scan.affected) - errors} of {_n(len(rows), 'class')} affected on {_n(len(scan.cells), 'cell')} "
             f"(--fail-on={scan.fail_on})"]
    parts += [f"{errors} could not be measured (an error)"] if errors else []
    parts += [f"{unprobed} no probe measures"] if unprobed else []
    parts += [f"{unmeasured} not in the verdicts"] if unmeasured else []
    parts += [f"{_n(len(scan.problems), 'problem')} measuring"] if scan.problems else []
    return "; ".join(parts)


def _intro(scan: Scan) -> list[str]:
    w = scan.workload
    lines = [f"{_n(w.statements, 'statement')} read from {_n(len(w.inputs), 'input')}"
             + (f" ({w.unparsed:,} not parsed)" if w.unparsed else "")
             + f", {_n(len(scan.rows), 'class')} with a session effect"]
    lines += [f"  {i.path} ({i.kind}): {_n(i.statements, 'statement')}" for i in w.inputs]
    named = {d: n for d, n in w.drivers.items() if d != "?"}
    if named:
        lines.append("prepared statement names follow the naming of: "
                     + ", ".join(f"{d} ({n:,})" for d, n in sorted(named.items())))
    measured = {o.driver.value for o in scan.verdicts.outcomes} if scan.verdicts is not None else set()
    missing = sorted(set(named) - measured)
    if measured and missing:
        lines.append(f"hint: the cells measure {', '.join(sorted(measured))}, not {', '.join(missing)}: give "
                     f"--drivers={','.join(missing)} (or results of them) for their prepared statements' verdicts")
    return lines


# --- terminal ------------------------------------------------------------------------------------


def _verdict_text(o: Outcome | None, color: bool) -> tuple[str, str]:
    """The cell's word and the same painted (the plain one measures the column)."""
    if o is None:
        return "-", "-"
    return cell(o), painted(cell(o), o.verdict, color)


def _probe_table(row: Row, cells: Sequence[str], color: bool) -> list[str]:
    """The class's probes (rows) by the numbered cells (columns), padded on the plain words."""
    if not row.probes or not cells:
        return [f"  probes: {', '.join(row.probes)} (not measured)"] if row.probes else []
    said = {p: [_verdict_text(row.outcomes.get(p, {}).get(c), color) for c in cells] for p in row.probes}
    widths = [max(len(f"({i})"), *(len(said[p][i - 1][0]) for p in row.probes)) for i in range(1, len(cells) + 1)]
    first = max(len("probe"), *(len(p) for p in row.probes))
    lines = [f"  {'probe':<{first}}  " + "  ".join(f"({i})".ljust(w) for i, w in enumerate(widths, 1)).rstrip()]
    for p in row.probes:
        lines.append(f"  {p:<{first}}  " + "  ".join(painted_text + " " * (w - len(plain)) for (plain, painted_text), w
                                                   in zip(said[p], widths, strict=True)).rstrip())
    return lines


def render_terminal(scan: Scan, *, color: bool = False) -> str:
    """The scan as text (ANSI colours on the verdicts when `color`)."""
    lines = [f"leakcheck scan: {line}" if i == 0 else line for i, line in enumerate(_intro(scan))]
    cells = scan.cells
    if scan.verdicts is not None:
        lines.append(f"verdicts: {scan.verdicts.source}, {_n(len(cells), 'cell')}:")
        lines += [f"  ({i}) {c}" for i, c in enumerate(cells, 1)]
    for row in scan.rows:
        lines += ["", f"{status(row).upper() if row.failing else status(row)}: {_heading(row)}"]
        for seen in row.found.statements.values():
            lines.append(f"  x{seen.count:<6,} {' '.join(seen.text.split())}    {', '.join(seen.sources)}")
        if row.found.more:
            lines.append(f"  x{row.found.more:<6,} (more statements, not listed)")
        lines += _probe_table(row, cells, color)
        lines += [f"  what to do: {line}" for line in _advice_lines(row, SHOWN_ADVICE)]
    if scan.workload.unparsed_examples:
        lines += ["", f"not parsed ({scan.workload.unparsed:,}), e.g.:"]
        lines += [f"  {where}: {text[:120]}" for where, text in scan.workload.unparsed_examples]
    lines += ["", *(f"PROBLEM {p}" for p in scan.problems)] if scan.problems else []
    lines += ["", f"leakcheck scan: {summary(scan)}"]
    return "\n".join(terminal_safe(line) for line in lines) + "\n"


# --- Markdown ------------------------------------------------------------------------------------


def _md_cell(o: Outcome | None, fail_on: str) -> str:
    if o is None:
        return "-"
    text = md_text(cell(o))
    return f"**{text}**" if fails(o, fail_on) else text


def _md_code(text: str) -> str:
    """SQL in a table cell: an HTML code element (escaped; `|` as an entity, so the table holds), on one line."""
    return f"<code>{html.escape(' '.join(text.split()), quote=False).replace('|', '&#124;')}</code>"


def render_markdown(scan: Scan, *, title: str = "leakcheck scan") -> str:
    """The scan as Markdown for a pull-request comment or a job summary."""
    lines = [f"## {md_text(title)}", "", *(md_text(line.strip()) for line in _intro(scan)[:1]), ""]
    lines += [f"- `{md_text(i.path)}` ({i.kind}): {_n(i.statements, 'statement')}" for i in scan.workload.inputs]
    cells = scan.cells
    if scan.verdicts is not None:
        lines += ["", f"Verdicts: {md_text(scan.verdicts.source)}, {_n(len(cells), 'cell')}."]
    for row in scan.rows:
        word = status(row)
        lines += ["", f"### {f'**{word.upper()}**' if row.failing else md_text(word)}: {md_text(_heading(row))}", "",
                  "| runs | statement | where |", "|---:|---|---|"]
        shown = sorted(row.found.statements.values(), key=lambda s: -s.count)
        lines += [f"| {s.count:,} | {_md_code(s.text[:200])} | {md_text(', '.join(s.sources))} |"
                  for s in shown[:MD_STATEMENTS]]
        left = sum(s.count for s in shown[MD_STATEMENTS:]) + row.found.more
        lines += [f"| {left:,} | (more statements) | |"] if left else []
        if row.probes and cells:
            lines += ["", "| probe | " + " | ".join(md_text(c) for c in cells) + " |",
                      "|---|" + "---|" * len(cells)]
            lines += [f"| {md_text(p)} | " + " | ".join(_md_cell(row.outcomes.get(p, {}).get(c), scan.fail_on)
                                                       for c in cells) + " |" for p in row.probes]
        elif row.probes:
            lines += ["", f"Probes: {md_text(', '.join(row.probes))} (not measured)."]
        lines += [""] + [f"**What to do:** {md_advice(line)}" if i == 0 else f"- {md_advice(line)}"
                         for i, line in enumerate(_advice_lines(row, SHOWN_ADVICE))]
    if scan.problems:
        lines += ["", "### Problems measuring", ""] + [f"- {md_text(p)}" for p in scan.problems]
    lines += ["", f"**{md_text(summary(scan))}**"]
    return "\n".join(lines) + "\n"


# --- HTML ----------------------------------------------------------------------------------------


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _html_advice(text: str) -> str:
    return code_spans(text, _esc, lambda code: f"<code>{_esc(code)}</code>")


def _html_row(row: Row, cells: Sequence[str]) -> str:
    statements = "".join(f"<tr><td>{s.count:,}</td><td><pre>{_esc(s.text)}</pre></td><td>{_esc(', '.join(s.sources))}"
                         f"</td></tr>" for s in row.found.statements.values())
    statements += f"<tr><td>{row.found.more:,}</td><td>(more statements)</td><td></td></tr>" if row.found.more else ""
    table = ""
    if row.probes:
        head = "".join(f'<th scope="col">{_esc(c)}</th>' for c in cells)
        body = ""
        for p in row.probes:
            tds = ""
            for c in cells:
                o = row.outcomes.get(p, {}).get(c)
                tds += ('<td class="missing">-</td>' if o is None else
                        f'<td class="v-{o.verdict.value}" title="{_esc(MEANING[o.verdict])}" data-probe="{_esc(p)}" '
                        f'data-cell="{_esc(c)}" data-verdict="{o.verdict.value}">{_esc(cell(o))}</td>')
            body += f'<tr><th scope="row">{_esc(p)}</th>{tds}</tr>'
        table = f'<table><thead><tr><th scope="col">probe</th>{head}</tr></thead><tbody>{body}</tbody></table>'
    said = "".join(f"<li>{_html_advice(line)}</li>" for line in _advice_lines(row))
    evidence = "".join(f"<details><summary>{_esc(o.probe)} · {_esc(o.column)}: {_esc(cell(o))}</summary>"
                       f"<pre>{_esc(o.evidence)}</pre></details>" for o in row.failing)
    return (f'<section data-testid="class" data-class="{_esc(row.effect.key)}" data-status="{status(row)}">'
            f"<h2>{_esc(status(row).upper() if row.failing else status(row))}: {_esc(_heading(row))}</h2>"
            f'<table><thead><tr><th scope="col">runs</th><th scope="col">statement</th><th scope="col">where</th>'
            f"</tr></thead><tbody>{statements}</tbody></table>{table}<h3>What to do</h3><ul>{said}</ul>{evidence}"
            "</section>")


def render_html(scan: Scan, *, title: str = "leakcheck scan") -> str:
    """One self-contained page (inline style only, admitted by its hash; nothing in it loads anything)."""
    intro = "".join(f"<p>{_esc(line)}</p>" for line in _intro(scan))
    source = (f"<p>verdicts: {_esc(scan.verdicts.source)}, {_esc(_n(len(scan.cells), 'cell'))}</p>"
              if scan.verdicts is not None else "")
    problems = ("<section><h2>Problems measuring</h2><ul>" + "".join(f"<li>{_esc(p)}</li>" for p in scan.problems)
                + "</ul></section>") if scan.problems else ""
    rows = "".join(_html_row(r, scan.cells) for r in scan.rows)
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_esc(title)}</title>'
            f"<style>{CSS}</style></head>\n<body><header><h1>{_esc(title)}</h1>{intro}{source}</header>\n"
            f'<main>{rows}{problems}</main>\n<p data-testid="summary"><strong>{_esc(summary(scan))}</strong></p>'
            "</body></html>\n")


# --- JSON ----------------------------------------------------------------------------------------


def _outcome_json(o: Outcome, fail_on: str) -> dict[str, Any]:
    return {"cell": o.column, "verdict": o.verdict.value, "facts": [str(f) for f in o.facts],
            "fails": fails(o, fail_on), "evidence": o.evidence, "advice": advice(o)}


def as_json(scan: Scan) -> dict[str, Any]:
    w = scan.workload
    return {
        "schema": SCHEMA, "version": VERSION, "fail_on": scan.fail_on, "failed": scan.failed,
        "inputs": [{"path": i.path, "kind": i.kind, "statements": i.statements} for i in w.inputs],
        "statements": w.statements, "unparsed": w.unparsed,
        "unparsed_examples": [{"where": where, "text": text} for where, text in w.unparsed_examples],
        "drivers": dict(sorted(w.drivers.items())),
        "verdicts": scan.verdicts.source if scan.verdicts is not None else None,
        "cells": list(scan.cells), "problems": list(scan.problems),
        "classes": [{
            "key": r.effect.key, "label": r.effect.label, "scope": r.effect.scope.value, "status": status(r),
            "count": r.found.count, "more": r.found.more,
            "statements": [{"text": s.text, "count": s.count, "sources": s.sources}
                           for s in r.found.statements.values()],
            "probes": [{"probe": p,
                        "outcomes": [_outcome_json(o, scan.fail_on) for o in r.outcomes.get(p, {}).values()]}
                       for p in r.probes],
            "advice": advice_for(r.effect),
        } for r in scan.rows],
        "summary": summary(scan),
    }


def render_json(scan: Scan) -> str:
    return json.dumps(as_json(scan), indent=2, ensure_ascii=True) + "\n"


# --- JUnit ---------------------------------------------------------------------------------------


def _element(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    child = ET.SubElement(parent, tag, {k: xml_safe(v) for k, v in attrs.items()})
    if text is not None:
        child.text = xml_safe(text)
    return child


def _cases(scan: Scan) -> Iterable[tuple[str, list[tuple[str, str]], str | None, str | None]]:
    """(name, properties, failure, skipped) per test case."""
    for row in scan.rows:
        props = [("class", row.effect.label), ("scope", row.effect.scope.value), ("statements", str(row.found.count)),
                 ("probes", ",".join(row.probes) or "-")]
        if not row.probes:
            yield row.effect.key, props, None, "no probe measures it"
            continue
        for c in scan.cells or ("(no cell)",):
            here = [o for p in row.probes if (o := row.outcomes.get(p, {}).get(c)) is not None]
            said = [*props, ("cell", c), *((o.probe, cell(o)) for o in here)]
            failing = [o for o in here if fails(o, scan.fail_on)]
            if failing:
                why = "; ".join(f"{o.probe}: {cell(o)}: {o.evidence}" for o in failing)
                yield f"{row.effect.key}[{c}]", said, why, None
            elif not here:
                yield f"{row.effect.key}[{c}]", said, None, "its probes were not measured on this cell"
            else:
                yield f"{row.effect.key}[{c}]", said, None, None
    for i, problem in enumerate(scan.problems, 1):
        yield f"problem[{i}]", [], problem, None


def render_junit(scan: Scan) -> str:
    root = ET.Element("testsuites")
    cases = list(_cases(scan))
    suite = _element(root, "testsuite", name="leakcheck scan", tests=str(len(cases)),
                     failures=str(sum(1 for c in cases if c[2] is not None)), errors="0",
                     skipped=str(sum(1 for c in cases if c[3] is not None)))
    for name, props, failure, skipped in cases:
        case = _element(suite, "testcase", classname="leakcheck.scan", name=name)
        if props:
            holder = _element(case, "properties")
            for key, value in props:
                _element(holder, "property", name=key, value=value)
        if failure is not None:
            _element(case, "failure", failure, message=failure[:500])
        elif skipped is not None:
            _element(case, "skipped", skipped, type="pytest.skip", message=skipped)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
