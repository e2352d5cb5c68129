"""Outcomes for the pure tests, written with plain strings."""

from __future__ import annotations

from typing import Any

from leakcheck.model.target import Driver, Pooler, PoolerKind, Route, Target
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.model.versions import Version


def make(probe: str, pg: str, bouncer: str, route: Route, driver: str, verdict: Verdict, evidence: str,
         driver_version: str = "", settings: tuple[tuple[str, str], ...] = (),
         driver_settings: tuple[tuple[str, str], ...] = (), **rest: Any) -> Outcome:
    """An Outcome as `Outcome(probe, pg, bouncer, route, driver, verdict, evidence)` read before its
    target was typed ("" for no PgBouncer; `driver` with no version unless one is given)."""
    pooler = Pooler(PoolerKind.PGBOUNCER, Version.parse(bouncer), settings) if bouncer else None
    version = Version.parse(driver_version) if driver_version else None
    target = Target(Version.parse(pg), pooler, route, Driver(driver), version, driver_settings)
    return Outcome(probe, target, verdict, evidence, **rest)


def at(probe: str, verdict: Verdict, pooler: Pooler | None, pg: str = "16.14", driver: str = "psycopg",
       route: Route = Route.TRANSACTION, evidence: str = "e", **rest: Any) -> Outcome:
    """An Outcome on any pooler (`make` builds PgBouncer ones)."""
    return Outcome(probe, Target(Version.parse(pg), pooler, route, Driver(driver)), verdict, evidence, **rest)


def pooler(kind: str, version: str | None = None, settings: tuple[tuple[str, str], ...] = (),
           config: str = "") -> Pooler:
    """`pooler("pgbouncer", "1.18.0")`, `pooler("odyssey", "1.5.2")`, `pooler("dsn", config="staging")`."""
    return Pooler(PoolerKind(kind), Version.parse(version) if version else None, settings, config)


def with_controls(*outcomes: Outcome, failed: Route | None = None) -> list[Outcome]:
    """`outcomes` and, for each pooled-route one, the controls it rests on (gate/record.py's `controls_of`),
    each measuring what its route requires; the control on `failed` measures an error instead."""
    from leakcheck.gate.record import controls_of
    from leakcheck.probes import PROBES

    probes = {p.id: p for p in PROBES}
    out = list(outcomes)
    for outcome in outcomes:
        if outcome.route is Route.TRANSACTION:
            probe = probes[outcome.probe]
            for target in controls_of(outcome.target):
                want = Verdict.ERROR if target.route is failed else probe.control_expectation(target.route)
                out.append(Outcome(outcome.probe, target, want, f"{target.route.value} control"))
    return out
