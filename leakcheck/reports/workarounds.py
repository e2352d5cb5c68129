"""Which driver settings a cell needs and which it no longer needs, read from the crossed cells of
one run (pure).

A workaround is a driver setting the matrix crossed (`--driver-set`) at a value other than the
driver's default. On each cell (PostgreSQL, pooler, driver release and its other settings) it is
compared, probe by probe, with the same cell at the driver's default, from measured verdicts only
(an error or a skip on either side compares nothing; a mixed pair's settings are no crossed axis, so
its cells are not compared):
- needed: a probe is a problem (leaks, lost, breaks) at the default and not with the setting;
- no longer needed: every probe measured on both sides is isolated at the default;
- not enough: a probe is a problem with the setting too (and the setting is not needed for another).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from leakcheck.drivers.settings import default_of
from leakcheck.gate.expectations import gate_value
from leakcheck.model.target import Driver, Pooler, Route, Setting, settings_label
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.model.versions import Version


@dataclass(frozen=True)
class _Where:
    """A cell and one setting of it: everything but that setting's value."""

    pg: Version
    pooler: Pooler | None
    driver: Driver
    version: Version | None
    others: tuple[Setting, ...]  #: the cell's other driver settings
    name: str
    value: str

    @property
    def column(self) -> str:
        where = f"pg{self.pg}" + (f"/{self.pooler.label()}" if self.pooler else "")
        return f"{where}/{self.driver.value}{self.version or ''}{settings_label(self.others)}"


#: The heading reports give the lines of `workarounds`.
TITLE = "Driver settings (--driver-set), each compared with the driver's default on the same cell"


def workarounds(outcomes: Iterable[Outcome]) -> list[str]:
    """One line per (cell, workaround) the run can judge, in the order the outcomes came."""
    measured = [o for o in outcomes if o.route is Route.TRANSACTION and gate_value(o.verdict) and o.target.b is None]
    by_cell = {(o.pg, o.pooler, o.driver, o.target.driver_version, o.target.driver_settings, o.probe): o
               for o in measured}
    pairs: dict[_Where, list[tuple[str, Verdict, Verdict]]] = {}
    for o in measured:
        for name, value in o.target.driver_settings:
            others = tuple(kv for kv in o.target.driver_settings if kv[0] != name)
            default = by_cell.get((o.pg, o.pooler, o.driver, o.target.driver_version, others, o.probe))
            if default is not None:
                where = _Where(o.pg, o.pooler, o.driver, o.target.driver_version, others, name, value)
                pairs.setdefault(where, []).append((o.probe, default.verdict, o.verdict))
    return [_line(where, probes) for where, probes in pairs.items()]


def _line(where: _Where, probes: list[tuple[str, Verdict, Verdict]]) -> str:
    setting = f"{where.name}={where.value}"
    default = f"{where.name}={default_of(where.driver.value, where.name) or '?'} (the default)"
    helps = [(p, d, w) for p, d, w in probes if d.is_problem and not w.is_problem]
    short = [(p, w) for p, _, w in probes if w.is_problem]
    if helps:
        said = ", ".join(f"{p} {d.value}" for p, d, _ in helps)
        fixed = ", ".join(sorted({w.value for _, _, w in helps}))
        they = "it is" if len(helps) == 1 else "they are"
        text = f"{where.column}: {setting} is needed: with {default} {said}; with {setting} {they} {fixed}"
    elif all(d is Verdict.ISOLATED for _, d, _ in probes):
        names = ", ".join(p for p, _, _ in probes)
        return (f"{where.column}: {setting} is no longer needed: {names} "
                f"{'is' if len(probes) == 1 else 'are'} isolated with {default} too")
    else:
        text = f"{where.column}: {setting} changes nothing that the default gets wrong"
    if short:
        text += f" (not enough for {', '.join(f'{p}, {w.value} with it too' for p, w in short)})"
    return text
