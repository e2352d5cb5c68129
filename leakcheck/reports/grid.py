"""The matrix every report draws: per PostgreSQL version, probes as rows, pooler x driver as columns."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from leakcheck.model.target import Route
from leakcheck.model.verdicts import Outcome
from leakcheck.model.versions import Version

#: The order controls are summarized in.
CONTROL_ROUTES = (Route.DIRECT, Route.SESSION, Route.SHARED)
CONTROL = {
    Route.DIRECT: "two direct sessions, must be isolated",
    Route.SESSION: "the pooler in session mode, must be isolated",
    Route.SHARED: "A and B on one direct session",
}
SHARED_RULE = "the shared control must measure leaks for session state and isolated for transaction state"


@dataclass(frozen=True)
class Grid:
    """One table: its title, columns and rows in report order, and the outcome of each cell."""

    title: str
    columns: tuple[str, ...]
    probes: tuple[str, ...]
    cells: Mapping[tuple[str, str], Outcome]
    security: frozenset[str]

    def at(self, probe: str, column: str) -> Outcome | None:
        return self.cells.get((probe, column))

    def outcomes(self) -> list[Outcome]:
        """The cells row by row, left to right."""
        return [o for p in self.probes for c in self.columns if (o := self.cells.get((p, c))) is not None]


def pooled_column(o: Outcome) -> str:
    """A pooled-route column: `pgbouncer1.24.1[max_prepared_statements=0]/psycopg3.3.9`."""
    return f"{o.pooler.label() if o.pooler else '-'}/{o.target.client}"


def canonical_order(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """By pooler kind, version, settings, then driver, a pair after its A's driver alone (the columns' order)."""
    def key(o: Outcome) -> tuple[object, ...]:
        p = o.pooler
        return ((p.kind.value, p.version.parts if p.version else (), p.settings, p.config) if p else (),
                o.driver.value, o.target.b is not None)
    return sorted(outcomes, key=key)


def grid(title: str, outcomes: Iterable[Outcome], column: Callable[[Outcome], str]) -> Grid:
    here = list(outcomes)
    cols = tuple(dict.fromkeys(column(o) for o in canonical_order(here)))
    return Grid(title, cols, tuple(dict.fromkeys(o.probe for o in here)),
                {(o.probe, column(o)): o for o in here}, frozenset(o.probe for o in here if o.security))


def pooled_grids(outcomes: Iterable[Outcome]) -> list[Grid]:
    """The leak tests (transaction route): one grid per PostgreSQL version, oldest first."""
    by_pg: dict[Version, list[Outcome]] = {}
    for o in outcomes:  # one pass: a grid per version never rescans the others' outcomes
        if o.route is Route.TRANSACTION:
            by_pg.setdefault(o.pg, []).append(o)
    return [grid(f"PostgreSQL {pg}", by_pg[pg], pooled_column) for pg in sorted(by_pg, key=lambda v: v.parts)]


def control_grids(outcomes: Iterable[Outcome]) -> list[tuple[Route, Grid]]:
    """The controls: one grid per route that ran, columns naming PostgreSQL, pooler and driver."""
    by_route: dict[Route, list[Outcome]] = {}
    for o in outcomes:
        by_route.setdefault(o.route, []).append(o)
    found = []
    for route in CONTROL_ROUTES:
        controls = by_route.get(route)
        if controls:
            ordered = sorted(controls, key=lambda o: o.pg.parts)
            found.append((route, grid(f"{route.value} control ({CONTROL[route]})", ordered, lambda o: o.column)))
    return found
