"""The probe registry: an explicit tuple; ids are stable test ids and report keys."""

from __future__ import annotations

from leakcheck.model.errors import UsageError
from leakcheck.probes import (
    cancel,
    cleanup,
    discovered,
    fleet,
    handover,
    listen,
    locks,
    objects,
    prepared,
    protocol,
    security,
    settings,
    startup,
    transactions,
)
from leakcheck.probes.base import Probe
from leakcheck.probes.scenario import Scenario

PROBES: tuple[Probe, ...] = (
    settings.PROBES + locks.PROBES + listen.PROBES + objects.PROBES + prepared.PROBES + cleanup.PROBES
    + startup.PROBES + security.PROBES + cancel.PROBES + handover.PROBES + discovered.PROBES + fleet.PROBES
    + transactions.PROBES + protocol.PROBES
)

__all__ = ["PROBES", "Probe", "Scenario", "select"]


def select(ids: str | None, option: str = "--probes", fleet: bool = False) -> tuple[Probe, ...]:
    """The probes named in a comma separated list (all when None: a fleet's own probes only when the matrix
    has a fleet), in registry order."""
    if ids is None or ids.strip() in ("", "all"):
        return tuple(p for p in PROBES if fleet or not p.fleet)
    wanted = [i.strip() for i in ids.split(",")]
    if not all(wanted):
        raise UsageError(f"{option}={ids!r} has an empty item; give probe ids separated by commas, or all")
    known = {p.id for p in PROBES}
    unknown = [i for i in wanted if i not in known]
    if unknown:
        raise UsageError(f"{option}: unknown probe id(s) {', '.join(unknown)}; known ids: {', '.join(sorted(known))}")
    return tuple(p for p in PROBES if p.id in wanted)
