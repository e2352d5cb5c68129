"""Expected verdicts kept in matrices/*.json: the pre-upgrade gate (pure except load)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .errors import UsageError
from .verdicts import Outcome, Route, Verdict

#: JSON layout: {"format": 1, "verdicts": {"pg16/pgbouncer1.24/psycopg3.3/search_path": "leaks", ...}}
FORMAT = 1
#: The verdicts a matrix may hold: measurements. An error or a skip measured nothing.
GATE_VERDICTS = (Verdict.ISOLATED, Verdict.LEAKS, Verdict.LOST, Verdict.BREAKS, Verdict.NOT_APPLICABLE)

#: pg<major>/<pooler><major.minor>[<settings>]/<driver>[<major.minor>]/<probe>
_KEY = re.compile(r"pg[0-9]+/(?:[a-z]+[0-9]+\.[0-9]+(?:\[[^\]]*\])?|dsn-[^/]+)"
                  r"/[a-z]+(?:[0-9]+\.[0-9]+)?/[A-Za-z0-9_.-]+")
_LAYOUT = '{"format": 1, "verdicts": {"pg16/pgbouncer1.24/psycopg3.3/timezone": "isolated", ...}}'


def key(outcome: Outcome) -> str:
    """The cell's gate key: the PostgreSQL major, the pooler's major.minor and its settings axes,
    the driver's major.minor, the probe. Patch releases share expectations."""
    pooler = outcome.pooler.label(2) if outcome.pooler is not None else "-"
    version = outcome.target.driver_version
    driver = f"{outcome.driver.value}{version.prefix(2) if version is not None else ''}"
    return f"pg{outcome.pg.prefix(1)}/{pooler}/{driver}/{outcome.probe}"


def any_driver_version(k: str) -> str:
    """The key for every release of the key's driver: `.../psycopg3.3/probe` -> `.../psycopg/probe`."""
    head, driver, probe = k.rsplit("/", 2)
    return f"{head}/{driver.rstrip('0123456789.')}/{probe}"


def lookup(outcome: Outcome, expected: Mapping[str, Verdict]) -> Verdict | None:
    """The expected verdict: the entry for this driver release, else the one for any release."""
    k = key(outcome)
    return expected.get(k, expected.get(any_driver_version(k)))


def gate_value(verdict: Verdict) -> bool:
    """True for a verdict a matrix may hold (isolated, leaks, lost, breaks)."""
    return verdict in GATE_VERDICTS


def load(path: Path, option: str = "--expect") -> dict[str, Verdict]:
    """The expected verdicts of a gate file; a UsageError (one line) for anything that is not one.

    Only isolated/leaks/lost/breaks may be expected: an error or skipped entry is refused.
    """
    verdicts = read(path, option, f"re-record it with --record={path}")
    bad = {k: v for k, v in verdicts.items() if not gate_value(v)}
    if bad:
        k, v = next(iter(sorted(bad.items())))
        raise UsageError(
            f"{option}: {path} expects {v.value!r} for {k} ({len(bad)} such entries), but only isolated, leaks, "
            f"lost or breaks can be expected: an error never passes a gate; re-record it with --record={path}"
        )
    if not verdicts:
        raise UsageError(f"{option}: {path} holds no verdicts, so nothing could pass; record them with --record={path}")
    return verdicts


def read(path: Path, option: str, hint: str) -> dict[str, Verdict]:
    """Any well-formed matrix file, error and skipped entries included (a --record target may hold them).

    `hint` (what to do) ends the one-line UsageError when it is not one.
    """
    if path.is_dir():
        raise UsageError(f"{option}: {path} is a folder; give the path of a matrix file such as matrices/prod.json")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{option}: {path} does not exist; record one with --record={path}") from None
    except OSError as exc:
        raise UsageError(f"{option}: cannot read {path} ({exc.strerror or exc}); fix its permissions") from None
    except UnicodeDecodeError:
        raise UsageError(f"{option}: {path} is not UTF-8 text, so not a leakcheck matrix; {hint}") from None
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {path} is not JSON ({exc}); {hint}") from None
    return parse(data, f"{option}: {path}", hint)


def parse(data: Any, where: str, hint: str) -> dict[str, Verdict]:
    """The verdicts of decoded matrix JSON; a one-line UsageError naming `where` when it is not one."""

    def wrong(what: str) -> UsageError:
        return UsageError(f"{where} is not a leakcheck matrix ({what}; expected {_LAYOUT}); {hint}")

    if not isinstance(data, dict):
        raise wrong(f"the top level is {type(data).__name__}, not an object")
    if data.get("format") != FORMAT:
        raise wrong(f"format is {data.get('format')!r}, not {FORMAT}")
    verdicts = data.get("verdicts")
    if not isinstance(verdicts, dict):
        raise wrong(f"verdicts is {type(verdicts).__name__}, not an object")
    out: dict[str, Verdict] = {}
    known = ", ".join(v.value for v in GATE_VERDICTS)
    for k, v in verdicts.items():
        if not _KEY.fullmatch(k):
            raise wrong(f"the key {k!r} is not pg<major>/<pooler><major.minor>[<settings>]/<driver>[<major.minor>]"
                        "/<probe>")
        if not isinstance(v, str) or v not in {x.value for x in Verdict}:
            raise wrong(f"{k} has the verdict {v!r}, not one of {known}")
        out[k] = Verdict(v)
    return out


def render(verdicts: Mapping[str, Verdict]) -> str:
    """The file text: sorted keys, so a re-record shows as a small diff."""
    body = {k: verdicts[k].value for k in sorted(verdicts)}
    return json.dumps({"format": FORMAT, "verdicts": body}, indent=2) + "\n"


def dump(outcomes: Iterable[Outcome]) -> str:
    """The transaction-mode verdicts of `outcomes` as a matrix file (error and skipped ones left out)."""
    verdicts = {key(o): o.verdict for o in outcomes if o.route is Route.TRANSACTION and gate_value(o.verdict)}
    return render(verdicts)


def compare(outcome: Outcome, expected: Mapping[str, Verdict]) -> str | None:
    """None when the measured verdict is the expected one, else one line saying how it differs.

    A measured error (or skip) never passes, whatever `expected` says.
    """
    want = lookup(outcome, expected)
    if not gate_value(outcome.verdict):
        return f"measured {outcome.verdict.value}, which never passes a gate: {outcome.evidence}"
    if want is None:
        return f"no expected verdict for {key(outcome)} (measured {outcome.verdict.value}); record one with --record"
    if want is outcome.verdict:
        return None
    return f"expected {want.value}, measured {outcome.verdict.value}: {outcome.evidence}"
