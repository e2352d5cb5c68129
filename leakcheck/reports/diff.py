"""The upgrade diff: what changes for each probe and driver (or mixed pair) from one cell to another (pure).

Each side is a DiffSide (config/diff_sides.py: `pg16/pgbouncer1.24`, `pg16/odyssey1.5`,
`pg16/pgbouncer1.24/pgjdbc[prepareThreshold=0]`, a mixed pair `pg16/pgbouncer1.24/pgjdbc+psycopg`);
`pg16/pgbouncer1.24/pgjdbc[prepareThreshold=0]..pg16/pgbouncer1.24/pgjdbc` says whether that
workaround is still needed there. Only what changes is shown, with both sides' evidence and the
advice for the side you move to.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from leakcheck.config.diff_sides import DiffSide
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.model.versions import Version
from leakcheck.reports.advice import advice
from leakcheck.reports.markdown import md_advice, md_text
from leakcheck.reports.workarounds import workarounds


@dataclass(frozen=True)
class Change:
    probe: str
    driver: str  #: the driver, or a pair's both (`pgjdbc+psycopg`)
    before: Outcome | None
    after: Outcome | None

    @property
    def security(self) -> bool:
        return any(o is not None and o.security for o in (self.before, self.after))


def _said(outcome: Outcome | None) -> str:
    return "not measured" if outcome is None else "+".join([outcome.verdict.value, *outcome.other_facts])


def compare(outcomes: Iterable[Outcome], before: DiffSide, after: DiffSide) -> tuple[list[Change], int]:
    """The changes (a verdict or a fact differs, or one side did not measure it) and how many
    (probe, driver) pairs stayed the same. Where a prefix matches several releases, the newest counts."""
    before, after = before.naming(after), after.naming(before)
    sides: list[dict[tuple[str, str], Outcome]] = [{}, {}]
    for outcome in outcomes:
        for side, cell in zip(sides, (before, after), strict=True):
            if cell.matches(outcome):
                k = (outcome.probe, outcome.target.drivers)
                held = side.get(k)
                if held is None or _newer(outcome, held):
                    side[k] = outcome
    keys = list(dict.fromkeys([*sides[0], *sides[1]]))
    changes = [Change(p, d, sides[0].get((p, d)), sides[1].get((p, d))) for p, d in keys
               if _said(sides[0].get((p, d))) != _said(sides[1].get((p, d)))]
    return changes, len(keys) - len(changes)


def _newer(a: Outcome, b: Outcome) -> bool:
    def release(o: Outcome) -> tuple[Version, Version]:
        return o.pg, (o.pooler.version if o.pooler is not None and o.pooler.version is not None else Version(()))

    return release(a) > release(b)


def sides_measured(outcomes: Sequence[Outcome], cells: Sequence[DiffSide]) -> list[DiffSide]:
    """The cells no outcome matches (they must be run)."""
    return [c for c in cells if not any(c.matches(o) for o in outcomes)]


def run_diff_lines(outcomes: Sequence[Outcome], before: DiffSide, after: DiffSide) -> list[str]:
    """What a run with --diff=BEFORE..AFTER prints after its matrix: the diff, and each side it missed."""
    changes, same = compare(outcomes, before, after)
    lines = render_text(changes, same, before, after, settings_notes(outcomes, before, after)).splitlines()
    return lines + [f"leakcheck: the run measured nothing of {cell.raw}: add it to the matrix"
                    for cell in sides_measured(outcomes, [before, after])]


def settings_notes(outcomes: Iterable[Outcome], before: DiffSide, after: DiffSide) -> list[str]:
    """What the two sides say of the driver settings they differ by: needed, or no longer needed
    (reports/workarounds.py); nothing when they name no driver settings."""
    if not (before.driver_settings or after.driver_settings):
        return []
    before, after = before.naming(after), after.naming(before)
    return workarounds(o for o in outcomes if before.matches(o) or after.matches(o))


def grouped(changes: Sequence[Change]) -> list[tuple[Change, list[str]]]:
    """Changes that differ only by driver, as one (the first driver's, with every driver named)."""
    out: dict[tuple[str, str, str], tuple[Change, list[str]]] = {}
    for c in changes:
        out.setdefault((c.probe, _said(c.before), _said(c.after)), (c, []))[1].append(c.driver)
    return list(out.values())


def render_text(changes: Sequence[Change], same: int, before: DiffSide, after: DiffSide,
                notes: Sequence[str] = ()) -> str:
    """The terminal form: one block per change (drivers that agree together), both sides' evidence,
    the advice for `after`; then `notes` (settings_notes)."""
    lines = [f"leakcheck diff {before.raw} -> {after.raw}: {len(changes)} changed, {same} the same", ""]
    for change, drivers in grouped(changes):
        mark = " [security]" if change.security else ""
        who = "both drivers" if len(drivers) > 1 else drivers[0]
        lines.append(f"{change.probe}{mark} ({who}): {_said(change.before)} -> {_said(change.after)}")
        for side, outcome in (("before", change.before), ("after", change.after)):
            if outcome is not None:
                lines.append(f"  {side} ({outcome.target.column}): {outcome.evidence}")
        hint = advice(change.after) if change.after is not None else None
        if hint:
            lines.append(f"  advice: {hint.replace('`', '')}")
        lines.append("")
    if not changes:
        lines.append("nothing changes: every probe measured the same on both sides")
    if notes:
        lines += ["", "driver settings:", *(f"  {n}" for n in notes)]
    return "\n".join(lines).rstrip() + "\n"


def render_markdown(changes: Sequence[Change], same: int, before: DiffSide, after: DiffSide,
                    notes: Sequence[str] = ()) -> str:
    """A pull-request comment: a table of what changes, evidence and advice folded per change; then
    `notes` (settings_notes)."""
    lines = [f"### leakcheck: `{before.raw}` → `{after.raw}`", "",
             f"{len(changes)} changed, {same} the same.", ""]
    if changes:
        lines += ["| probe | driver | before | after |", "|---|---|---|---|"]
        for c in changes:
            worse = c.after is not None and c.after.verdict.is_problem and (
                c.before is None or c.before.verdict is Verdict.ISOLATED)
            after_cell = f"**{_said(c.after)}**" if worse else _said(c.after)
            lines.append(f"| {md_text(c.probe)}{' (security)' if c.security else ''} | {c.driver} | "
                         f"{_said(c.before)} | {after_cell} |")
        lines.append("")
        for c in changes:
            hint = advice(c.after) if c.after is not None else None
            body = [f"before: {md_text(c.before.evidence)}" if c.before else "before: not measured",
                    f"after: {md_text(c.after.evidence)}" if c.after else "after: not measured",
                    *([f"advice: {md_advice(hint)}"] if hint else [])]
            lines += [f"<details><summary>{c.probe} ({c.driver})</summary>", "", *body, "", "</details>"]
    if notes:
        lines += ["", "**Driver settings:**", "", *(f"- {md_text(n)}" for n in notes)]
    return "\n".join(lines).rstrip() + "\n"

