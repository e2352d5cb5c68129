"""Reporters: pure functions from outcomes to text."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .verdicts import Outcome, Route, Verdict

_WORD = {
    Verdict.ISOLATED: "isolated",
    Verdict.LEAKS: "LEAKS",
    Verdict.LOST: "LOST",
    Verdict.BREAKS: "BREAKS",
    Verdict.NOT_APPLICABLE: "n/a",
    Verdict.ERROR: "error",
    Verdict.SKIPPED: "skipped",
}


def word(verdict: Verdict) -> str:
    return _WORD[verdict]


def cell(outcome: Outcome) -> str:
    """The verdict, then any other fact it saw: `BREAKS+leaked`, `isolated+misreported`."""
    return "+".join([word(outcome.verdict), *outcome.other_facts])


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in rows]


def render_matrix(outcomes: Iterable[Outcome]) -> str:
    """Pooled-route verdicts: one table per PostgreSQL version, probes as rows, pooler (with its
    settings) x driver as columns; then one line on the controls."""
    results = list(outcomes)
    main = [o for o in results if o.route is Route.TRANSACTION]
    lines: list[str] = []
    for pg in sorted({o.pg for o in main}, key=lambda v: v.parts):
        here = [o for o in main if o.pg == pg]
        columns = list(dict.fromkeys(_column(o) for o in canonical_order(here)))
        probes = list(dict.fromkeys(o.probe for o in here))
        cells = {(o.probe, _column(o)): o for o in here}
        security = {o.probe for o in here if o.security}
        # Long column names (settings axes) become numbers, named under the table.
        legend = any(len(c) > LONG_COLUMN for c in columns)
        names = [f"({i})" for i in range(1, len(columns) + 1)] if legend else columns
        header = [f"PostgreSQL {pg}", *names]
        body = [[p + (" [security]" if p in security else ""),
                 *(cell(cells[(p, c)]) if (p, c) in cells else "-" for c in columns)] for p in probes]
        lines += ["through the pooler (pooler[settings]/driver; the poolers leakcheck starts run a pool of one)",
                  *_table([header, *body])]
        lines += [f"  {n} {c}" for n, c in zip(names, columns, strict=True)] if legend else []
        lines.append("")
    for route in (Route.DIRECT, Route.SESSION, Route.SHARED):
        controls = [o for o in results if o.route is route]
        if controls:
            counts = render_counts(controls)
            lines.append(f"{route.value} control ({_CONTROL[route]}): {counts}")
    if any(o.route is Route.SHARED for o in results):
        lines.append("(the shared control must measure leaks for session state and isolated for transaction state)")
    return "\n".join(lines).rstrip() + "\n" if lines else ""


#: Column names longer than this are numbered, with a legend under the table.
LONG_COLUMN = 40


def _column(o: Outcome) -> str:
    return f"{o.pooler.label() if o.pooler else '-'}/{o.target.client}"


def canonical_order(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """By pooler kind, version, settings, then driver (the columns' order)."""
    def key(o: Outcome) -> tuple[object, ...]:
        p = o.pooler
        return ((p.kind.value, p.version.parts if p.version else (), p.settings, p.config) if p else (),
                o.driver.value)
    return sorted(outcomes, key=key)


_CONTROL = {
    Route.DIRECT: "two direct sessions, must be isolated",
    Route.SESSION: "the pooler in session mode, must be isolated",
    Route.SHARED: "A and B on one direct session",
}


def render_counts(outcomes: Iterable[Outcome]) -> str:
    counts: dict[Verdict, int] = {}
    for o in outcomes:
        counts[o.verdict] = counts.get(o.verdict, 0) + 1
    return ", ".join(f"{n} {v.value}" for v, n in sorted(counts.items(), key=lambda kv: kv[0].value))
