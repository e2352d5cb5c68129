"""The upgrade diff: what changes for each probe and driver from one cell to another (pure).

A cell is written as in gate keys and ids: `pg16/pgbouncer1.24`, `pg18.4/pgbouncer1.26.1`,
`pg18/pgbouncer1.24[max_prepared_statements=0]`, `pg16/odyssey1.5`, and may end with a driver and
its settings (`--driver-set`): `pg16/pgbouncer1.24/pgjdbc[prepareThreshold=0]`, or a mixed pair
(`--pairs`): `pg16/pgbouncer1.24/prisma[pgbouncer=true]+node-postgres`. A cell without a driver means
each driver (and pair) with its defaults; `pg16/pgbouncer1.24/pgjdbc[prepareThreshold=0]..
pg16/pgbouncer1.24/pgjdbc` says whether that workaround is still needed there. Only what changes
is shown, with both sides' evidence and the advice for the side you move to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from leakcheck.drivers.settings import cell_settings
from leakcheck.model.axes import KIND_NAMES, outside_brackets
from leakcheck.model.errors import UsageError
from leakcheck.model.target import DRIVER_ID, PAIR_JOIN, PoolerKind, Route, Setting, config_stem
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.model.versions import Version
from leakcheck.reports.advice import advice
from leakcheck.reports.markdown import md_advice, md_text
from leakcheck.reports.workarounds import workarounds

_CELL = re.compile(r"pg([0-9]+(?:\.[0-9]+)*)/([a-z-]+?)([0-9]+(?:\.[0-9]+)*)(?:\[(.*)\])?")
_DRIVER = re.compile(rf"({DRIVER_ID})(?:-?[0-9]+(?:\.[0-9]+)*)?(?:\[([^\]/]*)\])?")
_SHAPE = ("a cell such as pg16/pgbouncer1.24, pg18/pgbouncer1.26[max_prepared_statements=0], "
          "pg16/pgbouncer1.24/pgjdbc[prepareThreshold=0] or pg16/pgbouncer1.24/pgjdbc+psycopg")


@dataclass(frozen=True)
class Cell:
    """One side of a diff: versions as prefixes (16 matches 16.14), settings as given."""

    raw: str
    pg: Version
    kind: PoolerKind
    version: Version
    settings: tuple[Setting, ...] = ()
    config: str = ""  #: the stem of a team ini (`ini=prod` in the brackets)
    driver: str = ""  #: the driver the cell names ("": every driver)
    driver_settings: tuple[Setting, ...] = ()  #: its settings that differ from its defaults (none: the defaults)
    driver_b: str = ""  #: a mixed pair's B driver ("": no pair, or every driver when `driver` is "" too)
    driver_b_settings: tuple[Setting, ...] = ()  #: B's settings that differ from its defaults

    def matches(self, outcome: Outcome) -> bool:
        pooler, b = outcome.pooler, outcome.target.b
        if outcome.route is not Route.TRANSACTION or pooler is None or pooler.kind is not self.kind:
            return False
        if self.driver and (outcome.driver.value != self.driver or (b.driver.value if b else "") != self.driver_b):
            return False
        return (self.pg.matches(outcome.pg) and pooler.version is not None and self.version.matches(pooler.version)
                and sorted(pooler.settings) == sorted(self.settings)
                and sorted(outcome.target.driver_settings) == sorted(self.driver_settings)
                and sorted(b.settings if b else ()) == sorted(self.driver_b_settings)
                and (config_stem(pooler.config) if pooler.config else "") == self.config)

    def naming(self, other: Cell) -> Cell:
        """This cell, naming `other`'s driver (or pair) when it names none: one side that names a driver
        means it on the other side too."""
        if self.driver or not other.driver:
            return self
        return replace(self, driver=other.driver, driver_b=other.driver_b)


def parse_cell(text: str, option: str = "leakcheck diff") -> Cell:
    head, slash, tail = text.strip().rpartition("/")
    sides = outside_brackets(tail, PAIR_JOIN) if slash and _CELL.fullmatch(head) else []
    drivers = [_DRIVER.fullmatch(side) for side in sides] if len(sides) <= 2 else []
    named = [d for d in drivers if d is not None] if drivers and all(drivers) else []
    found = _CELL.fullmatch(head if named else text.strip())
    kind = KIND_NAMES.get(found.group(2)) if found else None
    if found is None or kind is None:
        raise UsageError.bad_value(option, text, _SHAPE)
    settings = _pairs(found.group(4), option, text)
    config = dict(settings).get("ini", "")
    apps: list[tuple[str, tuple[Setting, ...]]] = [
        (d.group(1), cell_settings(d.group(1), _pairs(d.group(2), option, text))) for d in named]
    apps += [("", ())] * (2 - len(apps))
    return Cell(text.strip(), Version.parse(found.group(1)), kind, Version.parse(found.group(3)),
                tuple(kv for kv in settings if kv[0] != "ini"), config, *apps[0], *apps[1])


def _pairs(text: str | None, option: str, raw: str) -> tuple[Setting, ...]:
    out: list[Setting] = []
    for item in filter(None, (text or "").split(",")):
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise UsageError.bad_value(option, raw, f"{_SHAPE} (settings as name=value, comma separated)")
        out.append((name.strip(), value.strip()))
    return tuple(out)


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


def compare(outcomes: Iterable[Outcome], before: Cell, after: Cell) -> tuple[list[Change], int]:
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


def sides_measured(outcomes: Sequence[Outcome], cells: Sequence[Cell]) -> list[Cell]:
    """The cells no outcome matches (they must be run)."""
    return [c for c in cells if not any(c.matches(o) for o in outcomes)]


def run_diff_lines(outcomes: Sequence[Outcome], before: Cell, after: Cell) -> list[str]:
    """What a run with --diff=BEFORE..AFTER prints after its matrix: the diff, and each side it missed."""
    changes, same = compare(outcomes, before, after)
    lines = render_text(changes, same, before, after, settings_notes(outcomes, before, after)).splitlines()
    return lines + [f"leakcheck: the run measured nothing of {cell.raw}: add it to the matrix"
                    for cell in sides_measured(outcomes, [before, after])]


def settings_notes(outcomes: Iterable[Outcome], before: Cell, after: Cell) -> list[str]:
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


def render_text(changes: Sequence[Change], same: int, before: Cell, after: Cell, notes: Sequence[str] = ()) -> str:
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


def render_markdown(changes: Sequence[Change], same: int, before: Cell, after: Cell,
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

