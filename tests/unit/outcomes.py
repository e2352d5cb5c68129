"""Outcomes for the pure tests, written with plain strings."""

from __future__ import annotations

from typing import Any

from leakcheck.verdicts import Driver, Outcome, Route, Target, Verdict
from leakcheck.versions import Version


def make(probe: str, pg: str, bouncer: str, route: Route, driver: str, verdict: Verdict, evidence: str,
         **rest: Any) -> Outcome:
    """An Outcome as `Outcome(probe, pg, bouncer, route, driver, verdict, evidence)` read before its
    target was typed ("" for no PgBouncer)."""
    target = Target(Version.parse(pg), Version.parse(bouncer) if bouncer else None, route, Driver(driver))
    return Outcome(probe, target, verdict, evidence, **rest)
