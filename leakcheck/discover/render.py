"""The SQL of each op and of a snapshot, for a run's names (pure).

Names carry a token unique to one route's run of one sequence (`lc<token>_s1`), so two runs never
meet in anything global (NOTIFY channels, advisory lock keys); the comparer maps every token back
to the display names (`lc_s1`), which is also what a printed reproduction uses. A value tells whose
it is: A's statement s1 returns 'lc_A_s1', B's 'lc_B_s1'.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from enum import StrEnum

from leakcheck.discover.ops import PREPARED, SETTING, Kind, Op, Who, quote
from leakcheck.probes.outcomes import write_statement


@dataclass(frozen=True)
class Names:
    """Object names and values of one run; `DISPLAY` for printed scripts."""

    token: str
    lock_class: int  # the first key of every advisory lock this run takes (pg_locks.classid)

    @property
    def prefix(self) -> str:
        return f"lc{self.token}_"

    def obj(self, slot: str) -> str:
        return self.prefix + slot

    def value(self, who: Who, slot: str) -> str:
        return f"{self.prefix}{who}_{slot}"

    def sequence(self, who: Who) -> str:
        return f"{self.prefix}seq_{who.lower()}"

    def row(self, who: Who, step: int) -> str:
        """A row's id in a printed script (a run's rows are the scenario's own: probes/outcomes.py)."""
        return f"{self.prefix}{who}_row{step}"


DISPLAY = Names("", 4242)


def fresh_names() -> Names:
    """Names no other run uses: a random token and advisory lock class."""
    return Names(secrets.token_hex(4), 1_000_000 + secrets.randbelow(1_000_000_000))


class Via(StrEnum):
    """Which call of the driver sends a statement."""

    SIMPLE = "simple"  #: Client.query (psycopg prepare=False; asyncpg unnamed)
    PROTOCOL = "protocol"  #: Client.prepared: the driver's named prepared statement
    BOUND = "bound"  #: the driver's default way with one bound parameter ($1)
    FREE = "free"  #: Client.free of the statement the client's last prepared call made (no SQL of ours)
    BIND = "bind"  #: Client.bind: Bind/Execute of the statement named `sql`, no Parse
    DRIVER = "driver"  #: the driver's transaction API; the SQL is what it stands for (BEGIN, COMMIT, ROLLBACK)


@dataclass(frozen=True)
class Statement:
    sql: str
    via: Via = Via.SIMPLE
    params: tuple[str, ...] = ()


def _one(sql: str, via: Via = Via.SIMPLE, params: tuple[str, ...] = ()) -> tuple[Statement, ...]:
    return (Statement(sql, via, params),)


def protocol_select(op: Op, n: Names) -> str:
    """The SELECT list a PROTOCOL op prepares: the client's own value, which only it may get back."""
    return f"{quote(n.value(op.who, op.arg))}::text AS v"


def statements(op: Op, n: Names, step: int = 0) -> tuple[Statement, ...]:
    """What the op sends, in order (not for OBSERVE: see `snapshot_sql`); `step` numbers a WRITE's row."""
    k, w, arg = op.kind, op.who, op.arg
    if k in (Kind.SET, Kind.SET_LOCAL):
        local = " LOCAL" if k is Kind.SET_LOCAL else ""
        return _one(f"SET{local} {arg} = {SETTING[arg].sql(w, op.variant == 'alt')}")
    if k is Kind.RESET:
        return _one(f"RESET {arg}")
    if k is Kind.SET_CONFIG:
        value, local = SETTING[arg].value(w), "true" if "local" in op.variant else "false"
        if "bound" in op.variant:
            return _one(f"SELECT set_config({quote(arg)}, $1, {local})", Via.BOUND, (value,))
        return _one(f"SELECT set_config({quote(arg)}, {quote(value)}, {local})")
    if k is Kind.CREATE_TEMP:
        on_commit = f" {op.variant.upper()}" if op.variant else ""
        return _one(f"CREATE TEMP TABLE {n.obj(arg)}{on_commit} AS SELECT {quote(n.value(w, arg))}::text AS who")
    if k is Kind.NEXTVAL:
        start = 100 if w is Who.A else 200
        return (Statement(f"CREATE TEMP SEQUENCE IF NOT EXISTS {n.sequence(w)} START {start}"),
                Statement(f"SELECT nextval({quote(n.sequence(w))})"))
    if k is Kind.PREPARE:
        return _one(f"PREPARE {n.obj(arg)} AS SELECT {quote(n.value(w, arg))}::text")
    if k is Kind.PROTOCOL:
        return _one(f"SELECT {protocol_select(op, n)}", Via.PROTOCOL)
    if k is Kind.FREE:
        return _one("", Via.FREE)
    if k is Kind.BIND:
        return _one(n.obj(arg), Via.BIND)
    if k is Kind.WRITE:
        return _one(write_statement(n.row(w, step), w), Via.PROTOCOL if op.variant == PREPARED else Via.SIMPLE)
    if k in (Kind.BEGIN, Kind.COMMIT, Kind.ROLLBACK):
        return _one(k.upper(), Via.DRIVER)
    if k is Kind.DECLARE:
        hold = " WITH HOLD" if op.variant == "hold" else ""
        return _one(f"DECLARE {n.obj(arg)} CURSOR{hold} FOR SELECT {quote(n.value(w, arg))} || ':' || g "
                    "FROM generate_series(1, 3) AS g")
    if k in (Kind.LOCK, Kind.XACT_LOCK, Kind.UNLOCK):
        fn = {Kind.LOCK: "pg_try_advisory_lock", Kind.XACT_LOCK: "pg_try_advisory_xact_lock",
              Kind.UNLOCK: "pg_advisory_unlock"}[k]
        return _one(f"SELECT {fn}({n.lock_class}, {arg})")
    if k is Kind.NOTIFY:
        return _one(f"NOTIFY {n.obj(arg)}, {quote(n.value(w, arg))}")
    if k is Kind.UNLISTEN:
        return _one("UNLISTEN *" if arg == "*" else f"UNLISTEN {n.obj(arg)}")
    if k is Kind.DISCARD:
        return _one(f"DISCARD {arg}")
    return _one(_plain(op, n))


def _plain(op: Op, n: Names) -> str:
    obj = n.obj(op.arg)
    sql = {
        Kind.RESET_ALL: "RESET ALL", Kind.SET_ROLE: f"SET ROLE {op.arg}", Kind.RESET_ROLE: "RESET ROLE",
        Kind.READ_TEMP: f"SELECT who FROM {obj}", Kind.DROP_TEMP: f"DROP TABLE {obj}",
        Kind.LASTVAL: "SELECT lastval()", Kind.EXECUTE: f"EXECUTE {obj}", Kind.DEALLOCATE: f"DEALLOCATE {obj}",
        Kind.DEALLOCATE_ALL: "DEALLOCATE ALL", Kind.FETCH: f"FETCH NEXT FROM {obj}", Kind.CLOSE: f"CLOSE {obj}",
        Kind.UNLOCK_ALL: "SELECT pg_advisory_unlock_all()", Kind.LISTEN: f"LISTEN {obj}",
    }.get(op.kind)
    if sql is None:
        raise ValueError(f"no SQL for {op}")
    return sql


# -- the snapshot: everything a client can read about its session, in one statement ------------------

#: Parameters a driver is told about (ParameterStatus) by some PostgreSQL release, among the settings
#: discovery changes: what the client's driver believes, next to what the server has.
REPORTED = ("TimeZone", "DateStyle", "IntervalStyle", "application_name", "search_path",
            "default_transaction_read_only")


def snapshot_columns(n: Names) -> tuple[tuple[str, str], ...]:
    """(key, SQL expression) of every server-side observation."""
    p = quote(n.prefix)
    settings = tuple((f"setting:{name}", f"current_setting({quote(name)}, true)") for name in SETTING)
    return settings + (
        ("current_user", "current_user::text"),
        ("session_user", "session_user::text"),
        ("prepared", "ARRAY(SELECT name || '=' || coalesce(substring(statement FROM "
                     f"{quote(n.prefix + '[AB]_[a-z0-9]+')}), '?') FROM pg_prepared_statements "
                     f"WHERE strpos(statement, {p}) > 0 ORDER BY 1)"),
        ("cursors", "ARRAY(SELECT name || CASE WHEN is_holdable THEN ' (hold)' ELSE '' END FROM pg_cursors "
                    f"WHERE strpos(name, {p}) = 1 ORDER BY 1)"),
        ("locks", "ARRAY(SELECT objid::text FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
                  f"AND classid = {n.lock_class} AND objsubid = 2 AND granted ORDER BY 1)"),
        ("temp", "ARRAY(SELECT slot FROM unnest(ARRAY['t1', 't2']) AS slot "
                 f"WHERE to_regclass({p} || slot) IS NOT NULL ORDER BY 1)"),
        ("listening", f"ARRAY(SELECT c FROM pg_listening_channels() AS c WHERE strpos(c, {p}) = 1 ORDER BY 1)"),
    )


#: Observations the client's driver holds (not SQL): notifications received, parameters reported.
CLIENT_KEYS = ("notifications",) + tuple(f"reported:{name}" for name in REPORTED)


def snapshot_sql(n: Names, identity: str) -> str:
    """One SELECT of every column, with the proof columns last."""
    return "SELECT " + ", ".join(expr for _, expr in snapshot_columns(n)) + f", {identity}"


def column_sql(key: str, n: Names) -> str | None:
    """The SELECT a person runs to read one observation (None: it is the driver's, not SQL)."""
    expr = dict(snapshot_columns(n)).get(key)
    return f"SELECT {expr}" if expr is not None else None
