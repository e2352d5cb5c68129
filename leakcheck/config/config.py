"""The options (options.py) given as flags, ini keys or a matrix file, validated into one frozen Config."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from leakcheck.config import inputs, matrix_file
from leakcheck.config.diff_sides import DiffSide, parse_side
from leakcheck.config.distinct_paths import EXPECT, check_own_files
from leakcheck.config.options import DEFAULT_BOUNCER, DEFAULT_PG, DEFAULTS, FLAGS, MATRIX_SWITCHES
from leakcheck.drivers.agents.catalogue import known_drivers
from leakcheck.drivers.agents.team import is_team, registered, team_driver
from leakcheck.drivers.settings import cell_settings, check_axis
from leakcheck.model import products
from leakcheck.model.axes import (
    NO_FLEET,
    PAIRS_SHAPE,
    PEERING,
    Axis,
    DriverAxis,
    FleetShape,
    PairSide,
    check_distinct,
    check_peering,
    parse_axis,
    parse_driver_axis,
    parse_fleet,
    parse_pairs,
    parse_poolers,
)
from leakcheck.model.errors import UsageError
from leakcheck.model.pool_settings import PoolMode
from leakcheck.model.target import NATIVE_DRIVERS, Application, Driver, PoolerKind
from leakcheck.model.versions import Spec, Version, parse_spec_list
from leakcheck.probes import PROBES, select
from leakcheck.probes.base import Probe
from leakcheck.provision.containers.images import check_template
from leakcheck.provision.containers.odyssey_pgpool_files import missing_image
from leakcheck.provision.dsn_backend import check_dsn, default_name
from leakcheck.provision.postgres.fixtures import refuse_older
from leakcheck.provision.products import product


def _pg_specs(raw: str) -> tuple[Spec, ...]:
    """--pg's versions and paths; a version older than the oldest leakcheck measures is refused here (a path's
    version is checked once it is known, before any server starts)."""
    specs = parse_spec_list(raw, "--pg")
    for spec in specs:
        if spec.version is not None:
            refuse_older(spec.version, f"--pg={spec}")
    return specs


def matrix_asked(config: pytest.Config) -> bool:
    """Whether a flag or ini key turns the leak matrix on (--pg, --bouncer, --pooler, ...), valid or not."""
    return any(_raw(config, key) is not None for key in MATRIX_SWITCHES)


def _raw(config: pytest.Config, ini: str) -> str | None:
    """The flag's value, else the ini key's; None only when neither is given ('' is given and empty)."""
    value = config.getoption(ini)
    if value is None:
        value = config.getini(ini)
    if isinstance(value, list):
        return repeated(ini, [str(v) for v in value])
    return None if value is None else str(value)


def repeated(ini: str, values: Sequence[str]) -> str | None:
    """A repeatable option's values joined by newlines (None: not given); a value holding a newline
    would be two values then, so it is a UsageError."""
    for value in values:
        if "\n" in value:
            raise UsageError(f"{FLAGS[ini]}={value!r} holds a line break: give one value per {FLAGS[ini]}")
    return "\n".join(values) if values else None


def _given(raw: dict[str, str | None], key: str, expected: str) -> str | None:
    """The value of `key`; None when not given; a UsageError when given but blank or with a NUL."""
    value = raw.get(key)
    if value is None:
        return None
    if not value.strip():
        raise UsageError.empty(FLAGS[key], expected)
    if "\x00" in value:
        raise UsageError.bad_value(FLAGS[key], value, expected)
    return value


@dataclass(frozen=True)
class PoolerTable:
    """One [[pooler]] table of a matrix file: its settings axes and ini apply to its poolers only."""

    poolers: tuple[tuple[PoolerKind, Spec], ...]
    axes: tuple[Axis, ...] = ()
    ini: str | None = None
    fleet: FleetShape = NO_FLEET  #: `fleet = 2` or `fleet = ["1.24", "1.26"]`: its PgBouncer cells are fleets


@dataclass(frozen=True)
class Config:
    """The whole run's settings, validated."""

    pg: tuple[Spec, ...]
    #: every pooler asked for, --bouncer's as PgBouncer, in the order given
    poolers: tuple[tuple[PoolerKind, Spec], ...]
    drivers: tuple[Driver, ...]
    probes: tuple[Probe, ...]
    controls: bool
    backend: str
    expect: Path | None
    record: Path | None
    pg_image: str
    #: --bouncer-image, --odyssey-image, --pgpool-image (each product's image_option): the containers backend's
    #: image template of each pooler kind given one
    images: Mapping[PoolerKind, str]
    results: Path | None = None  #: --results: every outcome as JSON (results.py)
    jobs: int = 0  #: --jobs: lanes at a time (0: auto, lanes.default_jobs)
    axes: tuple[Axis, ...] = ()  #: --bouncer-set / --pooler-set: settings crossed into the matrix
    bouncer_ini: str | None = None  #: --bouncer-ini: the team's pgbouncer.ini, as given
    pooled_dsn: str | None = None  #: --pooled-dsn: a running pooler (then no servers are started)
    direct_dsn: str | None = None  #: --direct-dsn: its PostgreSQL, for the controls
    dsn_name: str = ""  #: --dsn-name (or the pooled DSN's host)
    require: frozenset[str] | None = None  #: --require: probe ids that must be isolated (None: no policy)
    update: bool = False  #: --update: rewrite the --expect file (record = expect)
    diff: tuple[DiffSide, DiffSide] | None = None  #: --diff FROM..TO, printed at the end of the run
    report_html: Path | None = None  #: --report-html: the HTML report (reports/html.py)
    report_md: Path | None = None  #: --report-md: the Markdown report (reports/markdown.py)
    #: a matrix file's [[pooler]] tables, each its own (empty: poolers, axes and bouncer_ini make one)
    tables: tuple[PoolerTable, ...] = ()
    fleet: FleetShape = NO_FLEET  #: --bouncer-fleet: each PgBouncer cell a fleet of processes on one port
    driver_axes: tuple[DriverAxis, ...] = ()  #: --driver-set: driver settings crossed into the matrix
    #: --pairs: mixed applications, (A's, B's), each without its release (resolved with the targets)
    pairs: tuple[tuple[Application, Application], ...] = ()

    @property
    def pooler_tables(self) -> tuple[PoolerTable, ...]:
        """The matrix's pooler tables: a matrix file's own, else one of --pooler/--bouncer, their axes and ini."""
        return self.tables or (PoolerTable(self.poolers, self.axes, self.bouncer_ini, self.fleet),)

    @property
    def bouncer(self) -> tuple[Spec, ...]:
        """The PgBouncer versions (or paths) asked for."""
        return tuple(spec for kind, spec in self.poolers if kind is PoolerKind.PGBOUNCER)

    @classmethod
    def for_prepare(cls, pg: str, bouncer: str | None, backend: str, pooler: str | None = None,
                    drivers: str | None = None) -> Config:
        """What `leakcheck prepare` needs: the versions and the backend, validated like the options."""
        raw: dict[str, str | None] = {"leakcheck_pg": pg, "leakcheck_bouncer": bouncer, "leakcheck_backend": backend,
                                      "leakcheck_pooler": pooler}
        pg = _given(raw, "leakcheck_pg", "PostgreSQL versions such as 16,18") or DEFAULT_PG
        backend = _given(raw, "leakcheck_backend", "native, containers or auto") or "native"
        if backend.strip().lower() not in ("native", "containers", "auto"):
            raise UsageError.bad_value("--backend", backend, "native, containers or auto")
        poolers = _poolers(raw)
        return cls(pg=_pg_specs(pg), poolers=poolers,
                   drivers=_drivers(drivers) if drivers is not None else NATIVE_DRIVERS,
                   probes=select(None), controls=False, backend=backend.strip().lower(),
                   expect=None, record=None, pg_image=DEFAULTS["leakcheck_pg_image"] or "", images={})

    @classmethod
    def from_pytest(cls, config: pytest.Config) -> Config | None:
        """None when neither --pg nor --bouncer (nor their ini keys) asks for the matrix.

        Every value given is validated either way; a leakcheck flag given on the command line
        without the matrix is an error (it would do nothing, silently).
        """
        raw = {ini: _raw(config, ini) for ini in FLAGS}
        settings = cls.from_strings(raw, junitxml=getattr(config.option, "xmlpath", None))
        if not matrix_asked(config):
            idle = [flag for ini, flag in FLAGS.items() if config.getoption(ini) is not None]
            if idle:
                raise UsageError(
                    f"{', '.join(idle)} given, but the leak matrix is off: add --pg (e.g. --pg=16), --bouncer or "
                    f"--pooler to run it, or drop {', '.join(idle)}"
                )
            return None
        return settings

    @classmethod
    def from_strings(cls, raw: dict[str, str | None], junitxml: str | Path | None = None) -> Config:
        """Validate option values; a key missing or None takes its default, a blank value is an error.
        A --matrix file gives the values not given here. `junitxml`: that report's path, checked with the
        other files the run writes."""
        matrix = _given(raw, "leakcheck_matrix", "the path of a matrix file such as matrices/upgrade.toml")
        if matrix is not None:
            given = {k: v for k, v in raw.items() if v is not None}
            from_file = matrix_file.load(Path(matrix))
            if any(k in given for k in matrix_file.POOLER_OPTIONS):  # the command line's poolers replace the tables
                dropped = (matrix_file.TABLES, *matrix_file.POOLER_OPTIONS)
                from_file = {k: v for k, v in from_file.items() if k not in dropped}
            raw = {**from_file, **given}
        diff = _diff(raw)
        if diff is not None:
            raw = {**_diff_matrix(raw, diff), **{k: v for k, v in raw.items() if v is not None}}

        def get(key: str, expected: str) -> str:
            value = _given(raw, key, expected)
            default = DEFAULTS[key]
            assert value is not None or default is not None, key
            return value if value is not None else str(default)

        controls = get("leakcheck_controls", "yes or no").strip().lower()
        if controls not in ("yes", "no"):
            raise UsageError.bad_value("--controls", controls, "yes or no")
        backend = get("leakcheck_backend", "native, containers or auto").strip().lower()
        if backend not in ("native", "containers", "auto"):
            raise UsageError.bad_value("--backend", backend, "native, containers or auto")
        pg = _given(raw, "leakcheck_pg", "PostgreSQL versions such as 16,18") or DEFAULT_PG
        expect = _given(raw, "leakcheck_expect", "the path of a matrices/*.json file")
        record = _given(raw, "leakcheck_record", "the path of a matrices/*.json file to write")
        update = (_given(raw, "leakcheck_update", "yes or no") or "no").strip().lower()
        if update not in ("yes", "no"):
            raise UsageError.bad_value("--update", update, "yes or no")
        if update == "yes":
            if expect is None:
                raise UsageError("--update rewrites the --expect baseline: give --expect=FILE (or record a new "
                                 "one with --record=FILE)")
            if record is not None and Path(record) != Path(expect):
                raise UsageError(f"--update rewrites --expect={expect}; --record={record} is another file: give one")
            record = expect
        results = _given(raw, "leakcheck_results", "the path of a JSON file to write, such as results.json")
        report_html = _given(raw, "leakcheck_report_html", "the path of an HTML file to write, such as leakcheck.html")
        report_md = _given(raw, "leakcheck_report_md", "the path of a Markdown file to write, such as leakcheck.md")
        images = _images(raw)
        bouncer_ini = _given(raw, "leakcheck_bouncer_ini", "the path of your pgbouncer.ini")
        if bouncer_ini is not None:
            inputs.check_file(Path(bouncer_ini), "--bouncer-ini")
        check_own_files({"--record": record, "--results": results, "--report-html": report_html,
                         "--report-md": report_md, "--junitxml": junitxml},
                        {EXPECT: expect, "the --matrix file": matrix, "the --bouncer-ini file": bouncer_ini},
                        may_rewrite=("--record", EXPECT) if update == "yes" else None)
        pooled, direct, name = _dsns(raw)
        fleet = _fleet(raw)
        tables = _tables(raw.get(matrix_file.TABLES)) if pooled is None else ()
        any_fleet = fleet.is_fleet or any(t.fleet.is_fleet for t in tables)
        probes = _probes(get("leakcheck_probes", "probe ids separated by commas, or all"), any_fleet)
        poolers = _poolers(raw, fleet) if pooled is None else ()
        pairs = _pairs(raw)
        named = _given(raw, "leakcheck_drivers", "driver ids such as psycopg,asyncpg")
        # --pairs alone runs its pairs only; with --drivers, both
        drivers = () if named is None and pairs else _drivers(get("leakcheck_drivers", "driver ids such as psycopg"))
        if diff is not None and pooled is None:
            _diff_in_matrix(diff, _pg_specs(pg), poolers)
        missing = [(kind, spec) for kind, spec in poolers if not kind.record.image_built and kind not in images]
        if backend == "containers" and missing:
            raise missing_image(*missing[0])
        if bouncer_ini is not None and not any(kind.record.team_file for kind, _ in poolers):
            raise UsageError("--bouncer-ini is a PgBouncer config, but no PgBouncer is in the matrix: add --bouncer "
                             "(e.g. --bouncer=1.24)")
        if record is not None and controls == "no":
            written = "--update" if update == "yes" else f"--record={record}"
            raise UsageError(f"{written} with --controls=no: a verdict is written only where its controls passed in "
                             "the same run, and none would run; leave out --controls=no")
        return cls(
            pg=_pg_specs(pg),
            poolers=poolers,
            drivers=drivers,
            probes=probes,
            controls=controls == "yes",
            backend=backend,
            expect=Path(expect) if expect is not None else None,
            record=Path(record) if record is not None else None,
            pg_image=check_template(get("leakcheck_pg_image", "an image template such as postgres:{version}"),
                                    "--pg-image"),
            images=images,
            results=Path(results) if results is not None else None,
            jobs=_jobs(get("leakcheck_jobs", "a number of lanes such as 4, or auto")),
            axes=_checked_axes(_axes(raw, poolers), fleet) if not tables else _axes(raw, poolers),
            bouncer_ini=bouncer_ini,
            pooled_dsn=pooled, direct_dsn=direct, dsn_name=name,
            require=_required_among(raw, probes),
            update=update == "yes",
            diff=_diff(raw),
            report_html=Path(report_html) if report_html is not None else None,
            report_md=Path(report_md) if report_md is not None else None,
            tables=tables,
            fleet=fleet,
            driver_axes=_driver_axes(raw.get("leakcheck_driver_set"), drivers, pairs),
            pairs=pairs,
        )


def _images(raw: dict[str, str | None]) -> dict[PoolerKind, str]:
    """Each pooler kind's image template its option (--bouncer-image, --odyssey-image, ...) gives, checked."""
    images: dict[PoolerKind, str] = {}
    for record in products.PRODUCTS.values():
        key = "leakcheck_" + record.image_option.lstrip("-").replace("-", "_")
        if record.image_option and key in FLAGS:
            example = f"an image template such as registry/{record.key}:{{version}}"
            given = _given(raw, key, example)
            if given is not None:
                images[PoolerKind(record.key)] = check_template(given, record.image_option)
    return images


def _dsns(raw: dict[str, str | None]) -> tuple[str | None, str | None, str]:
    """--pooled-dsn, --direct-dsn and --dsn-name, checked; a running pooler excludes the servers leakcheck starts,
    and needs --direct-dsn: the witness (probes/witness.py) proves on the server which connection each client had."""
    pooled = _given(raw, "leakcheck_pooled_dsn", "a postgresql:// URI through the running pooler")
    direct = _given(raw, "leakcheck_direct_dsn", "a postgresql:// URI to its PostgreSQL")
    name = _given(raw, "leakcheck_dsn_name", "a name such as staging")
    if pooled is None:
        extra = [FLAGS[k] for k, v in (("leakcheck_direct_dsn", direct), ("leakcheck_dsn_name", name)) if v]
        if extra:
            raise UsageError(f"{', '.join(extra)} go with --pooled-dsn: give the running pooler's URI too")
        return None, None, ""
    started = [FLAGS[k] for k in ("leakcheck_pg", "leakcheck_bouncer", "leakcheck_pooler", "leakcheck_bouncer_ini",
                                  "leakcheck_bouncer_set", "leakcheck_pooler_set") if raw.get(k) is not None]
    if started:
        raise UsageError(f"--pooled-dsn measures the pooler already running there, so {', '.join(started)} "
                         "(servers leakcheck would start) cannot go with it; leave them out")
    pooled = check_dsn(pooled, "--pooled-dsn")
    direct = check_dsn(direct, "--direct-dsn") if direct is not None else None
    if direct is None:
        raise UsageError("--pooled-dsn without --direct-dsn: the clients' own word (pg_backend_pid()) would be the "
                         "only proof that they share a server connection, and it is no proof; give "
                         "--direct-dsn=postgresql://USER@HOST/DB (straight to its PostgreSQL) so leakcheck's own "
                         "session can see the server")
    name = name.strip() if name else default_name(pooled)
    if not all(ch.isalnum() or ch in "_.-" for ch in name):
        raise UsageError.bad_value("--dsn-name", name, "letters, digits, '_', '.' or '-'")
    return pooled, direct, name


def _fleet(raw: dict[str, str | None]) -> FleetShape:
    """--bouncer-fleet, checked (a matrix file's fleets are in its [[pooler]] tables)."""
    given = _given(raw, "leakcheck_bouncer_fleet", "a number of processes such as 2, or releases such as 1.24,1.26")
    if given is None:
        return NO_FLEET
    fleet = parse_fleet(given)
    if raw.get(matrix_file.TABLES):
        raise UsageError(f"--bouncer-fleet={given} with a matrix file's [[pooler]] tables: put the fleet in the "
                         "PgBouncer table (fleet = 2, or fleet = [\"1.24\", \"1.26\"]), or give --bouncer too")
    return fleet


def _checked_axes(axes: tuple[Axis, ...], fleet: FleetShape) -> tuple[Axis, ...]:
    check_peering(axes, fleet)
    return axes


def _poolers(raw: dict[str, str | None], fleet: FleetShape = NO_FLEET) -> tuple[tuple[PoolerKind, Spec], ...]:
    """--bouncer's versions as PgBouncer, then --pooler's; PgBouncer DEFAULT_BOUNCER when neither is given.
    A rolling-upgrade fleet's releases are the PgBouncer releases (--bouncer may name the same ones)."""
    bouncer = _given(raw, "leakcheck_bouncer", "PgBouncer versions such as 1.24,1.26")
    pooler = _given(raw, "leakcheck_pooler", "poolers such as odyssey:1.5,pgbouncer:1.26")
    if fleet.releases:
        named = ",".join(s.raw for s in fleet.releases)
        if bouncer is not None and {s.raw for s in parse_spec_list(bouncer, "--bouncer")} != set(named.split(",")):
            raise UsageError(f"--bouncer={bouncer} and --bouncer-fleet={named}: a rolling-upgrade fleet runs the "
                             f"releases it names; give --bouncer={named} or leave --bouncer out")
        bouncer = named
    if bouncer is None and pooler is None:
        bouncer = DEFAULT_BOUNCER
    found = [(PoolerKind.PGBOUNCER, spec) for spec in (parse_spec_list(bouncer, "--bouncer") if bouncer else ())]
    found += [pair for pair in (parse_poolers(pooler) if pooler else ()) if pair not in found]
    return tuple(found)


def _axes(raw: dict[str, str | None], poolers: tuple[tuple[PoolerKind, Spec], ...]) -> tuple[Axis, ...]:
    """--bouncer-set and --pooler-set, each checked; an axis of a pooler the matrix does not run is an error."""
    axes: list[Axis] = []
    for key, kind in (("leakcheck_bouncer_set", PoolerKind.PGBOUNCER), ("leakcheck_pooler_set", None)):
        given = raw.get(key)
        for line in given.split("\n") if given is not None else ():
            if not line.strip():
                raise UsageError.empty(FLAGS[key], "a setting and its values, e.g. max_prepared_statements=0,200")
            axis = parse_axis(line, FLAGS[key], kind)
            # each product's allow-list: what a team may set (a fleet's peering is leakcheck's own axis)
            kept = product(axis.kind)
            refusal = None if kept.record.fleets and axis.name == PEERING else kept.team.refusal(axis.name)
            if refusal is not None:
                raise UsageError(f"{FLAGS[key]}={line!r}: {refusal}")
            write = kept.written_as or str  # (None: any value of one line)
            for value in axis.values:
                try:
                    write(value)  # as its config file will hold it, or a UsageError
                except UsageError as exc:
                    raise UsageError(f"{FLAGS[key]}={line!r}: {exc}") from None
            for value in axis.values:  # a reset or check query: SQL that may only reset or check a session
                if (said := kept.team.value_refusal(axis.name, value)) is not None:
                    raise UsageError(f"{FLAGS[key]}={line!r}: {said}; give one of those")
            axes.append(axis)
    check_distinct(axes)
    modes = {m.value for m in PoolMode}
    for axis in axes:
        if axis.kind not in {kind for kind, _ in poolers}:
            raise UsageError(f"a {axis.kind.value} setting ({axis.name}) is an axis, but no {axis.kind.value} is in "
                             f"the matrix: add it with --pooler={axis.kind.value}:VERSION")
        if axis.name == "pool_mode" and axis.kind.record.transaction_pooling and not set(axis.values) <= modes:
            raise UsageError(f"--bouncer-set pool_mode={','.join(axis.values)}: pool_mode is one of "
                             f"{', '.join(sorted(modes))}")
    return tuple(axes)


def _driver_axes(given: str | None, drivers: Sequence[Driver],
                 pairs: Sequence[tuple[Application, Application]] = ()) -> tuple[DriverAxis, ...]:
    """--driver-set, each checked against its driver's known settings; a driver the run does not drive,
    or a setting given twice, is an error (a pair's settings are in its brackets: --driver-set crosses
    --drivers' cells only)."""
    axes: list[DriverAxis] = []
    for line in given.split("\n") if given is not None else ():
        if not line.strip():
            raise UsageError.empty("--driver-set", "a driver setting and its values, e.g. pgjdbc:prepareThreshold=0,5")
        axis = parse_driver_axis(line)
        if axis.driver not in known_drivers() and registered(axis.driver) is None:
            raise UsageError.bad_value("--driver-set", line, f"a driver among {', '.join(known_drivers())}, or a "
                                       "team agent's id as its cells show it (cmd-NAME, the name its hello gives)")
        if axis.driver not in drivers:
            paired = any(axis.driver in (a.driver, b.driver) for a, b in pairs)
            raise UsageError(f"--driver-set={line}: {axis.driver} is not among --drivers "
                             f"({','.join(drivers) or 'none'}): add it there" + (
                                 f" (a pair's settings go in its brackets: --pairs={axis.driver}[{axis.name}="
                                 f"{axis.values[0]}]+...)" if paired else ""))
        check_axis(axis)
        if any((a.driver, a.name) == (axis.driver, axis.name) for a in axes):
            raise UsageError(f"the {axis.driver} setting {axis.name} is given as an axis twice; give its values "
                             f"once: --driver-set {axis.driver}:{axis.name}=V1,V2")
        axes.append(axis)
    return tuple(axes)


def _tables(given: str | None) -> tuple[PoolerTable, ...]:
    """The matrix file's [[pooler]] tables (matrix_file.TABLES), each checked as its own options."""
    tables = []
    for table in json.loads(given) if given else ():
        poolers = parse_poolers(table["pooler"])
        raw: dict[str, str | None] = {"leakcheck_pooler_set": table["set"] or None}
        fleet = parse_fleet(table["fleet"], "[[pooler]] fleet") if table.get("fleet") else NO_FLEET
        tables.append(PoolerTable(poolers, _checked_axes(_axes(raw, poolers), fleet), table["ini"] or None, fleet))
    return tuple(tables)


def _diff(raw: dict[str, str | None]) -> tuple[DiffSide, DiffSide] | None:
    given = _given(raw, "leakcheck_diff", "FROM..TO such as pg16/pgbouncer1.24..pg18/pgbouncer1.26")
    if given is None:
        return None
    before, dots, after = given.partition("..")
    if not dots:
        raise UsageError.bad_value("--diff", given, "FROM..TO such as pg16/pgbouncer1.24..pg18/pgbouncer1.26")
    return parse_side(before, "--diff"), parse_side(after, "--diff")


def _diff_matrix(raw: dict[str, str | None], diff: tuple[DiffSide, DiffSide]) -> dict[str, str]:
    """--diff alone: the matrix of its two cells (their PostgreSQL and poolers)."""
    if any(raw.get(k) is not None for k in ("leakcheck_pg", "leakcheck_bouncer", "leakcheck_pooler")):
        return {}
    if any(cell.settings or cell.config or cell.driver_settings for cell in diff):
        raise UsageError("--diff with settings or an ini: give the matrix too (--pg, --bouncer, --bouncer-set, "
                         "--bouncer-ini, --driver-set) so that it measures both cells")
    pgs = ",".join(dict.fromkeys(str(c.pg) for c in diff))
    poolers = ",".join(dict.fromkeys(f"{c.kind.value}:{c.version}" for c in diff))
    return {"leakcheck_pg": pgs, "leakcheck_pooler": poolers}


def _diff_in_matrix(diff: tuple[DiffSide, DiffSide], pgs: Sequence[Spec],
                    poolers: tuple[tuple[PoolerKind, Spec], ...]) -> None:
    """Both --diff sides among the versions the matrix runs (before any server starts)."""
    def overlap(version: Version, spec: Spec) -> bool:
        return spec.version is None or version.matches(spec.version) or spec.version.matches(version)

    for cell in diff:
        if not (any(overlap(cell.pg, p) for p in pgs)
                and any(kind is cell.kind and overlap(cell.version, spec) for kind, spec in poolers)):
            raise UsageError(f"--diff: {cell.raw} is not in the matrix this run measures: add its versions "
                             "(--pg, --bouncer or --pooler), or give --diff alone to run just its two cells")


def _required_among(raw: dict[str, str | None], probes: Sequence[Probe]) -> frozenset[str] | None:
    """--require, where a probe named there must be among those the run measures (else the gate could
    pass on a probe it never ran); `security` and `all` mean those of the selection."""
    text = _given(raw, "leakcheck_require", "probe ids separated by commas, or security")
    required = required_probes(text)
    if text is None or required is None:
        return None
    chosen = {p.id for p in probes}
    named = [n for n in _items(text, "--require", "probe ids") if n not in ("security", "all") and n not in chosen]
    if named:
        raise UsageError(f"--require={text} names {', '.join(named)}, which --probes does not run: add "
                         f"{'it' if len(named) == 1 else 'them'} to --probes (or drop --probes to run all)")
    return required


def required_probes(raw: str | None) -> frozenset[str] | None:
    """--require's probe ids; `security` stands for every security probe, `all` for every probe."""
    if raw is None:
        return None
    names = _items(raw, "--require", "probe ids separated by commas, or security")
    out: set[str] = set()
    for name in names:
        if name == "security":
            out |= {p.id for p in select(None) if p.security}
        elif name == "all":
            out |= {p.id for p in select(None)}
        else:
            _known_probes([name], "--require", ("security", "all"), "security requires every security probe")
            out |= {p.id for p in select(name, "--require")}
    return frozenset(out)


def _jobs(raw: str) -> int:
    text = raw.strip().lower()
    if text == "auto":
        return 0
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 64:
        raise UsageError.bad_value("--jobs", raw, "a number from 1 to 64, or auto")
    return int(text)


def _items(raw: str, option: str, expected: str) -> list[str]:
    """The comma separated items of `raw`; an empty item (`a,,b`, `a,`, `,`) is an error."""
    names = [n.strip() for n in raw.split(",")]
    if not all(names):
        raise UsageError.bad_value(option, raw, f"{expected} (no empty items)")
    return names


def _known_probes(names: Sequence[str], option: str, words: Sequence[str] = (),
                  or_else: str = "all runs them all") -> None:
    """An unknown probe id (or word) is one short line with the closest known ones (a typo), not all of them."""
    known = [*(p.id for p in PROBES), *words]
    unknown = [name for name in names if name not in known]
    if not unknown:
        return
    said = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        said.append(f"{name} (did you mean {' or '.join(close)}?)" if close else name)
    raise UsageError(f"{option}: unknown probe id(s) {', '.join(said)}; the {len(PROBES)} probes are listed in "
                     f"docs/probes.md, or {option}={or_else}")


def _probes(raw: str, fleet: bool = False) -> tuple[Probe, ...]:
    if raw.strip() == "all":
        return select(None, fleet=fleet)
    names = _items(raw, "--probes", "probe ids separated by commas, or all")
    _known_probes(names, "--probes")
    return select(",".join(names))


def _pairs(raw: dict[str, str | None]) -> tuple[tuple[Application, Application], ...]:
    """--pairs, each side's driver and settings checked as --drivers and --driver-set check theirs; a pair
    with one application on both sides is the single-driver cell, given with --drivers."""
    given = _given(raw, "leakcheck_pairs", PAIRS_SHAPE)
    return () if given is None else checked_pairs(given)


def checked_pairs(given: str, option: str = "--pairs") -> tuple[tuple[Application, Application], ...]:
    """`given`'s pairs (`A+B,...`), each side's driver and settings checked (discover's --pair too)."""
    out: list[tuple[Application, Application]] = []
    for a, b in parse_pairs(given, option):
        pair = (_application(a, given, option), _application(b, given, option))
        if pair[0] == pair[1]:
            raise UsageError(f"{option}={given}: {pair[0].label}+{pair[1].label} runs one application on both "
                             f"sides, which is the single-driver cell: give it with --drivers={a.driver}"
                             + (" (and --driver-set for its settings)" if pair[0].settings else ""))
        if pair not in out:
            out.append(pair)
    return tuple(out)


def _application(side: PairSide, given: str, option: str) -> Application:
    """A pair's side: its driver as --drivers takes it, its settings as --driver-set checks them (those that
    differ from the driver's defaults kept, as a cell's)."""
    if is_team(side.driver):
        driver = team_driver(side.driver, option)
    elif side.driver in known_drivers():
        driver = Driver(side.driver)
    else:
        raise UsageError.bad_value(option, given, f"{PAIRS_SHAPE}; {side.driver!r} is no driver: each side is one "
                                   f"of {', '.join(known_drivers())} or cmd:PATH (a team's agent)")
    for name, value in side.settings:
        check_axis(DriverAxis(driver.value, name, (value,)), option)
    return Application(driver, None, cell_settings(driver.value, side.settings))


def _drivers(raw: str) -> tuple[Driver, ...]:
    known = known_drivers()
    expected = f"a comma separated list of {', '.join(known)} or cmd:PATH (a team's agent)"
    names = _items(raw, "--drivers", expected)
    bad = [n for n in names if n not in known and not is_team(n)]
    if bad:
        raise UsageError.bad_value("--drivers", raw, expected)
    return tuple(dict.fromkeys(team_driver(n) if is_team(n) else Driver(n) for n in names))
