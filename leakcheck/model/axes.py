"""The matrix's pooler axes as the user writes them (pure, no I/O).

- `--pooler=odyssey:1.5,pgbouncer:1.26,pgpool:4.3` (`--bouncer=1.26` is `--pooler=pgbouncer:1.26`);
- `--bouncer-set NAME=V1,V2` (repeatable) and `--pooler-set KIND:NAME=V1,V2`: a setting of that
  pooler as a matrix axis; several axes are crossed. A value holding a comma is quoted:
  `--bouncer-set 'track_extra_parameters="IntervalStyle,search_path",IntervalStyle'`; an empty value
  is written `""` (`--bouncer-set 'server_reset_query="DISCARD ALL",""'`).
- `--driver-set DRIVER:NAME=V1,V2` (repeatable): a setting of a driver as an axis, crossed the same
  way (`pgjdbc:prepareThreshold=0,5`); which names a driver takes is the driver's business
  (drivers/clients.known_settings).
- `--pairs=A+B,...`: mixed applications, A's driver and B's, each with its own settings in brackets,
  one value each (`prisma[pgbouncer=true]+node-postgres`); config checks the names.
"""

from __future__ import annotations

import csv
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from leakcheck.model.errors import UsageError
from leakcheck.model.products import named, started_keys
from leakcheck.model.target import PAIR_JOIN, PoolerKind, Setting
from leakcheck.model.versions import Spec, parse_spec, parse_spec_list

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
#: An empty value written on purpose, as `""` (`server_reset_query="DISCARD ALL",""`).
_QUOTED_EMPTY = re.compile(r'(?:^|,)\s*""\s*(?=,|$)')
#: What no setting value holds: control characters but tab, and every line break str.splitlines knows.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def _pooler_help() -> str:
    return f"a comma separated list of KIND:VERSION such as odyssey:1.5,pgbouncer:1.26 (KIND: {started_keys()})"


@dataclass(frozen=True)
class Axis:
    """One setting of one pooler kind, with the values the matrix crosses."""

    kind: PoolerKind
    name: str
    values: tuple[str, ...]


def kind_of(text: str, option: str, raw: str) -> PoolerKind:
    """The kind a user's name means (a product's key or alias, model/products.py)."""
    product = named(text)
    if product is None:
        raise UsageError.bad_value(option, raw, f"a pooler kind: {started_keys()}")
    return PoolerKind(product.key)


def parse_poolers(raw: str, option: str = "--pooler") -> tuple[tuple[PoolerKind, Spec], ...]:
    """`odyssey:1.5,pgbouncer:/usr/sbin/pgbouncer` -> ((ODYSSEY, 1.5), (PGBOUNCER, path)); order kept,
    duplicates dropped."""
    items = [p.strip() for p in raw.split(",")]
    if not raw.strip() or not all(items):
        raise UsageError.bad_value(option, raw, f"{_pooler_help()} (no empty items)")
    out: list[tuple[PoolerKind, Spec]] = []
    for item in items:
        name, colon, version = item.partition(":")
        if not colon or not version.strip():
            raise UsageError.bad_value(option, raw, _pooler_help())
        pair = (kind_of(name, option, raw), parse_spec(version, f"{option} ({name.strip()})"))
        if pair not in out:
            out.append(pair)
    return tuple(out)


def parse_axis(raw: str, option: str, kind: PoolerKind | None) -> Axis:
    """`NAME=V1,V2` (kind given: --bouncer-set) or `KIND:NAME=V1,V2` (--pooler-set). Which names a team may
    give is each product's allow-list (config checks it)."""
    text = raw.strip()
    shape = "NAME=V1,V2" if kind is not None else "KIND:NAME=V1,V2 (e.g. odyssey:pool_discard=yes,no)"
    if kind is None:
        prefix, colon, text = text.partition(":")
        if not colon:
            raise UsageError.bad_value(option, raw, shape)
        kind = kind_of(prefix, option, raw)
    name, eq, values_text = text.partition("=")
    name = name.strip().lower() if kind.record.settings_fold_case else name.strip()
    if not eq or not _NAME.fullmatch(name):
        raise UsageError.bad_value(option, raw, f"{shape}: a setting name, '=', then its values")
    return Axis(kind, name, _values(values_text, option, raw, shape))


def _values(text: str, option: str, raw: str, shape: str) -> tuple[str, ...]:
    """`V1,V2` (csv: a quoted value may hold a comma), each stripped, none empty, duplicates dropped."""
    if _CONTROL.search(text):  # a line break would split the value (a matrix file's lines, an ini's)
        raise UsageError.bad_value(option, raw, f"{shape} on one line, without control characters")
    try:
        values = next(csv.reader([text], skipinitialspace=True))
    except (csv.Error, StopIteration):
        raise UsageError.bad_value(option, raw, f"{shape}; quote a value that holds a comma") from None
    values = [v.strip() for v in values]
    if not values or values.count("") > len(_QUOTED_EMPTY.findall(text)):
        raise UsageError.bad_value(option, raw, f"{shape} with no empty value (quote a value with a comma; "
                                   'an empty value on purpose is written "")')
    return tuple(dict.fromkeys(values))


@dataclass(frozen=True)
class DriverAxis:
    """One setting of one driver (its id, as --drivers takes it), with the values the matrix crosses."""

    driver: str
    name: str
    values: tuple[str, ...]


_DRIVER_SHAPE = "DRIVER:NAME=V1,V2 (e.g. pgjdbc:prepareThreshold=0,5)"
#: What a driver setting's value may not hold: it is written in ids, gate keys and diff cells.
_NOT_IN_DRIVER_VALUES = set("/[],")


def parse_driver_axis(raw: str, option: str = "--driver-set") -> DriverAxis:
    """`pgjdbc:prepareThreshold=0,5` -> DriverAxis("pgjdbc", "prepareThreshold", ("0", "5"))."""
    driver, colon, text = raw.strip().partition(":")
    name, eq, values_text = text.partition("=")
    if not colon or not driver.strip() or not eq or not _NAME.fullmatch(name.strip()):
        raise UsageError.bad_value(option, raw, f"{_DRIVER_SHAPE}: a driver, ':', a setting name, '=', its values")
    values = _values(values_text, option, raw, _DRIVER_SHAPE)
    bad = [v for v in values if set(v) & _NOT_IN_DRIVER_VALUES]
    if bad:
        raise UsageError.bad_value(option, raw, f"values without '/', '[', ']' or ',' (ids and gate keys show "
                                   f"them; {bad[0]!r} has one)")
    return DriverAxis(driver.strip(), name.strip(), values)


@dataclass(frozen=True)
class PairSide:
    """One side of a pair as written: the driver as --drivers takes it (an id or cmd:PATH) and its settings."""

    driver: str
    settings: tuple[Setting, ...] = ()


PAIRS_SHAPE = ("A+B pairs, comma separated, each side a driver with optional settings in brackets, e.g. "
               "pgjdbc+psycopg,prisma[pgbouncer=true]+node-postgres")
_SIDE = re.compile(r"([^\[\]+,\s]+)(?:\[([^\[\]]*)\])?")


def outside_brackets(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside brackets (a side's settings hold commas; a key's may hold `+`)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth = max(0, depth + (ch == "[") - (ch == "]"))
        if ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def parse_pairs(raw: str, option: str = "--pairs") -> tuple[tuple[PairSide, PairSide], ...]:
    """`pgjdbc+psycopg,prisma[pgbouncer=true]+node-postgres` -> each pair's sides, in the order given,
    duplicates dropped. A setting is NAME=VALUE, one value (list a pair again for another value); a value
    holds no '/', '[', ']', ',' or '+' (ids and gate keys show it)."""
    if _CONTROL.search(raw):
        raise UsageError.bad_value(option, raw, f"{PAIRS_SHAPE}, on one line")
    out: list[tuple[PairSide, PairSide]] = []
    for item in outside_brackets(raw, ","):
        sides = outside_brackets(item.strip(), PAIR_JOIN)
        if len(sides) != 2:
            raise UsageError.bad_value(option, raw, f"{PAIRS_SHAPE} ({item.strip() or 'an empty item'!r} is not "
                                       "two drivers joined by '+')")
        pair = (_side(sides[0], option, raw), _side(sides[1], option, raw))
        if pair not in out:
            out.append(pair)
    return tuple(out)


def _side(text: str, option: str, raw: str) -> PairSide:
    found = _SIDE.fullmatch(text.strip())
    if found is None:
        raise UsageError.bad_value(option, raw, f"{PAIRS_SHAPE} ({text.strip() or 'an empty side'!r} is not a "
                                   "driver with optional [NAME=VALUE,...])")
    settings: list[Setting] = []
    for item in (found.group(2) or "").split(",") if found.group(2) is not None else ():
        name, eq, value = item.partition("=")
        if not eq or not _NAME.fullmatch(name.strip()) or not value.strip() or "+" in value or "/" in value:
            raise UsageError.bad_value(option, raw, f"{PAIRS_SHAPE} (a setting is NAME=VALUE, one value without "
                                       f"'/', '+' or ','; {item.strip()!r} is not)")
        if any(n == name.strip() for n, _ in settings):
            raise UsageError.bad_value(option, raw, f"{PAIRS_SHAPE} ({name.strip()} is given twice on one side)")
        settings.append((name.strip(), value.strip()))
    return PairSide(found.group(1), tuple(settings))


def driver_combinations(axes: Sequence[DriverAxis], driver: str) -> list[tuple[Setting, ...]]:
    """Every crossing of `driver`'s axes (one empty combination when it has none), in the axes' order."""
    mine = [a for a in axes if a.driver == driver]
    return [tuple(zip((a.name for a in mine), values, strict=True))
            for values in itertools.product(*(a.values for a in mine))]


def check_distinct(axes: Sequence[Axis]) -> None:
    seen: set[tuple[PoolerKind, str]] = set()
    for axis in axes:
        if (axis.kind, axis.name) in seen:
            raise UsageError(f"the {axis.kind.value} setting {axis.name} is given as an axis twice; give its "
                             f"values once: --pooler-set {axis.kind.value}:{axis.name}=V1,V2")
        seen.add((axis.kind, axis.name))


def combinations(axes: Sequence[Axis], kind: PoolerKind) -> list[tuple[Setting, ...]]:
    """Every crossing of `kind`'s axes (one empty combination when it has none), in the axes' order."""
    mine = [a for a in axes if a.kind is kind]
    return [tuple(zip((a.name for a in mine), values, strict=True))
            for values in itertools.product(*(a.values for a in mine))]


#: The most PgBouncer processes one fleet may run (each is a process and a pool of the machine's).
MAX_FLEET = 4
#: leakcheck's own PgBouncer meta-setting (`--bouncer-set peering=yes,no`): yes = `peer_id` and a
#: `[peers]` section naming the fleet's other processes; no = neither.
PEERING = "peering"
PEERING_FROM = (1, 19)  #: the first PgBouncer release that knows peer_id


@dataclass(frozen=True)
class FleetShape:
    """`--bouncer-fleet`: N processes of each --bouncer release, or one process per release given
    (a rolling upgrade: `1.24,1.26`). size 1 and no releases: one process, no fleet."""

    size: int = 1
    releases: tuple[Spec, ...] = ()

    @property
    def is_fleet(self) -> bool:
        return self.size > 1 or len(self.releases) > 1


#: One process, no fleet (the default shape).
NO_FLEET = FleetShape()


def parse_fleet(raw: str, option: str = "--bouncer-fleet") -> FleetShape:
    """`2` (two processes of each release) or `1.24,1.26` (one process of each, in that order)."""
    text = raw.strip()
    expected = (f"a number of processes from 2 to {MAX_FLEET} (e.g. 2), or two or more PgBouncer releases "
                "for a rolling upgrade (e.g. 1.24,1.26)")
    if text.isascii() and text.isdigit():
        if not 2 <= int(text) <= MAX_FLEET:
            raise UsageError.bad_value(option, raw, expected)
        return FleetShape(size=int(text))
    releases = parse_spec_list(text, option) if text else ()
    if len(releases) < 2 or len(releases) > MAX_FLEET or any(s.version is None for s in releases):
        raise UsageError.bad_value(option, raw, f"{expected}; versions, not paths")
    return FleetShape(releases=releases)


def check_peering(axes: Sequence[Axis], fleet: FleetShape) -> None:
    """peering=yes|no, and only for a fleet (one process has no peer)."""
    for axis in axes:
        if axis.kind.record.fleets and axis.name == PEERING:
            if not set(axis.values) <= {"yes", "no"}:
                raise UsageError.bad_value(f"--bouncer-set {PEERING}", ",".join(axis.values), "yes, no or yes,no")
            if not fleet.is_fleet:
                raise UsageError(f"--bouncer-set {PEERING}={','.join(axis.values)}: peering links the processes "
                                 "of a fleet; add --bouncer-fleet=2 (or --bouncer-fleet=1.24,1.26)")
