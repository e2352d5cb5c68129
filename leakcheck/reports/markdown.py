"""A Markdown report that fits a pull-request comment: tables first, evidence and advice folded below.

GitHub refuses comments over 65,536 characters, so the text is cut at `limit` (60,000 by default,
leaving room for what a CI step adds): the tables come first, then the controls and the legend,
then one `<details>` per problem cell; what does not fit is counted in one "… N more" line.
Evidence is arbitrary SQL text: it is HTML-escaped inside `<pre>` (raw to Markdown, so nothing in
it can end the block), a summary is one line (a blank line would end its `<details>` block), every
table cell is escaped for Markdown, and control characters (ESC...) are shown escaped (`\\x1b`).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence

from leakcheck.model.safe_text import terminal_safe
from leakcheck.model.target import Route
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.reports.about import About
from leakcheck.reports.advice import advice
from leakcheck.reports.grid import CONTROL, CONTROL_ROUTES, SHARED_RULE, Grid, pooled_grids
from leakcheck.reports.terminal import render_counts
from leakcheck.reports.words import MEANING, MISSING, SECURITY, SUFFIX, cell, code_spans, detail, flagged, word
from leakcheck.reports.workarounds import TITLE, workarounds

#: Characters of one comment, below GitHub's 65,536 with room to spare.
LIMIT = 60_000
#: The smallest limit accepted: the title, counts and the cut note must fit.
MIN_LIMIT = 1_000
#: Room kept for the "… N more" note when a cut is needed.
_NOTE_ROOM = 400

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~])")
_SPACE = re.compile(r"\s+")


def md_text(text: str) -> str:
    """Plain text made inert in Markdown: special characters backslash-escaped, `&` as an entity,
    line breaks as spaces (a table cell is one line)."""
    flat = _SPACE.sub(" ", text)
    return _MD_SPECIAL.sub(r"\\\1", flat.replace("&", "&amp;"))


def md_advice(text: str) -> str:
    """Advice text (code between backticks) as Markdown: code spans kept, the rest escaped."""
    return code_spans(text, md_text, lambda code: f"`{code}`")


def _verdict_cell(o: Outcome | None) -> str:
    if o is None:
        return "-"
    text = md_text(cell(o))
    return f"**{text}**" if o.verdict.is_problem or o.verdict is Verdict.ERROR else text


def md_table(g: Grid) -> list[str]:
    """The header (with its separator) then one line per probe."""
    head = "| probe | " + " | ".join(md_text(c) for c in g.columns) + " |"
    lines = [f"{head}\n|---|" + "---|" * len(g.columns)]
    for p in g.probes:
        label = md_text(p) + (" **\\[security\\]**" if p in g.security else "")
        lines.append(f"| {label} | " + " | ".join(_verdict_cell(g.at(p, c)) for c in g.columns) + " |")
    return lines


def _details(o: Outcome) -> str:
    """One problem cell folded: the summary line, the evidence (raw HTML, escaped), the advice."""
    # one line: a blank line would end the HTML block, and what follows it would render as Markdown
    summary = html.escape(_SPACE.sub(" ", f"{o.probe}{' [security]' if o.security else ''} · {o.column}: {cell(o)}"))
    body = "\n".join([o.evidence, *(": ".join(detail(k, v)) for k, v in o.details)])
    tip = advice(o)
    parts = [f"<details><summary>{summary}</summary>", "", f"<pre>{html.escape(body, quote=False)}</pre>", ""]
    if tip is not None:
        parts += [f"**What to do:** {md_advice(tip)}", ""]
    return "\n".join([*parts, "</details>"])


def md_legend(outcomes: Sequence[Outcome]) -> str:
    seen = {o.verdict for o in outcomes}
    lines = [f"- **{md_text(word(v))}**: {md_text(MEANING[v])}" for v in Verdict if v in seen]
    lines += [f"- {md_text(SUFFIX)}"] if any(o.other_facts for o in outcomes) else []
    lines += [f"- {md_text(SECURITY)}"] if any(o.security for o in outcomes) else []
    return "\n".join(["<sub>", "", *lines, f"- {md_text(MISSING)}", "", "</sub>"])


def md_controls(outcomes: Sequence[Outcome]) -> str | None:
    lines = [f"- {route.value} control ({CONTROL[route]}): {render_counts(c)}"
             for route in CONTROL_ROUTES if (c := [o for o in outcomes if o.route is route])]
    if not lines:
        return None
    rule = [f"\n({SHARED_RULE})"] if any(o.route is Route.SHARED for o in outcomes) else []
    return "\n".join(["### Controls", "", *lines, *rule])


def md_about(about: About | None) -> str:
    """The header's lines on the run: when, which leakcheck, on which servers ("" without one)."""
    if about is None:
        return ""
    servers = "".join(f"- {md_text(line)}\n" for line in about.servers)
    return f"{md_text(about.headline())}{', on:' if servers else ''}\n\n{servers}{chr(10) if servers else ''}"


def render_markdown(outcomes: Iterable[Outcome], *, title: str = "leakcheck", limit: int = LIMIT,
                    about: About | None = None) -> str:
    """The report as Markdown of at most `limit` characters (at least MIN_LIMIT)."""
    if limit < MIN_LIMIT:
        raise ValueError(f"a Markdown report needs a limit of at least {MIN_LIMIT} characters, not {limit}")
    results = list(outcomes)
    grids = pooled_grids(results)
    head = f"## {md_text(title)}\n\n{md_about(about)}verdicts: {md_text(render_counts(results)) or 'none'}\n\n"
    chunks: list[tuple[str, str]] = []  # (text with its line ends, the unit a cut counts it as)
    for g in grids:
        header, *rows = md_table(g)
        chunks += [(f"### {md_text(g.title)}\n\n{header}\n", "table"), *((f"{r}\n", "table row") for r in rows)]
        chunks.append(("\n", ""))  # the blank line that ends a table
    controls = md_controls(results)
    chunks += [(f"{controls}\n\n", "section")] if controls else []
    said = workarounds(results)
    chunks += [(f"### {md_text(TITLE)}\n\n" + "".join(f"- {md_text(line)}\n" for line in said) + "\n", "section")
               ] if said else []
    chunks += [(f"{md_legend(results)}\n\n", "section")] if results else []
    problems = [o for g in grids for o in g.outcomes() if flagged(o)]
    if problems:
        chunks.append((f"### Evidence and advice ({len(problems)} problem cells)\n\n", "section"))
        chunks += [(f"{_details(o)}\n\n", "problem cell") for o in problems]
    # a control character (ESC...) is shown escaped, as the terminal report shows it, before the cut counts it
    return _fit(terminal_safe(head), [(terminal_safe(c), unit) for c, unit in chunks], limit)


def _fit(head: str, chunks: Sequence[tuple[str, str]], limit: int) -> str:
    """`head` and the chunks in order while they fit; what is left is counted in one closing note."""
    text, left = head, sum(len(c) for c, _ in chunks)
    for i, (chunk, _) in enumerate(chunks):
        if len(text) + left <= limit:  # everything left fits: no note needed
            return (text + "".join(c for c, _ in chunks[i:])).rstrip("\n") + "\n"
        if len(text) + len(chunk) > limit - _NOTE_ROOM:
            return text + "\n" + _note(chunks[i:], limit)
        text, left = text + chunk, left - len(chunk)
    return text.rstrip("\n") + "\n"


def _note(dropped: Sequence[tuple[str, str]], limit: int) -> str:
    counts: dict[str, int] = {}
    for _, unit in dropped:
        if unit:
            counts[unit] = counts.get(unit, 0) + 1
    what = ", ".join(f"{n} more {unit}{'s' if n != 1 else ''}" for unit, n in counts.items())
    return (f"**… {what} not shown** (this report is cut at {limit} characters to fit a comment): "
            "the HTML report (`--report-html`) and the results file (`--results`) hold everything.\n")
