"""Reporters: pure functions from outcomes to text."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .verdicts import Outcome, Route, Verdict

_WORD = {
    Verdict.ISOLATED: "isolated",
    Verdict.LEAKS: "LEAKS",
    Verdict.LOST: "LOST",
    Verdict.BREAKS: "BREAKS",
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
    """Transaction-mode verdicts: one table per PostgreSQL version, probes as rows,
    PgBouncer version x driver as columns; then one line on the controls."""
    results = list(outcomes)
    main = [o for o in results if o.route is Route.TRANSACTION]
    lines: list[str] = []
    for pg in sorted({o.pg for o in main}, key=lambda v: v.parts):
        here = [o for o in main if o.pg == pg]
        columns = sorted({(o.bouncer, o.driver) for o in here}, key=lambda c: (c[0].parts if c[0] else (), c[1].value))
        probes = list(dict.fromkeys(o.probe for o in here))
        cells = {(o.probe, o.bouncer, o.driver): o for o in here}
        security = {o.probe for o in here if o.security}
        header = [f"PostgreSQL {pg}", *(f"{b}/{d.value}" for b, d in columns)]
        body = [[p + (" [security]" if p in security else ""),
                 *(cell(cells[(p, b, d)]) if (p, b, d) in cells else "-" for b, d in columns)] for p in probes]
        lines += ["pool_mode=transaction, default_pool_size=1 (PgBouncer version/driver)", *_table([header, *body]), ""]
    for route in (Route.DIRECT, Route.SESSION, Route.SHARED):
        controls = [o for o in results if o.route is route]
        if controls:
            counts = render_counts(controls)
            lines.append(f"{route.value} control ({_CONTROL[route]}): {counts}")
    if any(o.route is Route.SHARED for o in results):
        lines.append("(the shared control must measure leaks for session state and isolated for transaction state)")
    return "\n".join(lines).rstrip() + "\n" if lines else ""


_CONTROL = {
    Route.DIRECT: "two direct sessions, must be isolated",
    Route.SESSION: "pool_mode=session, must be isolated",
    Route.SHARED: "A and B on one direct session",
}


def render_counts(outcomes: Iterable[Outcome]) -> str:
    counts: dict[Verdict, int] = {}
    for o in outcomes:
        counts[o.verdict] = counts.get(o.verdict, 0) + 1
    return ", ".join(f"{n} {v.value}" for v, n in sorted(counts.items(), key=lambda kv: kv[0].value))
