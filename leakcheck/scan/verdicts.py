"""The verdicts a scan reports: each class's probes measured on the target cells, and the gate on them.

The outcomes come from a results file (`--results`, results/results.py), filtered to the target cells
the matrix options name (PostgreSQL versions, poolers, drivers: each only when given; every settings
cell of those is kept), or from a matrix run of just the probes the workload's classes map to (the CLI
measures them with `leakcheck run`'s runner and hands them in). Either way only the pooled route's
outcomes are verdicts; a control of those cells and probes that does not measure what its route
requires (gate/judge.py) makes the probe untrusted there: a problem of the scan, never a pass.

`--fail-on` is a threshold, lowest first: `leaks` fails on any problem (leaks, lost, breaks), `breaks`
on breaks and lost writes, `lost-write` on a lost write only (the `lost_write` fact). An error always
fails: a cell that could not be measured says nothing is fine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from leakcheck.gate.judge import Policy, judge
from leakcheck.model.errors import UsageError
from leakcheck.model.target import PoolerKind, Route
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.model.versions import Version
from leakcheck.probes import PROBES
from leakcheck.results.results import Results, canonical, name_of
from leakcheck.scan.classify import Effect
from leakcheck.scan.mapping import probes_for
from leakcheck.scan.workload import Found, Workload

FAIL_ON = ("leaks", "breaks", "lost-write")
#: The fact issue 24's outcome oracles name a write that did not survive (the results file says it as text).
LOST_WRITE = "lost_write"

_PROBES = {p.id: p for p in PROBES}


def fails(outcome: Outcome, fail_on: str) -> bool:
    """Whether this outcome fails the scan at threshold `fail_on` (an error always does)."""
    if outcome.verdict is Verdict.ERROR:
        return True
    lost_write = any(str(f) == LOST_WRITE for f in outcome.facts)
    if fail_on == "lost-write":
        return lost_write
    if fail_on == "breaks":
        return lost_write or outcome.verdict is Verdict.BREAKS
    return lost_write or outcome.verdict.is_problem


@dataclass(frozen=True)
class Selection:
    """The target cells a results file is filtered to (None: that axis is not filtered)."""

    pg: tuple[Version, ...] | None = None
    poolers: tuple[tuple[PoolerKind, Version], ...] | None = None
    drivers: tuple[str, ...] | None = None

    def matches(self, outcome: Outcome) -> bool:
        if self.pg is not None and not any(v.matches(outcome.pg) for v in self.pg):
            return False
        if self.drivers is not None and outcome.driver.value not in self.drivers:
            return False
        pooler = outcome.pooler
        if self.poolers is None or pooler is None:
            return True
        return any(kind is pooler.kind and pooler.version is not None and version.matches(pooler.version)
                   for kind, version in self.poolers)

    def describe(self) -> str:
        parts = ([f"PostgreSQL {', '.join(map(str, self.pg))}"] if self.pg else []) + (
            [", ".join(f"{k.value} {v}" for k, v in self.poolers)] if self.poolers else []) + (
            [", ".join(self.drivers)] if self.drivers else [])
        return "; ".join(parts) or "every cell"


@dataclass(frozen=True)
class Verdicts:
    """The pooled route's outcomes of the probes asked for on the target cells, and what went wrong
    measuring them (a control that failed, a test that measured nothing)."""

    source: str  #: where they come from: a results file's path, or "measured by this scan"
    outcomes: tuple[Outcome, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def cells(self) -> tuple[str, ...]:
        """The target cells as reports name their columns (pg/pooler/driver), in the matrix's order."""
        return tuple(dict.fromkeys(o.column for o in self.outcomes))


def cells_of(results: Results, where: str, selection: Selection) -> Results:
    """A results file's outcomes on the selected cells: the pooled route's, and the controls of their
    PostgreSQL versions, drivers and poolers. None of the cells is a UsageError (a scan against nothing
    proves nothing)."""
    cells = [o for o in results.outcomes if o.route is Route.TRANSACTION and selection.matches(o)]
    if not cells:
        raise UsageError(f"--results={where} holds no outcome through a pooler for the target cells "
                         f"({selection.describe()}); give a results file of those cells, or name cells it holds")
    seen = {(o.pg, o.driver, o.target.driver_settings, o.target.b) for o in cells}
    poolers = {o.pooler for o in cells}
    controls = [o for o in results.outcomes if o.route.is_control
                and (o.pg, o.driver, o.target.driver_settings, o.target.b) in seen
                and (o.route is not Route.SESSION or o.pooler in poolers)]
    return Results(tuple(cells + controls), results.unmeasured)


def pick(results: Results, where: str, probes: Iterable[str]) -> Verdicts:
    """The outcomes of `probes` among a results file's (cells_of), and its controls of those checked."""
    wanted = set(probes)
    chosen = tuple(canonical(o for o in results.outcomes if o.route is Route.TRANSACTION and o.probe in wanted))
    controls = [o for o in results.outcomes if o.route.is_control and o.probe in wanted]
    problems = control_problems(controls) + [f"{u.test}: measured nothing ({u.why})" for u in results.unmeasured
                                             if any(f"-{p}]" in u.test for p in wanted)]
    return Verdicts(where, chosen, tuple(problems))


def control_problems(controls: Iterable[Outcome]) -> list[str]:
    """Each control that did not measure what its route requires: its probe cannot be trusted there."""
    out = []
    for o in controls:
        probe = _PROBES.get(o.probe)
        if probe is None:
            continue
        said = judge(probe, o, Policy())
        if said.fails:
            out.append(f"{name_of(o)}: {said.message}")
    return out


def measured(outcomes: Sequence[Outcome]) -> Verdicts:
    """The outcomes a matrix run of the mapped probes gave (controls judged, the pooled route kept)."""
    pooled = tuple(canonical(o for o in outcomes if o.route is Route.TRANSACTION))
    return Verdicts("measured by this scan", pooled,
                    tuple(control_problems(o for o in outcomes if o.route.is_control)))


@dataclass(frozen=True)
class Row:
    """One class of the workload with its probes and their outcomes per cell."""

    found: Found
    probes: tuple[str, ...]
    outcomes: Mapping[str, Mapping[str, Outcome]] = field(default_factory=dict)  #: probe -> cell -> outcome
    failing: tuple[Outcome, ...] = ()

    @property
    def effect(self) -> Effect:
        return self.found.effect

    @property
    def measured(self) -> bool:
        return any(self.outcomes.get(p) for p in self.probes)


@dataclass(frozen=True)
class Scan:
    """A whole scan: the workload, the verdicts, each class's row, the threshold, and what went wrong."""

    workload: Workload
    verdicts: Verdicts | None
    rows: tuple[Row, ...]
    fail_on: str = "leaks"

    @property
    def cells(self) -> tuple[str, ...]:
        return self.verdicts.cells if self.verdicts is not None else ()

    @property
    def affected(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.failing)

    @property
    def problems(self) -> tuple[str, ...]:
        return self.verdicts.problems if self.verdicts is not None else ()

    @property
    def failed(self) -> bool:
        return bool(self.affected or self.problems)


#: Classes in the order reports show them: session-scoped before transaction-scoped, then by kind, detail.
def _order(found: Found) -> tuple[object, ...]:
    return (found.effect.scope.value != "session", found.effect.kind.value, found.effect.detail)


def mapped(workload: Workload) -> tuple[str, ...]:
    """Every probe id the workload's classes map to, in the registry's order."""
    wanted = {p for found in workload.found.values() for p in probes_for(found.effect)}
    return tuple(p.id for p in PROBES if p.id in wanted)


def assemble(workload: Workload, verdicts: Verdicts | None, fail_on: str) -> Scan:
    """The rows of a scan: each class of the workload with its probes' outcomes and the failing ones."""
    by_probe: dict[str, dict[str, Outcome]] = {}
    for o in verdicts.outcomes if verdicts is not None else ():
        by_probe.setdefault(o.probe, {})[o.column] = o
    rows = []
    for found in sorted(workload.found.values(), key=_order):
        probes = probes_for(found.effect)
        outcomes = {p: by_probe.get(p, {}) for p in probes}
        failing = tuple(o for p in probes for o in outcomes[p].values() if fails(o, fail_on))
        rows.append(Row(found, probes, outcomes, failing))
    return Scan(workload, verdicts, tuple(rows), fail_on)
