"""Every option exists as a CLI flag and an ini key with one help text; merged into one frozen Config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from .errors import UsageError
from .probes import Probe, select
from .provision.containers_images import check_template
from .verdicts import Driver
from .versions import Spec, parse_spec_list

DEFAULT_PG = "16,17,18"
DEFAULT_BOUNCER = "1.26"

# (flag, ini key, help, default)
OPTIONS: tuple[tuple[str, str, str, str | None], ...] = (
    ("--pg", "leakcheck_pg", f"PostgreSQL versions or bin dirs, comma separated (default {DEFAULT_PG} "
     "when --bouncer is given); giving --pg or --bouncer turns the leak matrix on", None),
    ("--bouncer", "leakcheck_bouncer", f"PgBouncer versions or binaries, comma separated (default "
     f"{DEFAULT_BOUNCER} when --pg is given)", None),
    ("--drivers", "leakcheck_drivers", "drivers to run: psycopg,asyncpg (default both)", "psycopg,asyncpg"),
    ("--probes", "leakcheck_probes", "probe ids to run, comma separated (default all)", "all"),
    ("--controls", "leakcheck_controls", "also run every probe on the direct and session-mode controls: "
     "yes or no (default yes)", "yes"),
    ("--backend", "leakcheck_backend", "where servers come from: native, containers, or auto (containers when "
     "a Docker engine answers, else native); default native", "native"),
    ("--expect", "leakcheck_expect", "a matrices/*.json of expected verdicts: a probe passes when its "
     "verdict matches, fails when it differs (the pre-upgrade gate)", None),
    ("--record", "leakcheck_record", "write the measured verdicts to this matrices/*.json file", None),
    ("--results", "leakcheck_results", "write every outcome of the run (leak tests and controls, with their "
     "evidence) to this JSON file, for `leakcheck merge` (schema leakcheck-results, version 1)", None),
    ("--jobs", "leakcheck_jobs", "how many independent cells (lanes) run at the same time: a number from 1 "
     "to 64, or auto (four per core, at most 8); default auto", "auto"),
    ("--pg-image", "leakcheck_pg_image", "containers backend: PostgreSQL image template "
     "(default postgres:{version})", "postgres:{version}"),
    ("--bouncer-image", "leakcheck_bouncer_image", "containers backend: a PgBouncer image template to use "
     "instead of building docker/pgbouncer (e.g. registry/pgbouncer:{version})", None),
)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("leakcheck", "leakcheck: session state leaks through PgBouncer")
    for flag, ini, help_text, _ in OPTIONS:
        group.addoption(flag, dest=ini, default=None, help=help_text)
        parser.addini(ini, help=help_text, default=None)


FLAGS = {ini: flag for flag, ini, _, _ in OPTIONS}
DEFAULTS = {ini: default for _, ini, _, default in OPTIONS}


def _raw(config: pytest.Config, ini: str) -> str | None:
    """The flag's value, else the ini key's; None only when neither is given ('' is given and empty)."""
    value = config.getoption(ini)
    if value is None:
        value = config.getini(ini)
    return None if value is None else str(value)


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
class Config:
    """The whole run's settings, validated."""

    pg: tuple[Spec, ...]
    bouncer: tuple[Spec, ...]
    drivers: tuple[Driver, ...]
    probes: tuple[Probe, ...]
    controls: bool
    backend: str
    expect: Path | None
    record: Path | None
    pg_image: str
    bouncer_image: str | None
    results: Path | None = None  #: --results: every outcome as JSON (results.py)
    jobs: int = 0  #: --jobs: lanes at a time (0: auto, lanes.default_jobs)

    @classmethod
    def for_prepare(cls, pg: str, bouncer: str, backend: str) -> Config:
        """What `leakcheck prepare` needs: the versions and the backend, validated like the options."""
        raw: dict[str, str | None] = {"leakcheck_pg": pg, "leakcheck_bouncer": bouncer, "leakcheck_backend": backend}
        pg = _given(raw, "leakcheck_pg", "PostgreSQL versions such as 16,18") or DEFAULT_PG
        bouncer = _given(raw, "leakcheck_bouncer", "PgBouncer versions such as 1.24,1.26") or DEFAULT_BOUNCER
        backend = _given(raw, "leakcheck_backend", "native, containers or auto") or "native"
        if backend.strip().lower() not in ("native", "containers", "auto"):
            raise UsageError.bad_value("--backend", backend, "native, containers or auto")
        return cls(pg=parse_spec_list(pg, "--pg"), bouncer=parse_spec_list(bouncer, "--bouncer"),
                   drivers=tuple(Driver), probes=select(None), controls=False, backend=backend.strip().lower(),
                   expect=None, record=None, pg_image=DEFAULTS["leakcheck_pg_image"] or "", bouncer_image=None)

    @classmethod
    def from_pytest(cls, config: pytest.Config) -> Config | None:
        """None when neither --pg nor --bouncer (nor their ini keys) asks for the matrix.

        Every value given is validated either way; a leakcheck flag given on the command line
        without the matrix is an error (it would do nothing, silently).
        """
        raw = {ini: _raw(config, ini) for _, ini, _, _ in OPTIONS}
        settings = cls.from_strings(raw)
        if raw["leakcheck_pg"] is None and raw["leakcheck_bouncer"] is None:
            idle = [flag for flag, ini, _, _ in OPTIONS if config.getoption(ini) is not None]
            if idle:
                raise UsageError(
                    f"{', '.join(idle)} given, but the leak matrix is off: add --pg (e.g. --pg=16) or --bouncer "
                    f"to run it, or drop {', '.join(idle)}"
                )
            return None
        return settings

    @classmethod
    def from_strings(cls, raw: dict[str, str | None]) -> Config:
        """Validate option values; a key missing or None takes its default, a blank value is an error."""

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
        bouncer = _given(raw, "leakcheck_bouncer", "PgBouncer versions such as 1.24,1.26") or DEFAULT_BOUNCER
        expect = _given(raw, "leakcheck_expect", "the path of a matrices/*.json file")
        record = _given(raw, "leakcheck_record", "the path of a matrices/*.json file to write")
        results = _given(raw, "leakcheck_results", "the path of a JSON file to write, such as results.json")
        bouncer_image = _given(raw, "leakcheck_bouncer_image", "an image template such as registry/pgbouncer:{version}")
        return cls(
            pg=parse_spec_list(pg, "--pg"),
            bouncer=parse_spec_list(bouncer, "--bouncer"),
            drivers=_drivers(get("leakcheck_drivers", "psycopg, asyncpg or both")),
            probes=_probes(get("leakcheck_probes", "probe ids separated by commas, or all")),
            controls=controls == "yes",
            backend=backend,
            expect=Path(expect) if expect is not None else None,
            record=Path(record) if record is not None else None,
            pg_image=check_template(get("leakcheck_pg_image", "an image template such as postgres:{version}"),
                                    "--pg-image"),
            bouncer_image=check_template(bouncer_image, "--bouncer-image") if bouncer_image is not None else None,
            results=Path(results) if results is not None else None,
            jobs=_jobs(get("leakcheck_jobs", "a number of lanes such as 4, or auto")),
        )


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


def _probes(raw: str) -> tuple[Probe, ...]:
    if raw.strip() == "all":
        return select(None)
    return select(",".join(_items(raw, "--probes", "probe ids separated by commas, or all")))


def _drivers(raw: str) -> tuple[Driver, ...]:
    known = [d.value for d in Driver]
    names = _items(raw, "--drivers", f"a comma separated list of {', '.join(known)}")
    bad = [n for n in names if n not in known]
    if bad:
        raise UsageError.bad_value("--drivers", raw, f"a comma separated list of {', '.join(known)}")
    return tuple(Driver(n) for n in dict.fromkeys(names))
