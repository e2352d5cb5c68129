"""A team's own pgbouncer.ini (`--bouncer-ini`), read so leakcheck can run it against its test server.

Kept as written: every section and setting, in order, `%include`d files inlined. A line that is
not `key = value` is kept as it is, so PgBouncer itself says what is wrong with it. What leakcheck
overrides is listed by `overrides()` (for the run header and the reports).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

#: Sections leakcheck replaces or drops; every other section ([users], ...) is kept.
REPLACED_SECTIONS = {"databases": "one entry, the test database on leakcheck's server",
                     "peers": "no peers: cancel requests stay in this PgBouncer"}
_MAX_INCLUDES = 16


#: (key, value); a line that is no `key = value` is (the line, None), written back as it was.
Item = tuple[str, str | None]


def line_of(item: Item) -> str:
    key, value = item
    return key if value is None else f"{key} = {value}"


@dataclass(frozen=True)
class Section:
    name: str
    items: tuple[Item, ...]


@dataclass(frozen=True)
class TeamIni:
    path: str
    sections: tuple[Section, ...]

    def section(self, name: str) -> tuple[Item, ...]:
        return tuple(item for s in self.sections if s.name == name for item in s.items)

    def value(self, key: str) -> str | None:
        """The [pgbouncer] value of `key` (the last one written wins, as in PgBouncer)."""
        found = [v for k, v in self.section("pgbouncer") if k == key]
        return found[-1] if found else None

    def kept_sections(self) -> tuple[Section, ...]:
        return tuple(s for s in self.sections if s.name not in ("pgbouncer", *REPLACED_SECTIONS))


@functools.lru_cache(maxsize=16)
def load(path: str) -> TeamIni:
    """The ini at `path`; a one-line UsageError when it cannot be read."""
    return TeamIni(path, tuple(_merge(_read(Path(path), "--bouncer-ini", 0))))


def _read(path: Path, via: str, depth: int) -> list[tuple[str, Item]]:
    """(section, item) pairs of a file, its %include files inlined where they stand."""
    if depth > _MAX_INCLUDES:
        raise UsageError(f"{via}: %include nested more than {_MAX_INCLUDES} deep at {path}; remove the include loop")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{via}: {path} does not exist; give the path of your pgbouncer.ini") from None
    except IsADirectoryError:
        raise UsageError(f"{via}: {path} is a folder; give the path of your pgbouncer.ini") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{via}: cannot read {path} ({getattr(exc, 'strerror', None) or exc}); "
                         "make it a readable UTF-8 file") from None
    out: list[tuple[str, Item]] = []
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("%include"):
            name = line[len("%include"):].strip()
            target = Path(name) if Path(name).is_absolute() else path.parent / name
            for item in _read(target, f"{via} (%include in {path})", depth + 1):
                out.append(item if item[0] else (section, item[1]))
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip().lower()
            continue
        key, eq, value = line.partition("=")
        out.append((section, (key.strip().lower(), value.strip()) if eq else (line, None)))
    return out


def _merge(pairs: list[tuple[str, Item]]) -> list[Section]:
    order: list[str] = []
    items: dict[str, list[Item]] = {}
    for section, item in pairs:
        if section not in items:
            order.append(section)
            items[section] = []
        items[section].append(item)
    return [Section(name or "pgbouncer", tuple(items[name])) for name in order]


def overrides(team: TeamIni, harness: dict[str, str], dropped: dict[str, str]) -> list[str]:
    """What leakcheck changes in the team's ini, one line each (for the run header and reports)."""
    out = []
    for key, why in harness.items():
        theirs = team.value(key)
        if key == "pool_mode":  # theirs is what the probes run in (a --bouncer-set pool_mode axis wins)
            out.append(f"pool_mode: {'transaction' if theirs is None else repr(theirs)} for the probes "
                       "(unless a --bouncer-set pool_mode axis is given), session for the session control")
            continue
        out.append(f"{key}: {'set by leakcheck' if theirs is None else f'{theirs!r} overridden'} ({why})")
    for key, why in dropped.items():
        if team.value(key) is not None:
            out.append(f"{key}: {team.value(key)!r} dropped ({why})")
    for name, why in REPLACED_SECTIONS.items():
        entries = team.section(name)
        if entries:
            out.append(f"[{name}]: its {len(entries)} entries replaced ({why})")
    return out
