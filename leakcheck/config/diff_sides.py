"""One side of the upgrade diff as users write it (`--diff FROM..TO`, `leakcheck diff FROM TO`), parsed
and checked like the other options (pure).

A side is written as in gate keys and ids: `pg16/pgbouncer1.24`, `pg18.4/pgbouncer1.26.1`,
`pg18/pgbouncer1.24[max_prepared_statements=0]`, `pg16/odyssey1.5`, and may end with a driver and
its settings (`--driver-set`): `pg16/pgbouncer1.24/pgjdbc[prepareThreshold=0]`, or a mixed pair
(`--pairs`): `pg16/pgbouncer1.24/prisma[pgbouncer=true]+node-postgres`. A side without a driver means
each driver (and pair) with its defaults. reports/diff.py compares the outcomes of two sides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from leakcheck.drivers.settings import cell_settings
from leakcheck.model import products
from leakcheck.model.axes import outside_brackets
from leakcheck.model.errors import UsageError
from leakcheck.model.target import DRIVER_ID, PAIR_JOIN, PoolerKind, Route, Setting, config_stem
from leakcheck.model.verdicts import Outcome
from leakcheck.model.versions import Version

_CELL = re.compile(r"pg([0-9]+(?:\.[0-9]+)*)/([a-z-]+?)([0-9]+(?:\.[0-9]+)*)(?:\[(.*)\])?")
_DRIVER = re.compile(rf"({DRIVER_ID})(?:-?[0-9]+(?:\.[0-9]+)*)?(?:\[([^\]/]*)\])?")
_SHAPE = ("a cell such as pg16/pgbouncer1.24, pg18/pgbouncer1.26[max_prepared_statements=0], "
          "pg16/pgbouncer1.24/pgjdbc[prepareThreshold=0] or pg16/pgbouncer1.24/pgjdbc+psycopg")


@dataclass(frozen=True)
class DiffSide:
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

    def naming(self, other: DiffSide) -> DiffSide:
        """This side, naming `other`'s driver (or pair) when it names none: one side that names a driver
        means it on the other side too."""
        if self.driver or not other.driver:
            return self
        return replace(self, driver=other.driver, driver_b=other.driver_b)


def parse_side(text: str, option: str = "leakcheck diff") -> DiffSide:
    head, slash, tail = text.strip().rpartition("/")
    sides = outside_brackets(tail, PAIR_JOIN) if slash and _CELL.fullmatch(head) else []
    drivers = [_DRIVER.fullmatch(side) for side in sides] if len(sides) <= 2 else []
    named = [d for d in drivers if d is not None] if drivers and all(drivers) else []
    found = _CELL.fullmatch(head if named else text.strip())
    product = products.named(found.group(2)) if found else None
    if found is None or product is None:
        raise UsageError.bad_value(option, text, _SHAPE)
    settings = _pairs(found.group(4), option, text)
    config = dict(settings).get("ini", "")
    apps: list[tuple[str, tuple[Setting, ...]]] = [
        (d.group(1), cell_settings(d.group(1), _pairs(d.group(2), option, text))) for d in named]
    apps += [("", ())] * (2 - len(apps))
    return DiffSide(text.strip(), Version.parse(found.group(1)), PoolerKind(product.key), Version.parse(found.group(3)),
                    tuple(kv for kv in settings if kv[0] != "ini"), config, *apps[0], *apps[1])


def _pairs(text: str | None, option: str, raw: str) -> tuple[Setting, ...]:
    out: list[Setting] = []
    for item in filter(None, (text or "").split(",")):
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise UsageError.bad_value(option, raw, f"{_SHAPE} (settings as name=value, comma separated)")
        out.append((name.strip(), value.strip()))
    return tuple(out)
