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


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in rows]


def render_matrix(outcomes: Iterable[Outcome]) -> str:
    """Transaction-mode verdicts: one table per PostgreSQL version, probes as rows,
    PgBouncer version x driver as columns; then one line on the controls."""
    results = list(outcomes)
    main = [o for o in results if o.route is Route.TRANSACTION]
    lines: list[str] = []
    for pg in sorted({o.pg for o in main}, key=_version_key):
        here = [o for o in main if o.pg == pg]
        columns = sorted({(o.bouncer, o.driver) for o in here}, key=lambda c: (_version_key(c[0]), c[1]))
        probes = list(dict.fromkeys(o.probe for o in here))
        cell = {(o.probe, o.bouncer, o.driver): o.verdict for o in here}
        header = [f"PostgreSQL {pg}", *(f"{b}/{d}" for b, d in columns)]
        body = [[p, *(word(cell[(p, b, d)]) if (p, b, d) in cell else "-" for b, d in columns)] for p in probes]
        lines += ["pool_mode=transaction, default_pool_size=1 (PgBouncer version/driver)", *_table([header, *body]), ""]
    controls = [o for o in results if o.route is not Route.TRANSACTION]
    if controls:
        bad = [o for o in controls if o.verdict is not Verdict.ISOLATED]
        lines.append(
            f"controls (direct sessions, pool_mode=session): {len(controls) - len(bad)} of {len(controls)} isolated"
            + ("" if not bad else "; NOT isolated: " + ", ".join(f"{o.column}/{o.probe}" for o in bad))
        )
    return "\n".join(lines).rstrip() + "\n" if lines else ""


def render_counts(outcomes: Iterable[Outcome]) -> str:
    counts: dict[Verdict, int] = {}
    for o in outcomes:
        counts[o.verdict] = counts.get(o.verdict, 0) + 1
    return ", ".join(f"{n} {v.value}" for v, n in sorted(counts.items(), key=lambda kv: kv[0].value))


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit()) if text else ()
