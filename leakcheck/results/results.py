"""Outcomes as data: rebuilt from a test report's properties, put in one order, and the `--results` file.

A test report carries its outcome as JUnit-style properties (`LeakItem.runtest` fills them), so the
process that gets the reports (a serial run, or pytest-xdist's controller, which runs no test)
knows every outcome. `--results=PATH.json` writes them for `leakcheck merge`; the layout,
version 4:

    {"schema": "leakcheck-results", "version": 3,
     "outcomes": [{"probe": "statement_timeout", "pg": "16.14",
                   "pooler": {"kind": "pgbouncer", "version": "1.24.1",
                              "settings": [["max_prepared_statements", "0"]], "config": "",
                              "label": "pgbouncer1.24.1[max_prepared_statements=0]"},
                   "route": "transaction", "driver": "psycopg", "driver_version": "3.3.9",
                   "driver_settings": [["prepare_threshold", "None"]],
                   "driver_b": {"driver": "pgjdbc", "version": "42.5.5", "settings": []},
                   "verdict": "leaks", "facts": ["leaked"], "security": false, "evidence": "A: SET ...",
                   "details": {"b_reported": "..."}, "advice": "Set statement_timeout per transaction ..."}, ...],
     "unmeasured": [{"test": "leakcheck::test_leak[...]", "why": "worker 'gw1' crashed ..."}]}

- `outcomes`: every leak test's and every control's outcome, in `canonical` order. `pooler` is
  null on the direct and shared routes; its `kind` is pgbouncer, odyssey, pgpool or dsn,
  `version` null only for a running pooler (dsn), `settings` the cell's settings axes in the
  order given, `config` the team's --bouncer-ini as given ("" if none; a running pooler's --dsn-name),
  `label` what test ids show. `route` is transaction, session, direct or shared; `driver_version`
  the installed release (null when unknown); `driver_settings` the cell's driver settings axes
  (`--driver-set`) that differ from the driver's defaults, in the order given (empty: its
  defaults); `driver_b` (version 4, only in a mixed pair's outcome, `--pairs`) B's own driver, its
  release (null when unknown) and its settings, the fields before it being A's; `verdict` isolated,
  leaks, lost, breaks, not_applicable, error or skipped; `facts` any of broke, leaked, lost,
  misreported, recovered; `details` the parameter probes' extra properties (names to strings);
  `advice` (added within version 2, optional) what to do about this verdict in this cell, one line
  (`leakcheck.reports.advice`; code between backticks), or null when there is nothing to do
  (isolated, skipped, every control). It is derived from the fields above, so a reader ignores it:
  files without it are read the same.
- `unmeasured`: leak tests that failed without an outcome (a crashed xdist worker, a failed
  setup); they never pass a gate.

A file without a pair is written as version 3 (the same layout without `driver_b`), so a leakcheck
that reads version 3 reads it. Version 2 (no driver_settings: the drivers' defaults) and version 1
(PgBouncer only: `"bouncer": "1.24.1"` instead of `pooler`, no driver_version) are still read. A
reader refuses any other schema or version (a one-line UsageError): a new field that changes what an
outcome means gets a new version.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leakcheck.config import inputs
from leakcheck.config.output_files import check_writable, write_atomic
from leakcheck.model.errors import UsageError
from leakcheck.model.products import PRODUCTS
from leakcheck.model.target import Application, Driver, Pooler, PoolerKind, Route, Setting, Target
from leakcheck.model.verdicts import Fact, Outcome, Verdict
from leakcheck.model.versions import Version
from leakcheck.probes import PROBES
from leakcheck.reports.advice import advice

SCHEMA = "leakcheck-results"
VERSION = 4
#: The version of a file without a mixed pair: every field of VERSION but `driver_b`.
WITHOUT_PAIRS = 3
#: Versions this leakcheck reads (1: PgBouncer only, no settings, no driver versions; 2: no driver settings;
#: 3: no pairs).
READS = (1, 2, 3, 4)
OPTION = "--results"

#: The properties that make an outcome; any other property of a leak test is a detail (these are not).
FIELDS = ("probe", "pg_version", "pooler_kind", "pooler_version", "pooler_settings", "pooler_config", "route",
          "driver", "driver_version", "driver_settings", "verdict", "evidence", "facts", "security")
#: A mixed pair's B (`--pairs`): only a pair's report carries them.
PAIR_FIELDS = ("driver_b", "driver_b_version", "driver_b_settings")
_NOT_DETAILS = frozenset({*FIELDS, *PAIR_FIELDS, "matrix_key", "pooler", "bouncer_version", "pooler_fleet"})
_NONE = "-"  #: how a property says "empty" (no PgBouncer on a direct route, no facts)

_ROUTE_ORDER = (Route.TRANSACTION, Route.DIRECT, Route.SHARED, Route.SESSION)
_PROBE_ORDER = {p.id: i for i, p in enumerate(PROBES)}


@dataclass(frozen=True)
class Unmeasured:
    """A leak test that failed before it gave an outcome: nothing was measured, so it never passes."""

    test: str  #: its node id
    why: str  #: the first line of its failure


@dataclass(frozen=True)
class Results:
    """What one run measured (or several runs, merged)."""

    outcomes: tuple[Outcome, ...]
    unmeasured: tuple[Unmeasured, ...] = ()


# --- test report properties ----------------------------------------------------------------------


def properties(outcome: Outcome) -> list[tuple[str, str]]:
    """The properties a leak test's report carries for its outcome (JUnit shows them; `from_properties` reads them)."""
    pooler = outcome.pooler
    bouncer = pooler.version if pooler is not None and pooler.kind is PoolerKind.PGBOUNCER else None
    version = outcome.target.driver_version
    return [
        ("probe", outcome.probe), ("pg_version", str(outcome.pg)),
        ("pooler", pooler.label() if pooler else _NONE),
        ("pooler_kind", pooler.kind.value if pooler else _NONE),
        ("pooler_version", str(pooler.version) if pooler and pooler.version else _NONE),
        ("pooler_settings", json.dumps([list(kv) for kv in pooler.settings]) if pooler and pooler.settings else _NONE),
        ("pooler_config", pooler.config if pooler and pooler.config else _NONE),
        ("pooler_fleet", ",".join(map(str, pooler.fleet)) if pooler and pooler.fleet else _NONE),
        ("bouncer_version", str(bouncer) if bouncer else _NONE),
        ("route", outcome.route.value), ("driver", outcome.driver.value),
        ("driver_version", str(version) if version else _NONE),
        ("driver_settings", _settings_property(outcome.target.driver_settings)),
        *_pair_properties(outcome.target.b),
        ("verdict", outcome.verdict.value),
        ("evidence", outcome.evidence), ("facts", ",".join(outcome.facts) or _NONE),
        ("security", str(outcome.security).lower()), *outcome.details,
    ]


def _settings_property(settings: tuple[Setting, ...]) -> str:
    return json.dumps([list(kv) for kv in settings]) if settings else _NONE


def _pair_properties(b: Application | None) -> list[tuple[str, str]]:
    """A mixed pair's B as properties (PAIR_FIELDS); none for a single driver's test."""
    if b is None:
        return []
    return [("driver_b", b.driver.value), ("driver_b_version", str(b.version) if b.version else _NONE),
            ("driver_b_settings", _settings_property(b.settings))]


def _version_or_none(text: str) -> Version | None:
    return None if text in (_NONE, "") else Version.parse(text)


def _settings(value: Any) -> tuple[Setting, ...]:
    if not isinstance(value, list) or not all(isinstance(kv, list) and len(kv) == 2 for kv in value):
        raise TypeError(f"settings must be a list of [name, value] pairs, not {value!r}")
    return tuple((str(k), str(v)) for k, v in value)


def from_properties(props: Iterable[Sequence[object]]) -> Outcome | None:
    """The outcome a test report's `user_properties` describe; None when they hold none (the test
    failed before measuring). Pairs may be tuples or lists (pytest-xdist sends them as either)."""
    named: dict[str, str] = {}
    details: list[tuple[str, str]] = []
    for name, value in props:
        if str(name) in _NOT_DETAILS:
            named[str(name)] = str(value)
        else:
            details.append((str(name), str(value)))
    if not set(FIELDS) <= named.keys():
        return None
    pooler = None
    if named["pooler_kind"] != _NONE:
        settings = () if named["pooler_settings"] == _NONE else _settings(json.loads(named["pooler_settings"]))
        config = "" if named["pooler_config"] == _NONE else named["pooler_config"]
        fleet = named.get("pooler_fleet", _NONE)
        pooler = Pooler(PoolerKind(named["pooler_kind"]), _version_or_none(named["pooler_version"]), settings, config,
                        () if fleet == _NONE else tuple(Version.parse(v) for v in fleet.split(",")))
    driver_settings = () if named["driver_settings"] == _NONE else _settings(json.loads(named["driver_settings"]))
    b = None
    if "driver_b" in named:
        b_settings = named.get("driver_b_settings", _NONE)
        b = Application(Driver(named["driver_b"]), _version_or_none(named.get("driver_b_version", _NONE)),
                        () if b_settings == _NONE else _settings(json.loads(b_settings)))
    target = Target(Version.parse(named["pg_version"]), pooler, Route(named["route"]), Driver(named["driver"]),
                    _version_or_none(named["driver_version"]), driver_settings, b)
    return Outcome(
        probe=named["probe"], target=target, verdict=Verdict(named["verdict"]),
        evidence=named["evidence"], details=tuple(details),
        facts=() if named["facts"] == _NONE else tuple(Fact(f) for f in named["facts"].split(",")),
        security=named["security"] == "true",
    )


# --- order and identity --------------------------------------------------------------------------


def identity(outcome: Outcome) -> tuple[Target, str]:
    """What an outcome is of: its target and probe. One run measures each once."""
    return outcome.target, outcome.probe


def canonical(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """One order whatever order the tests finished in (serial, xdist, merged files): the leak tests,
    then the direct, shared and session controls; by PostgreSQL, PgBouncer, driver; probes in
    registry order (the matrix's rows)."""

    def key(o: Outcome) -> tuple[Any, ...]:
        p = o.pooler
        pooler = (p.kind.value, p.version.parts if p.version else (), p.settings, p.config) if p else ()
        b = o.target.b
        paired = (b.driver.value, b.version.parts if b.version else (), b.settings) if b is not None else ()
        return (_ROUTE_ORDER.index(o.route), o.pg.parts, pooler, o.driver.value,
                o.target.driver_version.parts if o.target.driver_version else (), o.target.driver_settings, paired,
                _PROBE_ORDER.get(o.probe, len(_PROBE_ORDER)), o.probe)

    return sorted(outcomes, key=key)


def name_of(outcome: Outcome) -> str:
    """The test's name, as the plugin generates it: `test_leak[pg16.14-pgbouncer1.24.1-psycopg-timezone]`."""
    return outcome.target.test_name(outcome.probe)


def combine(named: Sequence[tuple[str, Results]]) -> Results:
    """Several runs' results as one (each given with where it came from, for messages).

    One outcome measured by two runs (the direct and shared controls of one PostgreSQL run in
    every job of that version) is kept once when both measured the same verdict and facts; when
    they differ the results cannot be one report: a UsageError naming both.
    """
    seen: dict[tuple[Target, str], tuple[str, Outcome]] = {}
    unmeasured: dict[str, Unmeasured] = {}
    for where, results in named:
        for outcome in results.outcomes:
            first = seen.setdefault(identity(outcome), (where, outcome))
            other = first[1]
            if (other.verdict, other.facts) != (outcome.verdict, outcome.facts):
                raise UsageError(
                    f"{first[0]} and {where} disagree on {name_of(outcome)}: {_said(other)} and {_said(outcome)}; "
                    "merge results of one measurement each, or run that cell again"
                )
        for item in results.unmeasured:
            unmeasured.setdefault(item.test, item)
    return Results(tuple(canonical(o for _, o in seen.values())), tuple(unmeasured[k] for k in sorted(unmeasured)))


def _said(outcome: Outcome) -> str:
    return "+".join([outcome.verdict.value, *outcome.other_facts])


# --- the file ------------------------------------------------------------------------------------


def dumps(results: Results) -> str:
    """The file text (ASCII JSON, outcomes in canonical order, so equal runs give equal files)."""
    body = {
        "schema": SCHEMA,
        "version": VERSION if any(o.target.b is not None for o in results.outcomes) else WITHOUT_PAIRS,
        "outcomes": [_outcome_json(o) for o in canonical(results.outcomes)],
        "unmeasured": [{"test": u.test, "why": u.why} for u in sorted(results.unmeasured, key=lambda u: u.test)],
    }
    return json.dumps(body, indent=2) + "\n"


def pooler_json(pooler: Pooler | None) -> dict[str, Any] | None:
    if pooler is None:
        return None
    return {"kind": pooler.kind.value, "version": str(pooler.version) if pooler.version else None,
            "settings": [list(kv) for kv in pooler.settings], "config": pooler.config, "label": pooler.label(),
            **({"fleet": [str(v) for v in pooler.fleet]} if pooler.fleet else {})}


def _outcome_json(o: Outcome) -> dict[str, Any]:
    version = o.target.driver_version
    return {
        "probe": o.probe, "pg": str(o.pg), "pooler": pooler_json(o.pooler), "route": o.route.value,
        "driver": o.driver.value, "driver_version": str(version) if version else None,
        "driver_settings": [list(kv) for kv in o.target.driver_settings],
        **({"driver_b": _application_json(o.target.b)} if o.target.b is not None else {}),
        "verdict": o.verdict.value, "facts": [f.value for f in o.facts], "security": o.security,
        "evidence": o.evidence, "details": dict(o.details), "advice": advice(o),
    }


def _application_json(app: Application) -> dict[str, Any]:
    return {"driver": app.driver.value, "version": str(app.version) if app.version else None,
            "settings": [list(kv) for kv in app.settings]}


def save(path: Path, results: Results) -> str:
    """Write the file in one step (temp file, fsync, rename: config/output_files.py); the summary line."""
    write_atomic(path, dumps(results))
    return f"wrote {len(results.outcomes)} outcomes to {path}" + (
        f" ({len(results.unmeasured)} tests measured nothing)" if results.unmeasured else "")


def finish(path: Path, results: Results, reason: str | None) -> tuple[list[str], bool]:
    """--results at the end of a run: the summary lines, and False when writing failed (the caller
    fails the run). `reason` (record.not_written: an interrupted or incomplete run) means: write
    nothing, so a results file always holds a whole run."""
    if reason is None and not results.outcomes and not results.unmeasured:
        reason = "no leak test or control ran"
    if reason is not None:
        unchanged = " (the file is unchanged)" if path.exists() else ""
        return [f"{path} not written: {reason}{unchanged}"], True
    try:
        return [save(path, results)], True
    except OSError as exc:
        return [f"{path} not written: writing it failed ({exc.strerror or exc}); the file is unchanged"], False


def check_target(path: Path) -> None:
    """Before the run: `path` can be written, and a file there is not something else (one line if not)."""
    check_schema_target(path, OPTION, "results.json", SCHEMA, "a leakcheck results file")


def check_schema_target(path: Path, option: str, example: str, schema: str, what: str) -> None:
    """`path` can be written, and a file already there is JSON of `schema` (it is replaced: never
    another kind of file)."""
    if check_writable(path, option, example):
        inputs.check_file(path, option)
        try:
            data: Any = inputs.parse(json.loads, inputs.read_text(path, option), f"{option}: {path}")
        except (OSError, ValueError):
            data = None
        if not isinstance(data, dict) or data.get("schema") != schema:
            raise UsageError(f"{option}: {path} exists and is not {what}; move it away, or give {option} another path")


def load(path: Path, option: str = "merge") -> Results:
    """A results file; anything else (missing, unreadable, not JSON, another schema or version, a
    malformed outcome) is a one-line UsageError naming `path`."""
    hint = "give a file written by pytest --results"
    if path.is_dir():
        raise UsageError(f"{option}: {path} is a folder; {hint}")
    text = inputs.read_file(path, option, "a leakcheck results file", hint, hint)
    try:
        data: Any = inputs.parse(json.loads, text, f"{option}: {path}")
    except ValueError as exc:
        raise UsageError(f"{option}: {path} is not JSON ({exc}); {hint}") from None
    return parse(data, f"{option}: {path}")


def parse(data: Any, where: str) -> Results:
    """Decoded results JSON; a one-line UsageError naming `where` when it is not version 1 of the schema."""

    def wrong(what: str) -> UsageError:
        return UsageError(f"{where} is not a leakcheck results file ({what}); give a file written by pytest --results")

    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise wrong(f"schema is {got!r}, not {SCHEMA!r}")
    if type(data.get("version")) is not int or data.get("version") not in READS:  # JSON's true is not 1
        raise UsageError(
            f"{where} is version {json.dumps(data.get('version'))} of {SCHEMA}, this leakcheck reads versions "
            f"{', '.join(map(str, READS))}: merge files written by a leakcheck version that writes one of them"
        )
    outcomes, unmeasured = data.get("outcomes"), data.get("unmeasured", [])
    if not isinstance(outcomes, list) or not isinstance(unmeasured, list):
        raise wrong("outcomes and unmeasured must be lists")
    try:
        return Results(tuple(_outcome(o) for o in outcomes), tuple(_unmeasured(u) for u in unmeasured))
    except (KeyError, TypeError, ValueError, UsageError) as exc:  # UsageError: Version.parse's
        raise wrong(f"a malformed entry: {type(exc).__name__} {exc}") from None


def _text(data: dict[str, Any], name: str) -> str:
    value = data[name]
    if not isinstance(value, str):
        raise TypeError(f"{name} is {value!r}, not a string")
    return value


#: What a probe id and a driver id look like (a catalogue id, or a team agent's cmd-NAME).
_PROBE_ID = re.compile(r"[a-z0-9_]+")
_DRIVER_ID = re.compile(r"[a-z0-9][a-z0-9._-]*")


def _id(data: dict[str, Any], name: str, shape: re.Pattern[str]) -> str:
    value = _text(data, name)
    if not shape.fullmatch(value):
        raise ValueError(f"a {name} id is {value!r}, not {shape.pattern}")
    return value


def _outcome(data: Any) -> Outcome:
    if not isinstance(data, dict):
        raise TypeError(f"an outcome is {type(data).__name__}, not an object")
    facts, details, security = data["facts"], data.get("details", {}), data["security"]
    if not isinstance(facts, list) or not isinstance(details, dict) or not isinstance(security, bool):
        raise TypeError(f"facts must be a list, details an object, security true or false in {data!r}")
    if "pooler" in data:  # version 2
        target = Target(Version.parse(_text(data, "pg")), _pooler(data["pooler"]), Route(_text(data, "route")),
                        Driver(_id(data, "driver", _DRIVER_ID)), _optional_version(data.get("driver_version")),
                        _settings(data.get("driver_settings", [])), _application(data.get("driver_b")))
    else:  # version 1: PgBouncer only
        bouncer = _text(data, "bouncer")
        pooler = Pooler(PoolerKind.PGBOUNCER, Version.parse(bouncer)) if bouncer else None
        target = Target(Version.parse(_text(data, "pg")), pooler, Route(_text(data, "route")),
                        Driver(_id(data, "driver", _DRIVER_ID)))
    return Outcome(
        probe=_id(data, "probe", _PROBE_ID), target=target, verdict=Verdict(_text(data, "verdict")),
        evidence=_text(data, "evidence"), details=tuple((str(k), _text(details, k)) for k in details),
        facts=tuple(Fact(f) for f in facts), security=security,
    )


def _application(data: Any) -> Application | None:
    """A mixed pair's B (`driver_b`, version 4); None when absent or null (a single driver's outcome)."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise TypeError(f"driver_b is {type(data).__name__}, not an object")
    return Application(Driver(_id(data, "driver", _DRIVER_ID)), _optional_version(data.get("version")),
                       _settings(data.get("settings", [])))


def _optional_version(value: Any) -> Version | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"a version is {value!r}, not a string")
    return Version.parse(value)


def _pooler(data: Any) -> Pooler | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise TypeError(f"a pooler is {type(data).__name__}, not an object")
    config = data.get("config", "")
    if not isinstance(config, str):
        raise TypeError(f"a pooler's config is {config!r}, not a string")
    fleet = data.get("fleet", [])
    if not isinstance(fleet, list) or not all(isinstance(v, str) for v in fleet):
        raise TypeError(f"a pooler's fleet is {fleet!r}, not a list of versions")
    kind, version = PoolerKind(_text(data, "kind")), _optional_version(data.get("version"))
    if (version is None) != (not kind.started):
        raise ValueError(f"the {kind.value} pooler's version is {version or 'null'}: only a running pooler (dsn) "
                         "has no version")
    if fleet and not kind.record.fleets:
        fleets = " or ".join(p.title for p in PRODUCTS.values() if p.fleets)
        raise ValueError(f"the {kind.value} pooler has a fleet: only {fleets} runs as a fleet")
    if fleet and (len(fleet) < 2 or Version.parse(fleet[0]) != version):
        raise ValueError(f"a fleet is {fleet!r}: a fleet is two processes or more, the first of the pooler's version")
    return Pooler(kind, version, _settings(data.get("settings", [])), config, tuple(Version.parse(v) for v in fleet))


def _unmeasured(data: Any) -> Unmeasured:
    if not isinstance(data, dict):
        raise TypeError(f"an unmeasured entry is {type(data).__name__}, not an object")
    return Unmeasured(test=_text(data, "test"), why=_text(data, "why"))
