"""A matrix file (`--matrix=matrices/upgrade-16-to-18.toml`): what a team runs, in one reviewed file.

    pg = ["16", "18"]
    drivers = ["psycopg", "asyncpg"]     # optional (default both; none when only pairs are given)
    pairs = ["pgjdbc+psycopg", "prisma[pgbouncer=true]+node-postgres"]   # optional (--pairs)
    probes = ["all"]                     # optional
    controls = true                      # optional
    expect = "prod.toml"                 # optional; paths are relative to this file
    require = ["search_path", "protocol_prepare"]

    [[pooler]]
    kind = "pgbouncer"                   # pgbouncer, odyssey or pgpool
    versions = ["1.24", "1.26"]
    ini = "../deploy/pgbouncer.ini"      # optional, PgBouncer only (--bouncer-ini)
    settings = { max_prepared_statements = ["0", "200"] }   # optional: axes, crossed
    fleet = 2                            # optional, PgBouncer only (--bouncer-fleet): each release as 2
                                         # processes on one port; or fleet = ["1.24", "1.26"] (a rolling
                                         # upgrade: versions may then be left out)

    [driver_settings]                    # optional: driver settings as axes (--driver-set), crossed
    psycopg = { prepare_threshold = ["None", "5"] }

The file becomes the same option values the command line takes (config.Config.from_strings);
an option given on the command line (or as an ini key) wins over the file's. Each [[pooler]] table
is its own: its settings and ini apply to its versions only; a pooler option on the command line
(--pooler, --bouncer, --pooler-set, --bouncer-set, --bouncer-ini) replaces the file's tables.
"""

from __future__ import annotations

import csv
import io
import json
import re
import tomllib
from pathlib import Path
from typing import Any

from leakcheck.config import inputs
from leakcheck.model.errors import UsageError

OPTION = "--matrix"
#: Top-level keys and the option each becomes.
_SCALARS = {"pg": "leakcheck_pg", "drivers": "leakcheck_drivers", "pairs": "leakcheck_pairs",
            "probes": "leakcheck_probes", "controls": "leakcheck_controls", "expect": "leakcheck_expect",
            "record": "leakcheck_record", "require": "leakcheck_require", "backend": "leakcheck_backend",
            "results": "leakcheck_results", "jobs": "leakcheck_jobs"}
_PATHS = {"expect", "record", "results"}
#: Lists whose items hold commas of their own (a pair's settings), joined as they are, not as CSV.
_JOINED = {"pairs"}
_POOLER_KEYS = {"kind", "versions", "ini", "settings", "fleet"}
#: The raw key that carries the [[pooler]] tables, each on its own (JSON; no option of its own).
TABLES = "leakcheck_pooler_tables"
#: The options a [[pooler]] table stands for: given on the command line, they replace the file's tables.
POOLER_OPTIONS = ("leakcheck_pooler", "leakcheck_bouncer", "leakcheck_pooler_set", "leakcheck_bouncer_set",
                  "leakcheck_bouncer_ini")


def load(path: Path) -> dict[str, str]:
    """The option values a matrix file gives (ini-key names to strings); one-line UsageError otherwise."""
    where = f"{OPTION}={path}"
    inputs.check_file(path, where)
    try:
        data = inputs.parse(tomllib.loads, path.read_text(encoding="utf-8"), where)
    except FileNotFoundError:
        raise UsageError(f"{where}: there is no such file; write one (docs/gate.md: matrix files)") from None
    except IsADirectoryError:
        raise UsageError(f"{where} is a folder; give a matrix file such as matrices/upgrade.toml") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where} is not TOML ({' '.join(str(exc).split())})") from None
    return parse(data, path.parent, where)


def parse(data: dict[str, Any], folder: Path, where: str) -> dict[str, str]:
    unknown = set(data) - set(_SCALARS) - {"pooler", "driver_settings"}
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: "
                         f"{', '.join(sorted([*_SCALARS, 'pooler', 'driver_settings']))}")
    raw: dict[str, str] = {}
    for name, key in _SCALARS.items():
        if name in data:
            items = data[name] if name in _JOINED and isinstance(data[name], list) and data[name] else [data[name]]
            value = ",".join(_text(item, f"{where}: {name}") for item in items)
            raw[key] = str(folder / value) if name in _PATHS and not Path(value).is_absolute() else value
    tables = _poolers(data.get("pooler", []), folder, where)
    if tables:
        raw["leakcheck_pooler"] = ",".join(t["pooler"] for t in tables)
        raw[TABLES] = json.dumps(tables)
    # Every table's axes and ini also as the options (checked as the command line's; each name once):
    # which cells each one applies to is TABLES' business (config.PoolerTable).
    axes: dict[str, str] = {}
    for table in tables:
        for line in table["set"].splitlines():
            axes.setdefault(line.partition("=")[0], line)
    if axes:
        raw["leakcheck_pooler_set"] = "\n".join(axes.values())
    ini = next((t["ini"] for t in tables if t["ini"]), "")
    if ini:
        raw["leakcheck_bouncer_ini"] = ini
    driver_axes = _driver_settings(data.get("driver_settings", {}), where)
    if driver_axes:
        raw["leakcheck_driver_set"] = "\n".join(driver_axes)
    return raw


def _driver_settings(table: Any, where: str) -> list[str]:
    """[driver_settings] as --driver-set lines: `psycopg = { prepare_threshold = ["None", "5"] }`."""
    shape = 'a table of drivers, each a table of settings, e.g. psycopg = { prepare_threshold = ["None", "5"] }'
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise UsageError(f"{where}: driver_settings must be {shape}")
    return [f"{driver}:{name}={_text(values if isinstance(values, list) else [values], f'{where}: {driver}.{name}')}"
            for driver, settings in table.items() for name, values in settings.items()]


#: What no value of a matrix file holds: control characters but tab, and every line break (the file's
#: values become option lines: one would split a value in two).
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def _text(value: Any, where: str) -> str:
    """A string, a bool (yes/no) or a number, or a list of them joined by commas (quoted when needed)."""
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, str) and _CONTROL.search(item):
            raise UsageError(f"{where}: {item!r} holds a line break or a control character; give it on one line")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, str)):
        return str(value)
    if isinstance(value, list) and value and all(isinstance(v, (int, str)) for v in value):
        return _joined([str(v) for v in value])
    hint = " (a version is a text: quote it, e.g. \"1.24\")" if isinstance(value, float) or (
        isinstance(value, list) and any(isinstance(v, float) for v in value)) else ""
    raise UsageError(f"{where} is {value!r}: give a text, a number, true/false, or a list of texts{hint}")


def _joined(values: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(values)
    return out.getvalue()


def _poolers(entries: Any, folder: Path, where: str) -> list[dict[str, str]]:
    """Each [[pooler]] table on its own: its poolers, its settings axes and its ini apply to its cells only."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise UsageError(f"{where}: [[pooler]] must be tables (kind, versions, ini, settings)")
    tables: list[dict[str, str]] = []
    ini = ""
    for n, entry in enumerate(entries, 1):
        items: list[str] = []
        axes: list[str] = []
        own_ini = ""
        here = f"{where}: pooler {n}"
        unknown = set(entry) - _POOLER_KEYS
        rolling = isinstance(entry.get("fleet"), list)
        if unknown or "kind" not in entry or ("versions" not in entry and not rolling):
            raise UsageError(f"{here} needs kind and versions (and may have ini, settings and fleet); "
                             f"unknown: {', '.join(sorted(unknown)) or 'none'}")
        kind = _text(entry["kind"], f"{here} kind")
        fleet = _fleet(entry, kind, here)
        given = entry.get("versions", entry.get("fleet"))
        versions = given if isinstance(given, list) else [given]
        if not versions:
            raise UsageError(f"{here}: versions is empty; give at least one, e.g. versions = [\"1.24\"]")
        items += [f"{kind}:{_text(v, f'{here} versions')}" for v in versions]
        settings = entry.get("settings", {})
        if not isinstance(settings, dict):
            raise UsageError(f"{here}: settings is {settings!r}; give a table such as "
                             "settings = { max_prepared_statements = [0, 200] }")
        for name, values in settings.items():
            axes.append(f"{kind}:{name}={_text(values if isinstance(values, list) else [values], f'{here} {name}')}")
        if "ini" in entry:
            if kind != "pgbouncer" or ini:
                raise UsageError(f"{here}: ini is a PgBouncer setting, given once")
            value = _text(entry["ini"], f"{here} ini")
            ini = own_ini = value if Path(value).is_absolute() else str(folder / value)
        tables.append({"pooler": ",".join(items), "set": "\n".join(axes), "ini": own_ini, "fleet": fleet})
    return tables


def _fleet(entry: dict[str, Any], kind: str, here: str) -> str:
    """A table's `fleet` as --bouncer-fleet's text ("" for none): PgBouncer only; a rolling upgrade's
    releases are its versions."""
    if "fleet" not in entry:
        return ""
    if kind != "pgbouncer":
        raise UsageError(f"{here}: fleet is a PgBouncer setting (processes on one port); {kind} has none")
    value = entry["fleet"]
    text = _text(value, f"{here} fleet")
    if isinstance(value, list) and "versions" in entry:
        named = entry["versions"] if isinstance(entry["versions"], list) else [entry["versions"]]
        if sorted(map(str, named)) != sorted(map(str, value)):
            raise UsageError(f"{here}: a rolling-upgrade fleet runs the releases it names; give versions = "
                             f"{json.dumps([str(v) for v in value])} or leave versions out")
    return text
