"""The operations discovery generates: calls an application makes through its driver, by client A or B (pure).

An `Op` is data: who runs it, its kind, an argument (a setting, a slot such as `s1`, a role) and a
variant. Each op is one call of the application's driver, in autocommit or inside the transaction
the client began through the driver's transaction API (BEGIN, COMMIT, ROLLBACK): a statement of
SQL, the driver's prepared path (PROTOCOL), a row written (WRITE, plainly or the prepared way),
freeing the statement the client's last prepared call made (FREE: the driver's own call), executing
a statement by name without preparing it (BIND: the driver's call for an SQL PREPAREd name).
`UNIVERSE` is every op discovery may generate; `repair` turns any list of them into a sequence that
can run through a pool of one (while a client holds a transaction, the other waits, so the other's
next op first commits it). A driver lacking a call (`Abilities`, asked of agents) never draws its
ops: `universe`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Who(StrEnum):
    """The two application clients."""

    A = "A"
    B = "B"


class Kind(StrEnum):
    """What an op does (its SQL is in render.py)."""

    OBSERVE = "observe"  #: the client reads every observation at once (a snapshot)
    SET = "set"  #: SET name = value
    SET_LOCAL = "set_local"  #: SET LOCAL name = value (inside the client's transaction only)
    RESET = "reset"  #: RESET name
    SET_CONFIG = "set_config"  #: SELECT set_config(name, value, is_local); variant: scope and binding
    RESET_ALL = "reset_all"
    SET_ROLE = "set_role"
    RESET_ROLE = "reset_role"
    CREATE_TEMP = "create_temp"  #: CREATE TEMP TABLE slot [ON COMMIT ...] AS SELECT <whose>
    READ_TEMP = "read_temp"
    DROP_TEMP = "drop_temp"
    NEXTVAL = "nextval"  #: nextval of the client's own temp sequence (created if missing)
    LASTVAL = "lastval"
    PREPARE = "prepare"  #: SQL PREPARE slot AS SELECT <whose>
    EXECUTE = "execute"
    DEALLOCATE = "deallocate"
    DEALLOCATE_ALL = "deallocate_all"
    PROTOCOL = "protocol"  #: the driver's protocol-level prepared statement (Client.prepared)
    FREE = "free"  #: the driver frees the statement the client's last prepared call made (Client.free)
    BIND = "bind"  #: the driver executes an SQL-PREPAREd slot by name, with no Parse (Client.bind)
    WRITE = "write"  #: one row of the client's own into lc_writes; variant `prepared`: the driver's prepared path
    DECLARE = "declare"  #: DECLARE slot CURSOR [WITH HOLD]; without HOLD inside a transaction only
    FETCH = "fetch"
    CLOSE = "close"
    LOCK = "lock"  #: pg_try_advisory_lock (never waits)
    XACT_LOCK = "xact_lock"  #: pg_try_advisory_xact_lock
    UNLOCK = "unlock"
    UNLOCK_ALL = "unlock_all"
    LISTEN = "listen"
    UNLISTEN = "unlisten"  #: a channel, or * (all)
    NOTIFY = "notify"
    BEGIN = "begin"  #: the driver's transaction API (psycopg transaction(), asyncpg Transaction, an agent's begin)
    COMMIT = "commit"  #: the driver's commit: its writes since BEGIN are then reported committed
    ROLLBACK = "rollback"
    DISCARD = "discard"  #: DISCARD ALL / TEMP / SEQUENCES / PLANS


@dataclass(frozen=True)
class Setting:
    """A setting discovery changes, with a value of A's and one of B's (so a reader sees whose it is).
    `sql` values are written after `SET name =` as given; `alt` is one more value either client may set."""

    name: str
    a: str
    b: str
    alt: str | None = None
    list_valued: bool = False  # search_path: SET takes a list, not one quoted literal

    def value(self, who: Who, alt: bool = False) -> str:
        if alt:
            assert self.alt is not None, f"{self.name} has no alternative value"
            return self.alt
        return self.a if who is Who.A else self.b

    def sql(self, who: Who, alt: bool = False) -> str:
        """The value as written after `SET name =`."""
        text = self.value(who, alt)
        return text if self.list_valued else quote(text)


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


#: Settings first that no PgBouncer tracks, then tracked ones, then ones few think of. Values are far
#: from anything a step could hit (timeouts of minutes), so they change what is read, never timing.
SETTINGS: tuple[Setting, ...] = (
    Setting("statement_timeout", "111s", "222s"),
    Setting("work_mem", "1111kB", "2222kB"),
    Setting("search_path", "lc_a, public", "lc_b, public", list_valued=True),
    Setting("app.tenant", "tenant_a", "tenant_b"),
    Setting("lock_timeout", "333s", "444s"),
    Setting("TimeZone", "Pacific/Chatham", "America/Caracas"),
    Setting("DateStyle", "SQL, DMY", "German, DMY"),
    Setting("IntervalStyle", "iso_8601", "sql_standard"),
    Setting("application_name", "lc_app_a", "lc_app_b", alt=""),
    Setting("default_transaction_read_only", "on", "off"),
    Setting("default_transaction_isolation", "serializable", "repeatable read"),
    Setting("idle_in_transaction_session_timeout", "555s", "666s"),
    Setting("session_replication_role", "replica", "local"),
    Setting("temp_buffers", "1000kB", "2000kB"),
    Setting("bytea_output", "escape", "hex"),
    Setting("extra_float_digits", "-2", "2"),
    Setting("row_security", "off", "on"),
    Setting("synchronous_commit", "off", "local"),
)
SETTING = {s.name: s for s in SETTINGS}

#: Roles the fixtures grant to the application role (SET ROLE only, no inherited privileges).
ROLES = ("leakcheck_other", "leakcheck_priv")

#: set_config variants: scope (session or local), and whether the value is a bound parameter.
CONFIG_VARIANTS = ("session", "local", "session bound", "local bound")
TEMP_VARIANTS = ("", "on commit drop", "on commit delete rows")
DISCARDS = ("ALL", "TEMP", "SEQUENCES", "PLANS")
TEMP_SLOTS, PREPARED_SLOTS, PROTOCOL_SLOTS, CURSOR_SLOTS = ("t1", "t2"), ("s1", "s2"), ("p1", "p2"), ("c1", "c2")
LOCK_SLOTS, CHANNELS = ("1", "2"), ("ch1", "ch2")
#: The variant of WRITE and of nothing else: the row goes the driver's prepared way.
PREPARED = "prepared"


@dataclass(frozen=True, order=True)
class Op:
    """One step of one client."""

    who: Who
    kind: Kind
    arg: str = ""
    variant: str = ""

    def __str__(self) -> str:
        extra = " ".join(p for p in (self.arg, self.variant) if p)
        return f"{self.who}:{self.kind}" + (f"({extra})" if extra else "")


#: Kinds that only mean something inside the client's own transaction (outside it, autocommit warns or
#: fails on both routes alike: repair drops them there).
TXN_ONLY = frozenset({Kind.SET_LOCAL})


#: Calls that send only the driver's own statement (or none at once: pgjdbc's begin), so no tag finds them.
DRIVER_CALLS = frozenset({Kind.BEGIN, Kind.COMMIT, Kind.ROLLBACK, Kind.FREE, Kind.BIND})


def txn_only(op: Op) -> bool:
    return op.kind in TXN_ONLY or (op.kind is Kind.DECLARE and op.variant != "hold")


def _client_ops(who: Who) -> list[Op]:
    ops: list[Op] = [Op(who, Kind.OBSERVE)]
    for s in SETTINGS:
        ops += [Op(who, Kind.SET, s.name), Op(who, Kind.RESET, s.name), Op(who, Kind.SET_LOCAL, s.name)]
        ops += [Op(who, Kind.SET_CONFIG, s.name, v) for v in CONFIG_VARIANTS]
        if s.alt is not None:
            ops.append(Op(who, Kind.SET, s.name, "alt"))
    ops += [Op(who, Kind.RESET_ALL)]
    ops += [Op(who, Kind.SET_ROLE, r) for r in ROLES] + [Op(who, Kind.RESET_ROLE)]
    for t in TEMP_SLOTS:
        ops += [Op(who, Kind.CREATE_TEMP, t, v) for v in TEMP_VARIANTS]
        ops += [Op(who, Kind.READ_TEMP, t), Op(who, Kind.DROP_TEMP, t)]
    ops += [Op(who, Kind.NEXTVAL), Op(who, Kind.LASTVAL)]
    for s_ in PREPARED_SLOTS:
        ops += [Op(who, Kind.PREPARE, s_), Op(who, Kind.EXECUTE, s_), Op(who, Kind.DEALLOCATE, s_)]
    ops += [Op(who, Kind.BIND, s_) for s_ in PREPARED_SLOTS]
    ops += [Op(who, Kind.DEALLOCATE_ALL)]
    ops += [Op(who, Kind.PROTOCOL, p) for p in PROTOCOL_SLOTS] + [Op(who, Kind.FREE)]
    ops += [Op(who, Kind.WRITE), Op(who, Kind.WRITE, "", PREPARED)]
    for c in CURSOR_SLOTS:
        ops += [Op(who, Kind.DECLARE, c, "hold"), Op(who, Kind.DECLARE, c), Op(who, Kind.FETCH, c),
                Op(who, Kind.CLOSE, c)]
    for k in LOCK_SLOTS:
        ops += [Op(who, Kind.LOCK, k), Op(who, Kind.XACT_LOCK, k), Op(who, Kind.UNLOCK, k)]
    ops += [Op(who, Kind.UNLOCK_ALL)]
    for ch in CHANNELS:
        ops += [Op(who, Kind.LISTEN, ch), Op(who, Kind.UNLISTEN, ch), Op(who, Kind.NOTIFY, ch)]
    ops += [Op(who, Kind.UNLISTEN, "*")]
    ops += [Op(who, k) for k in (Kind.BEGIN, Kind.COMMIT, Kind.ROLLBACK)]
    ops += [Op(who, Kind.DISCARD, d) for d in DISCARDS]
    return ops


#: Every op discovery may generate, A's then B's.
UNIVERSE: tuple[Op, ...] = tuple(_client_ops(Who.A) + _client_ops(Who.B))


@dataclass(frozen=True)
class Abilities:
    """What a driver's API offers beyond SQL (every driver has transactions)."""

    bound: bool = True  #: a statement with a bound parameter, the driver's default way (set_config ... bound)
    free: bool = False  #: freeing one prepared statement (psycopg and asyncpg have no public API for it)
    prepared: bool = True  #: its prepared path (none where its settings never prepare: Django's defaults)
    bind: bool = False  #: executing a statement by a name it did not prepare (libpq's PQexecPrepared...)


def universe(can: Abilities) -> tuple[Op, ...]:
    """The ops a driver with these abilities can run, in UNIVERSE's order."""
    return tuple(op for op in UNIVERSE if (can.free or op.kind is not Kind.FREE)
                 and (can.prepared or not prepares(op)) and (can.bind or op.kind is not Kind.BIND)
                 and (can.bound or "bound" not in op.variant))


def prepares(op: Op) -> bool:
    """The op makes a statement through the driver's prepared path (what a later FREE of its client frees)."""
    return op.kind is Kind.PROTOCOL or (op.kind is Kind.WRITE and op.variant == PREPARED)


def repair(raw: Iterable[Op]) -> tuple[Op, ...]:
    """The sequence that runs: BEGIN inside a transaction, COMMIT/ROLLBACK outside one, transaction-only
    ops outside one and a FREE before its client prepared anything are dropped; an op of the other client
    while one holds a transaction first commits it (in a pool of one the other would wait for it
    forever); a transaction still open at the end is committed."""
    out: list[Op] = []
    holder: Who | None = None
    prepared: set[Who] = set()
    for op in raw:
        if holder is not None and op.who is not holder:
            out.append(Op(holder, Kind.COMMIT))
            holder = None
        if op.kind is Kind.BEGIN:
            if holder is not None:
                continue
            holder = op.who
        elif op.kind in (Kind.COMMIT, Kind.ROLLBACK):
            if holder is None:
                continue
            holder = None
        elif (txn_only(op) and holder is None) or (op.kind is Kind.FREE and op.who not in prepared):
            continue
        if prepares(op):
            prepared.add(op.who)
        out.append(op)
    if holder is not None:
        out.append(Op(holder, Kind.COMMIT))
    return tuple(out)


def in_transaction(ops: tuple[Op, ...]) -> list[bool]:
    """For each op of a repaired sequence: does it run inside its client's own transaction block
    (after that client's BEGIN, up to and including its COMMIT/ROLLBACK)?"""
    inside: list[bool] = []
    open_: set[Who] = set()
    for op in ops:
        if op.kind is Kind.BEGIN:
            inside.append(False)
            open_.add(op.who)
            continue
        inside.append(op.who in open_)
        if op.kind in (Kind.COMMIT, Kind.ROLLBACK):
            open_.discard(op.who)
    return inside
