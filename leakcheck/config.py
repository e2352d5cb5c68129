"""Every option exists as a CLI flag and an ini key with one help text; merged into one frozen Config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from .clients import Driver
from .errors import UsageError
from .probes import Probe, select
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


def _raw(config: pytest.Config, ini: str, default: str | None) -> str | None:
    value = config.getoption(ini)
    if value is None:
        value = config.getini(ini) or None
    return str(value) if value is not None else default


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

    @classmethod
    def from_pytest(cls, config: pytest.Config) -> Config | None:
        """None when neither --pg nor --bouncer (nor their ini keys) asks for the matrix."""
        raw = {ini: _raw(config, ini, default) for _, ini, _, default in OPTIONS}
        if raw["leakcheck_pg"] is None and raw["leakcheck_bouncer"] is None:
            return None
        return cls.from_strings(raw)

    @classmethod
    def from_strings(cls, raw: dict[str, str | None]) -> Config:
        def get(key: str) -> str:
            value = raw.get(key)
            assert value is not None, key
            return value

        controls = get("leakcheck_controls").strip().lower()
        if controls not in ("yes", "no"):
            raise UsageError.bad_value("--controls", controls, "yes or no")
        backend = get("leakcheck_backend").strip().lower()
        if backend not in ("native", "containers", "auto"):
            raise UsageError.bad_value("--backend", backend, "native, containers or auto")
        expect, record = raw.get("leakcheck_expect"), raw.get("leakcheck_record")
        return cls(
            pg=parse_spec_list(raw.get("leakcheck_pg") or DEFAULT_PG, "--pg"),
            bouncer=parse_spec_list(raw.get("leakcheck_bouncer") or DEFAULT_BOUNCER, "--bouncer"),
            drivers=_drivers(get("leakcheck_drivers")),
            probes=select(get("leakcheck_probes")),
            controls=controls == "yes",
            backend=backend,
            expect=Path(expect) if expect else None,
            record=Path(record) if record else None,
            pg_image=get("leakcheck_pg_image"),
            bouncer_image=raw.get("leakcheck_bouncer_image"),
        )


def _drivers(raw: str) -> tuple[Driver, ...]:
    names = [n.strip() for n in raw.split(",") if n.strip()]
    known = [d.value for d in Driver]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise UsageError.bad_value("--drivers", raw, f"a comma separated list of {', '.join(known)}")
    return tuple(Driver(n) for n in dict.fromkeys(names))
