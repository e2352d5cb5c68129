"""Where a probe runs, typed from end to end: a PostgreSQL, a pooler with its settings, a route,
a driver at its version (and, in a mixed pair, B's own driver). Test ids, gate keys and reports read
these fields; nothing parses them back out of strings (except `results`, which reads its own files)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import ClassVar

from leakcheck.model.products import ODYSSEY, PGBOUNCER, PGPOOL, PRODUCTS, RUNNING, Product
from leakcheck.model.versions import Version

#: One setting the user made a matrix axis of (`--bouncer-set NAME=V1,V2`): its name and one value.
Setting = tuple[str, str]


def settings_label(settings: tuple[Setting, ...]) -> str:
    """`[prepare_threshold=None,prepared_max=10]`, or "" for none (as ids show a cell's settings)."""
    return f"[{','.join(f'{k}={v}' for k, v in settings)}]" if settings else ""


#: A driver's id as ids and keys read it back: lower-case letters and `-`, ending at most in `-v<major>`
#: (`pgx-v5`: a driver's newer major beside the older one's plain id, `pgx`).
DRIVER_ID = r"[a-z][a-z-]*?(?:-v[0-9]+)?"


def driver_label(driver: str, version: Version | None) -> str:
    """The driver with its release as ids and keys write it: `psycopg3.3.9`; an id ending in a digit
    is kept apart from its release by `-` (`pgx-v5-5.13.0`: `pgx-v55.13.0` would read as pgx-v 55.13)."""
    if version is None or not version.parts:
        return driver
    return f"{driver}-{version}" if driver[-1:].isdigit() else f"{driver}{version}"


class Route(StrEnum):
    """How the two clients reach PostgreSQL."""

    TRANSACTION = "transaction"  #: the subject: through the pooler as configured (pool_mode=transaction unless set)
    SESSION = "session"  #: negative control: through the pooler in session mode, each client its own server
    DIRECT = "direct"  #: negative control: two direct PostgreSQL sessions
    SHARED = "shared"  #: positive control: A and B drive one direct session

    @property
    def is_control(self) -> bool:
        return self is not Route.TRANSACTION


class Driver(str):
    """A client library leakcheck drives, by its id as ids, keys and reports show it. psycopg and
    asyncpg run in this process (clients.py); every other id is an agent process of its own
    language (leakcheck/drivers/agents/catalogue.py), so the set is open: `Driver("node-postgres")`."""

    PSYCOPG: ClassVar[Driver]  #: psycopg 3, AsyncConnection, autocommit
    ASYNCPG: ClassVar[Driver]  #: asyncpg, autocommit outside explicit transactions

    @property
    def value(self) -> str:
        """The id (as an enum member's value, which Driver was)."""
        return str(self)

    @property
    def native(self) -> bool:
        """Driven in this Python process, not through an agent."""
        return self in NATIVE_DRIVERS


Driver.PSYCOPG = Driver("psycopg")
Driver.ASYNCPG = Driver("asyncpg")
#: The drivers of this Python process, in their order of old (the default --drivers).
NATIVE_DRIVERS: tuple[Driver, ...] = (Driver.PSYCOPG, Driver.ASYNCPG)


class PoolerKind(str):
    """A pooler product's key, as ids, keys and results files write it: one of model/products.py's
    records (`PoolerKind("pgbouncer").product` is "PgBouncer"). The set is the registry's, so a new
    product needs no edit here; an unknown key is a ValueError, as an enum's was. Equal keys are one
    object, so `kind is PoolerKind.PGBOUNCER` holds."""

    PGBOUNCER: ClassVar[PoolerKind]  #: PgBouncer, started by leakcheck
    ODYSSEY: ClassVar[PoolerKind]  #: Odyssey, started by leakcheck
    PGPOOL: ClassVar[PoolerKind]  #: pgpool-II, started by leakcheck
    #: a running pooler, reached by --pooled-dsn (nothing is started); "dsn" as ids, keys and results files say
    RUNNING: ClassVar[PoolerKind]

    _known: ClassVar[dict[str, PoolerKind]] = {}

    def __new__(cls, key: str) -> PoolerKind:
        if key not in PRODUCTS:
            raise ValueError(f"{key!r} is not a pooler kind (known: {', '.join(PRODUCTS)})")
        return cls._known.setdefault(key, super().__new__(cls, key))

    @property
    def value(self) -> str:
        """The key (as an enum member's value, which PoolerKind was)."""
        return str(self)

    @property
    def record(self) -> Product:
        """The product's policies (model/products.py)."""
        return PRODUCTS[str(self)]

    @property
    def product(self) -> str:
        """Its title: `PgBouncer`."""
        return self.record.title

    @property
    def started(self) -> bool:
        """leakcheck starts it (not a running pooler at --pooled-dsn)."""
        return self.record.started


PoolerKind.PGBOUNCER = PoolerKind(PGBOUNCER.key)
PoolerKind.ODYSSEY = PoolerKind(ODYSSEY.key)
PoolerKind.PGPOOL = PoolerKind(PGPOOL.key)
PoolerKind.RUNNING = PoolerKind(RUNNING.key)


@dataclass(frozen=True)
class Pooler:
    """One pooler of the matrix: its kind, exact version, the values of the settings axes for this
    cell (in the order the axes were given), and the team's own config file when one is used."""

    kind: PoolerKind
    version: Version | None = None  #: None only for a running pooler (--pooled-dsn)
    settings: tuple[Setting, ...] = ()
    #: the team's config file (--bouncer-ini) as given; "" for the harness's own; for a running pooler its --dsn-name
    config: str = ""
    #: a fleet (--bouncer-fleet): the release of each process on one port, the first one `version`;
    #: () for one process
    fleet: tuple[Version, ...] = ()

    def label(self, version_parts: int | None = None) -> str:
        """`pgbouncer1.24.1[max_prepared_statements=0]`; `version_parts=2` gives the gate key's form
        (`pgbouncer1.24[...]`: patch releases share expectations). A fleet: `pgbouncer1.26.1x2[peering=yes]`
        (two processes of one release), `pgbouncer1.24.1+1.26.1[...]` (a rolling upgrade, in process order)."""
        if not self.kind.started:
            return f"dsn-{self.config or 'pooler'}"
        version = "" if self.version is None else str(self.version.prefix(version_parts or 9))
        releases = [str(v.prefix(version_parts or 9)) for v in self.fleet]
        if len(set(releases)) == 1:
            version += f"x{len(releases)}"
        elif releases:
            version = "+".join(releases)
        extras = ([f"ini={config_stem(self.config)}"] if self.config else []) + [f"{k}={v}" for k, v in self.settings]
        return f"{self.kind.value}{version}" + (f"[{','.join(extras)}]" if extras else "")

    def setting(self, name: str) -> str | None:
        """The value this cell gives a setting axis, or None."""
        return dict(self.settings).get(name)

    @property
    def in_session_mode(self) -> Pooler:
        """The pooler of this cell's session control: a pool_mode axis makes no other one."""
        return replace(self, settings=tuple(kv for kv in self.settings if kv[0] != "pool_mode"))

    def __str__(self) -> str:
        return self.label()


def config_stem(path: str) -> str:
    """A config file's name without folders and its last suffix: `/etc/pgbouncer/prod.ini` -> `prod`."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[0] if "." in name[1:] else name


@dataclass(frozen=True)
class Application:
    """One client's application: its driver, the driver's release (None when unknown) and its settings
    that differ from the driver's defaults. A mixed pair (`--pairs=A+B`) gives B one of its own."""

    driver: Driver
    version: Version | None = None
    settings: tuple[Setting, ...] = ()

    @property
    def label(self) -> str:
        """As ids show it: `pgjdbc42.5.5[prepareThreshold=0]`."""
        return f"{driver_label(self.driver.value, self.version)}{settings_label(self.settings)}"


#: How ids, keys and columns join a mixed pair's two applications: A's first (`pgjdbc42.5.5+psycopg3.3.9`).
#: No driver id, release or setting value holds it outside a setting's brackets.
PAIR_JOIN = "+"


@dataclass(frozen=True)
class Target:
    """Where a probe runs: a PostgreSQL, a pooler (none on the direct and shared routes), a route,
    a driver, the driver's version (None when unknown, e.g. read from an older results file) and the
    driver's settings axes (`--driver-set`; only the values that differ from the driver's defaults).
    These are A's (and every client's but B's); `b` is B's own application in a mixed pair (`--pairs`),
    None when B runs A's driver as it always did."""

    pg: Version
    pooler: Pooler | None
    route: Route
    driver: Driver
    driver_version: Version | None = field(default=None)
    driver_settings: tuple[Setting, ...] = ()
    b: Application | None = None

    @property
    def a_app(self) -> Application:
        """A's application (every client's but B's in a pair)."""
        return Application(self.driver, self.driver_version, self.driver_settings)

    @property
    def b_app(self) -> Application:
        """B's application: its own in a pair, else A's."""
        return self.b if self.b is not None else self.a_app

    @property
    def drivers(self) -> str:
        """The driver ids without releases or settings: `psycopg`, a pair's `pgjdbc+psycopg`."""
        return self.driver.value + (f"{PAIR_JOIN}{self.b.driver.value}" if self.b is not None else "")

    @property
    def client(self) -> str:
        """The driver, its version and its settings as ids show them: `pgjdbc42.5.5[prepareThreshold=0]`;
        a pair's both, A's first: `pgjdbc42.5.5+psycopg3.3.9`."""
        return self.a_app.label + (f"{PAIR_JOIN}{self.b.label}" if self.b is not None else "")

    def test_id(self, probe_id: str) -> str:
        parts = [f"pg{self.pg}"]
        if self.pooler is not None:
            parts.append(self.pooler.label())
        if self.route is not Route.TRANSACTION:
            parts.append(self.route.value)
        return "-".join([*parts, self.client, probe_id])

    def test_name(self, probe_id: str) -> str:
        """The generated test's name: `test_leak[pg16.14-pgbouncer1.24.1-psycopg3.3.9-timezone]`."""
        kind = "test_leak" if self.route is Route.TRANSACTION else "test_control"
        return f"{kind}[{self.test_id(probe_id)}]"

    @property
    def column(self) -> str:
        """The report's column for this target: `pg16.14/pgbouncer1.24.1/psycopg3.3.9` (plus the route of a control)."""
        where = f"pg{self.pg}" + (f"/{self.pooler.label()}" if self.pooler else "")
        if self.route is not Route.TRANSACTION:
            where += f"/{self.route.value}"
        return f"{where}/{self.client}"
