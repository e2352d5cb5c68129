"""Baseline files: the verdict a team expects per cell, driver and probe, with an optional reason.

Two layouts, told apart by the file's text (pure except nothing: callers read and write):

TOML, `format = 2`, the one people edit and review (matrices/*.toml)::

    format = 2

    ["pg16/pgbouncer1.24"."psycopg3.3"]
    search_path = { verdict = "leaks", reason = "accepted: every query schema-qualifies its names" }
    statement_timeout = "leaks"
    timezone = "isolated"

    ["pg18/pgbouncer1.26[max_prepared_statements=0]".asyncpg]   # a driver without a release: any release
    protocol_prepare = "isolated"

JSON, `format: 1`, as earlier leakcheck versions wrote it (still read and written)::

    {"format": 1, "verdicts": {"pg16/pgbouncer1.24/psycopg/search_path": "leaks", ...}}

Both become the same flat keys (`pg16/pgbouncer1.24/psycopg3.3/search_path`, see
expectations.key) mapped to an `Expectation`.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from leakcheck.model.verdicts import Verdict

TOML_FORMAT = 2
JSON_FORMAT = 1


@dataclass(frozen=True)
class Expectation:
    """An expected verdict, and why the team accepts it (empty: no reason given)."""

    verdict: Verdict
    reason: str = ""


class Malformed(ValueError):
    """The text is no baseline; the message says what is wrong (expectations.read adds where and what to do)."""


def parse_text(text: str) -> dict[str, Expectation]:
    """Every entry of a baseline file's text (TOML format 2 or JSON format 1); Malformed otherwise."""
    if text.lstrip().startswith("{") or text.lstrip().startswith("["):
        try:
            data: Any = json.loads(text)
        except ValueError as exc:
            if text.lstrip().startswith("["):  # a TOML table header also starts with "["
                return _parse_toml(text)
            raise Malformed(f"it is not JSON ({exc})") from None
        return _parse_json(data)
    return _parse_toml(text)


def _verdict(value: Any, where: str) -> Verdict:
    known = {v.value for v in Verdict}
    if not isinstance(value, str) or value not in known:
        raise Malformed(f"{where} has the verdict {value!r}, not one of isolated, leaks, lost, breaks, loses_writes, "
                        "not_applicable")
    return Verdict(value)


def _parse_json(data: Any) -> dict[str, Expectation]:
    if not isinstance(data, dict):
        raise Malformed(f"the top level is {type(data).__name__}, not an object")
    if data.get("format") != JSON_FORMAT:
        raise Malformed(f"format is {data.get('format')!r}, not {JSON_FORMAT}")
    verdicts = data.get("verdicts")
    if not isinstance(verdicts, dict):
        raise Malformed(f"verdicts is {type(verdicts).__name__}, not an object")
    return {str(k): _entry(v, str(k)) for k, v in verdicts.items()}  # a verdict, or {"verdict", "reason"}


def _parse_toml(text: str) -> dict[str, Expectation]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise Malformed(f"it is neither JSON nor TOML ({exc})") from None
    if data.get("format") != TOML_FORMAT:
        raise Malformed(f"format is {data.get('format')!r}, not {TOML_FORMAT}")
    out: dict[str, Expectation] = {}
    for cell, drivers in data.items():
        if cell == "format":
            continue
        if not isinstance(drivers, dict):
            raise Malformed(f"{cell!r} is {type(drivers).__name__}, not a table of drivers")
        for driver, probes in drivers.items():
            if not isinstance(probes, dict):
                raise Malformed(f"[{cell!r}.{driver!r}] is {type(probes).__name__}, not a table of probes")
            for probe, value in probes.items():
                key = f"{cell}/{driver}/{probe}"
                out[key] = _entry(value, key)
    return out


def _entry(value: Any, key: str) -> Expectation:
    if isinstance(value, dict):
        unknown = set(value) - {"verdict", "reason"}
        if unknown:
            raise Malformed(f"{key} has unknown fields {sorted(unknown)} (a verdict and a reason are known)")
        reason = value.get("reason", "")
        if not isinstance(reason, str):
            raise Malformed(f"{key} has a reason {reason!r} that is not text")
        return Expectation(_verdict(value.get("verdict"), key), reason.strip())
    return Expectation(_verdict(value, key))


def render_toml(entries: Mapping[str, Expectation]) -> str:
    """The TOML text: cells, drivers and probes sorted, so a re-record shows as a small diff."""
    tree: dict[str, dict[str, dict[str, Expectation]]] = {}
    for key, expectation in entries.items():
        head, driver, probe = key.rsplit("/", 2)
        tree.setdefault(head, {}).setdefault(driver, {})[probe] = expectation
    lines = [
        "# leakcheck baseline: the verdict expected per cell, driver and probe (README: the upgrade gate).",
        "# A value is a verdict, or { verdict = \"...\", reason = \"why we accept it\" }; a driver without a",
        "# release (psycopg, asyncpg) holds for every release of it.",
        f"format = {TOML_FORMAT}",
    ]
    for head in sorted(tree):
        for driver in sorted(tree[head]):
            lines += ["", f"[{_string(head)}.{_string(driver)}]"]
            for probe in sorted(tree[head][driver]):
                found = tree[head][driver][probe]
                value = _string(found.verdict.value)
                if found.reason:
                    value = f"{{ verdict = {value}, reason = {_string(found.reason)} }}"
                lines.append(f"{_bare_or_string(probe)} = {value}")
    return "\n".join(lines) + "\n"


def render_json(entries: Mapping[str, Expectation]) -> str:
    """The JSON text of format 1: a verdict per key, or {"verdict": ..., "reason": ...} for an entry with a reason
    (a loses_writes entry needs one)."""
    body = {k: {"verdict": e.verdict.value, "reason": e.reason} if (e := entries[k]).reason else e.verdict.value
            for k in sorted(entries)}
    return json.dumps({"format": JSON_FORMAT, "verdicts": body}, indent=2) + "\n"


def _string(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=True)


def _bare_or_string(key: str) -> str:
    return key if key and all(ch.isalnum() or ch in "_-" for ch in key) and key.isascii() else _string(key)
