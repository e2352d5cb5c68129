"""What a discovery run is asked to do, and the `--budget` syntax (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from leakcheck.model.errors import UsageError
from leakcheck.model.target import PAIR_JOIN, Application, Driver, Route, Setting, settings_label

DEFAULT_BUDGET = "60s"
DEFAULT_MAX_EXAMPLES = 5000
DEFAULT_MAX_OPS = 8
ROUTES = (Route.TRANSACTION, Route.SESSION, Route.DIRECT)

_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_budget(text: str, option: str = "--budget") -> float:
    """Seconds from `60s`, `90`, `1.5m`, `1m30s`, `500ms`, `2h`; more than zero."""
    raw = text.strip()
    expected = "a duration such as 60s, 90, 1m30s or 500ms (more than zero)"
    if re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", raw):
        seconds = float(raw)
    else:
        parts = _PART.findall(raw)
        if not parts or "".join(n + u for n, u in parts) != raw:
            raise UsageError.bad_value(option, text, expected)
        seconds = sum(float(n) * _UNIT[u] for n, u in parts)
    if seconds <= 0:
        raise UsageError.bad_value(option, text, expected)
    return seconds


def parse_count(text: str, option: str, minimum: int = 1) -> int:
    if not re.fullmatch(r"[0-9]+", text.strip()) or int(text) < minimum:
        raise UsageError.bad_value(option, text, f"a whole number of at least {minimum}")
    return int(text)


def parse_choice(text: str, option: str, choices: tuple[str, ...]) -> str:
    if text not in choices:
        raise UsageError.bad_value(option, text, " or ".join(choices))
    return text


def parse_database(text: str) -> Path | None:
    """`none` turns the example database off; empty is an error; else a folder."""
    if not text.strip():
        raise UsageError.empty("--database", "a folder, or none")
    return None if text.strip() == "none" else Path(text).expanduser()


@dataclass(frozen=True)
class Options:
    """One discovery run: one PostgreSQL, one pooler (none on the direct route), one driver (or a mixed
    pair: A's driver and settings here, B's in `b`). The cell
    is given as the matrix's options (ini-key names to values: leakcheck_pg, leakcheck_bouncer,
    leakcheck_pooler, leakcheck_bouncer_set, leakcheck_backend, leakcheck_pooled_dsn, ...)."""

    cell: tuple[tuple[str, str], ...]
    route: Route = Route.TRANSACTION
    driver: Driver = Driver.PSYCOPG
    budget: float = 60.0  # seconds of search (servers starting and confirmations come on top)
    seed: int | None = None  # None: a random one, printed so the run can be repeated
    max_examples: int = DEFAULT_MAX_EXAMPLES  # generated sequences per round (hypothesis max_examples)
    max_ops: int = DEFAULT_MAX_OPS  # drawn ops per sequence
    out: Path | None = None  # a folder for one .sql file per finding
    results: Path | None = None  # --results: the findings as a JSON file (results_file.py)
    database: Path | None = None  # hypothesis' example database (None: off)
    fail_on: str = "new"  # which findings exit 1: new (no probe lists them) or any (accept.py)
    accepted: tuple[tuple[str, str], ...] = ()  # --accept: (signature, reason) a team accepted
    #: --driver-set DRIVER:NAME=V, one value each: those that differ from the driver's defaults
    driver_settings: tuple[Setting, ...] = ()
    #: --pair: B's own application (None: B runs A's driver and settings)
    b: Application | None = None

    @property
    def client(self) -> str:
        """The driver and its settings as the matrix's ids show them: `pgjdbc[prepareThreshold=0]`; a pair's
        both, `prisma[pgbouncer=true]+node-postgres`."""
        return f"{self.driver}{settings_label(self.driver_settings)}" + (
            f"{PAIR_JOIN}{self.b.label}" if self.b is not None else "")
