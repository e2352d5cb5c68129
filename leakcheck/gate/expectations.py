"""Expected verdicts kept in matrices/ (baseline files, baseline.py): the pre-upgrade gate's keys,
loading and comparing (pure except read/load)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from leakcheck.config import inputs
from leakcheck.gate.baseline import Expectation, Malformed, parse_text, render_json, render_toml
from leakcheck.model.axes import outside_brackets
from leakcheck.model.errors import UsageError
from leakcheck.model.target import DRIVER_ID, PAIR_JOIN, Application, Route, driver_label, settings_label
from leakcheck.model.verdicts import Outcome, Verdict

#: The verdicts a baseline may hold: measurements. An error or a skip measured nothing. A lost write no error
#: told the application (loses_writes) only by hand, with a reason (`load`): nothing records it by itself.
GATE_VERDICTS = (Verdict.ISOLATED, Verdict.LEAKS, Verdict.LOST, Verdict.BREAKS, Verdict.NOT_APPLICABLE,
                 Verdict.LOSES_WRITES)

#: One application in a key: <driver>[<major.minor>][<settings>].
_APP = rf"{DRIVER_ID}(?:-?[0-9]+\.[0-9]+)?(?:\[[^\]/]*\])?"
#: pg<major>/<pooler><major.minor>[<settings>]/<application>[+<application>]/<probe>: a mixed pair's A, then its
#: B (`pgjdbc42.5+psycopg3.3`); a fleet's pooler is `pgbouncer1.24x2[...]` (two processes of one release) or
#: `pgbouncer1.24+1.26[...]` (a rolling upgrade)
_KEY = re.compile(r"pg[0-9]+/(?:[a-z]+[0-9]+\.[0-9]+(?:x[0-9]+|(?:\+[0-9]+\.[0-9]+)+)?(?:\[[^\]]*\])?|dsn-[^/]+)"
                  rf"/{_APP}(?:\{PAIR_JOIN}{_APP})?/[A-Za-z0-9_.-]+")
_DRIVER = re.compile(rf"({DRIVER_ID})(?:-?[0-9]+(?:\.[0-9]+)*)?(\[.*\])?")
_LAYOUT = 'format = 2, then tables such as ["pg16/pgbouncer1.24"."psycopg3.3"] with timezone = "isolated"'


def _app_key(app: Application) -> str:
    """An application as keys write it: the driver's major.minor and its settings axes."""
    version = app.version.prefix(2) if app.version is not None else None
    return f"{driver_label(app.driver.value, version)}{settings_label(app.settings)}"


def key(outcome: Outcome) -> str:
    """The cell's gate key: the PostgreSQL major, the pooler's major.minor and its settings axes,
    the driver's major.minor and its settings axes (a mixed pair's A's, `+`, then B's), the probe.
    Patch releases share expectations."""
    pooler = outcome.pooler.label(2) if outcome.pooler is not None else "-"
    target = outcome.target
    driver = _app_key(target.a_app) + (f"{PAIR_JOIN}{_app_key(target.b)}" if target.b is not None else "")
    return f"pg{outcome.pg.prefix(1)}/{pooler}/{driver}/{outcome.probe}"


def any_driver_version(k: str) -> str:
    """The key for every release of the key's driver (its settings kept): `.../psycopg3.3/probe` ->
    `.../psycopg/probe`, `.../pgjdbc42.5[prepareThreshold=0]/probe` -> `.../pgjdbc[prepareThreshold=0]/probe`;
    a pair's both: `.../pgjdbc42.5+psycopg3.3/probe` -> `.../pgjdbc+psycopg/probe`."""
    head, drivers, probe = k.rsplit("/", 2)
    return f"{head}/{PAIR_JOIN.join(_any_release(d) for d in outside_brackets(drivers, PAIR_JOIN))}/{probe}"


def _any_release(driver: str) -> str:
    name, bracket, settings = driver.partition("[")
    found = _DRIVER.fullmatch(driver)  # pgx-v5-5.13 -> pgx-v5
    return f"{found.group(1) if found else name.rstrip('0123456789.')}{bracket}{settings}"


def lookup(outcome: Outcome, expected: Mapping[str, Expectation]) -> Expectation | None:
    """The expectation for this driver release, else the one for any release of the driver."""
    k = key(outcome)
    return expected.get(k, expected.get(any_driver_version(k)))


def gate_value(verdict: Verdict) -> bool:
    """True for a verdict a baseline may hold (isolated, leaks, lost, breaks, not_applicable)."""
    return verdict in GATE_VERDICTS


def load(path: Path, option: str = "--expect") -> dict[str, Expectation]:
    """The expectations of a baseline file; a UsageError (one line) for anything that is not one.

    Only measurements may be expected: an error or skipped entry is refused.
    """
    entries = read(path, option, f"re-record it with --record={path}")
    bad = {k: e for k, e in entries.items() if not gate_value(e.verdict)}
    if bad:
        k, e = next(iter(sorted(bad.items())))
        raise UsageError(
            f"{option}: {path} expects {e.verdict.value!r} for {k} ({len(bad)} such entries), but only isolated, "
            f"leaks, lost, breaks or not_applicable can be expected: an error never passes a gate; re-record it "
            f"with --record={path}"
        )
    unexplained = sorted(k for k, e in entries.items() if e.verdict is Verdict.LOSES_WRITES and not e.reason)
    if unexplained:
        raise UsageError(
            f"{option}: {path} expects loses_writes for {unexplained[0]} ({len(unexplained)} such entries) without a "
            "reason: a lost write no error told the application is accepted only by hand, with a reason "
            '(TOML: { verdict = "loses_writes", reason = "..." })')
    if not entries:
        raise UsageError(f"{option}: {path} holds no verdicts, so nothing could pass; record them with --record={path}")
    return entries


def recordable(verdict: Verdict) -> bool:
    """A verdict `--record`/`--update` write by themselves: a measurement, but never loses_writes (only a
    person accepts a lost write, with a reason)."""
    return gate_value(verdict) and verdict is not Verdict.LOSES_WRITES


def read(path: Path, option: str, hint: str) -> dict[str, Expectation]:
    """Any well-formed baseline file, error and skipped entries included (a --record target may hold them).

    `hint` (what to do) ends the one-line UsageError when it is not one.
    """
    if path.is_dir():
        raise UsageError(f"{option}: {path} is a folder; give the path of a baseline file such as matrices/prod.toml")
    text = inputs.read_file(path, option, "a leakcheck baseline", hint, f"record one with --record={path}")
    return parse(text, f"{option}: {path}", hint)


def parse(text: str, where: str, hint: str) -> dict[str, Expectation]:
    """A baseline's text; a one-line UsageError naming `where` when it is not one."""
    try:
        entries = inputs.parse(parse_text, text, where)
    except Malformed as exc:
        raise UsageError(f"{where} is not a leakcheck baseline ({one_line_of(exc)}; expected {_LAYOUT}); {hint}") \
            from None
    for k in entries:
        if not _KEY.fullmatch(k):
            raise UsageError(f"{where} is not a leakcheck baseline (the key {k!r} is not "
                             f"pg<major>/<pooler><major.minor>[<settings>]/<driver>[<major.minor>]/<probe>, a pair's "
                             f"<driver>+<driver>); {hint}")
    return entries


def one_line_of(exc: Exception) -> str:
    return " ".join(str(exc).split())


def render(entries: Mapping[str, Expectation], path: Path | None = None) -> str:
    """The file text for `path`: JSON format 1 for a .json file, else TOML format 2 (both with reasons)."""
    return render_json(entries) if path is not None and path.suffix == ".json" else render_toml(entries)


def dump(outcomes: Iterable[Outcome], path: Path | None = None) -> str:
    """The pooled-route verdicts of `outcomes` as a baseline (error and skipped ones left out)."""
    entries = {key(o): Expectation(o.verdict) for o in outcomes
               if o.route is Route.TRANSACTION and recordable(o.verdict)}
    return render(entries, path)
