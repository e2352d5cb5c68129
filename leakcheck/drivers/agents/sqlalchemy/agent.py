"""leakcheck agent for SQLAlchemy 2 (ORM Session and Core over its psycopg 3 dialect, postgresql+psycopg):
one client slot, JSON lines on stdin/stdout (agent protocol 1, docs/agent-protocol.md).

A probe's client is one unit of work of a SQLAlchemy application: `connect` makes the engine with the
settings (create_engine: pool_pre_ping, poolclass; the dialect's prepare_threshold through
connect_args, psycopg's own) and checks one Connection out of its pool (engine.connect(); the pre-ping
runs here), with a Session bound to it; `close` checks it back in (QueuePool keeps the DBAPI connection,
NullPool closes it) and disposes of the engine. The Connection runs in DBAPI autocommit
(isolation_level AUTOCOMMIT, as applications behind PgBouncer set it), so each statement is its own
transaction unless a probe sends BEGIN itself or the ORM's begin opens one.
- query / execute: the harness way, on the DBAPI connection under it (psycopg's, driver_connection):
  `execute(sql, prepare=False)`, the simple query protocol, no named statement.
- prepared: `session.execute(text(sql))`, SQLAlchemy's compiled cache and the dialect's execute, run
  `times` times and at least prepare_threshold + 1 times, so psycopg prepares it (_pg3_N) as in an
  application that repeats a query; with prepare_threshold None it never does (the probes then say so).
- free: SQLAlchemy has no way to drop one statement (class unsupported).
- begin / commit / rollback: session.begin() and its commit()/rollback(), the Connection back at its
  default isolation level (READ COMMITTED) for the transaction and in autocommit after it.
- cancel: psycopg's cancel_safe() on the DBAPI connection, from the stdin thread.
- notifications: psycopg's notifies(timeout=0) after each answer; parameters: psycopg's parameter_status.
"""

from __future__ import annotations

import contextlib
import json
import math
import queue
import sys
import threading
from typing import Any

import psycopg
import sqlalchemy
from psycopg.types.string import TextLoader
from sqlalchemy import URL, create_engine, text
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool, QueuePool

#: The pool classes the poolclass setting names.
POOLS = {"QueuePool": QueuePool, "NullPool": NullPool}
#: The settings this agent takes.
SETTINGS = ("pool_pre_ping", "poolclass", "prepare_threshold", "options")
#: ParameterStatus names PostgreSQL reports.
REPORTED = ("application_name", "client_encoding", "DateStyle", "default_transaction_read_only", "in_hot_standby",
            "integer_datetimes", "IntervalStyle", "is_superuser", "scram_iterations", "search_path",
            "server_encoding", "server_version", "session_authorization", "standard_conforming_strings", "TimeZone")
#: Types whose values travel as PostgreSQL's text form (the protocol's "everything else").
AS_TEXT = ("date", "time", "timetz", "timestamp", "timestamptz", "interval", "numeric", "uuid", "json", "jsonb",
           "bytea", "inet", "cidr", "macaddr", "money", "oid", "xid")


def rows(cursor: Any) -> list[list[Any]]:
    return [[value(v) for v in row] for row in cursor.fetchall()] if cursor.description else []


class Usage(Exception):
    """A request the caller got wrong (class "usage")."""


class Unsupported(Exception):
    """An op SQLAlchemy has no API for (class "unsupported")."""


def value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list):
        return [value(e) for e in v]
    return str(v)


class Agent:
    def __init__(self) -> None:
        self.engine: Any = None
        self.conn: Any = None  # the checked-out sqlalchemy Connection
        self.session: Any = None
        self.raw: psycopg.Connection[Any] | None = None  # the DBAPI connection under it (cancel reads it)
        self.threshold: int | None = 5
        self.tx: Any = None

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"id": request.get("id"), "ok": True}
        try:
            self.run(str(request.get("op")), request, out)
        except Usage as exc:
            out = failure(request.get("id"), "", "usage", str(exc))
        except Unsupported as exc:
            out = failure(request.get("id"), "", "unsupported", str(exc))
        except Exception as exc:  # a statement failed: SQLAlchemy's error, psycopg's under it
            out = failure(request.get("id"), self.sqlstate(exc), f"{type(exc).__module__}.{type(exc).__name__}",
                          str(exc))
        if self.raw is not None:
            self.drain(out)
        return out

    def run(self, op: str, request: dict[str, Any], out: dict[str, Any]) -> None:
        if op == "hello":
            out.update(protocol=1, driver="sqlalchemy", release=sqlalchemy.__version__,
                       runtime=f"python {sys.version.split()[0]} psycopg {psycopg.__version__} "
                               f"libpq {psycopg.pq.version() // 10000}.{psycopg.pq.version() % 10000}")
            return
        if op == "connect":
            return self.connect(request)
        if op == "close":
            return self.close()
        if op == "exit":
            return
        if self.raw is None:
            raise Usage("not connected: send connect first")
        sql = str(request.get("sql", ""))
        if op in ("query", "execute"):
            with self.raw.cursor() as cursor:
                cursor.execute(sql, prepare=False)
                if op == "query":
                    out["rows"] = rows(cursor)
        elif op == "prepared":
            result = None
            for _ in range(max(int(request.get("times") or 1), (self.threshold or 0) + 1)):
                result = self.session.execute(text(sql))
            assert result is not None
            out["rows"] = [[value(v) for v in row] for row in result.all()] if result.returns_rows else []
        elif op == "free":
            raise Unsupported("SQLAlchemy has no API to drop one prepared statement")
        elif op == "begin":
            self.session.commit()  # the autocommit Connection's logical transaction (nothing on the server)
            self.conn.execution_options(isolation_level=self.conn.default_isolation_level)
            self.tx = self.session.begin()
            self.session.connection()  # the Connection begins its transaction (BEGIN goes with the next statement)
        elif op in ("commit", "rollback"):
            if self.tx is None:
                raise Usage(f"{op} without begin")
            tx, self.tx = self.tx, None
            try:
                tx.commit() if op == "commit" else tx.rollback()
            finally:
                self.conn.execution_options(isolation_level="AUTOCOMMIT")
        else:
            raise Usage(f"unknown op {op}")

    def connect(self, request: dict[str, Any]) -> None:
        self.close()
        given = {str(k): str(v) for k, v in (request.get("settings") or {}).items()}
        for name in given:
            if name not in SETTINGS:
                raise Usage(f"unknown SQLAlchemy setting {name} (it takes {', '.join(SETTINGS)})")
        pool = given.get("poolclass", "QueuePool")
        threshold = given.get("prepare_threshold", "5")
        if pool not in POOLS or given.get("pool_pre_ping", "false") not in ("true", "false") or not (
                threshold == "None" or threshold.isdigit()):
            raise Usage(f"SQLAlchemy settings {given} hold a value it does not take")
        self.threshold = None if threshold == "None" else int(threshold)
        url = URL.create("postgresql+psycopg", username=request.get("user"),
                         password=request.get("password") or None, host=request.get("host"),
                         port=int(request.get("port") or 5432), database=request.get("dbname"))
        connect_args: dict[str, Any] = {"connect_timeout": 10, "prepare_threshold": self.threshold}
        if given.get("options"):
            connect_args["options"] = given["options"]  # libpq's, as applications pass it in connect_args
        self.engine = create_engine(url, poolclass=POOLS[pool], pool_pre_ping=given.get("pool_pre_ping") == "true",
                                    connect_args=connect_args)
        self.conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        self.session = Session(bind=self.conn)
        self.raw = self.conn.connection.driver_connection
        assert self.raw is not None
        for name in AS_TEXT:
            self.raw.adapters.register_loader(name, TextLoader)

    def close(self) -> None:
        parts, self.tx, self.raw = (self.session, self.conn), None, None
        engine, self.session, self.conn, self.engine = self.engine, None, None, None
        for part in parts:  # the Connection back to its pool: QueuePool keeps it, NullPool closes it
            if part is not None:
                with contextlib.suppress(Exception):  # a connection the server ended
                    part.close()
        if engine is not None:
            engine.dispose()

    def cancel(self, id_: Any) -> dict[str, Any]:
        raw = self.raw
        if raw is None:
            return failure(id_, "", "unsupported", "not connected: nothing to cancel")
        try:
            raw.cancel_safe(timeout=5)  # returns once the peer closed the cancel connection
        except psycopg.Error as exc:
            return failure(id_, "", type(exc).__name__, str(exc))
        return {"id": id_, "ok": True, "closed": True}

    def drain(self, out: dict[str, Any]) -> None:
        raw = self.raw
        assert raw is not None
        notes: list[dict[str, str]] = []
        if not raw.closed:
            with contextlib.suppress(psycopg.Error):
                notes = [{"channel": n.channel, "payload": n.payload} for n in raw.notifies(timeout=0)]
        out["notifications"] = notes
        params = {name: raw.info.parameter_status(name) for name in REPORTED}
        out["parameters"] = {k: v for k, v in params.items() if v is not None}

    def sqlstate(self, exc: BaseException) -> str:
        for each in (exc, getattr(exc, "orig", None), exc.__cause__):
            if getattr(each, "sqlstate", None):
                return str(each.sqlstate)  # type: ignore[union-attr]
        if self.raw is not None and self.raw.closed:
            return "08006"
        return ""


def failure(id_: Any, sqlstate: str, klass: str, message: str) -> dict[str, Any]:
    first = (message.strip().splitlines() or [""])[0]
    return {"id": id_, "ok": False, "error": {"sqlstate": sqlstate, "class": klass, "message": first}}


OUT = threading.Lock()


def send(answer: dict[str, Any]) -> None:
    with OUT:
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


def main() -> None:
    agent = Agent()
    requests: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def read() -> None:  # the stdin thread: a cancel is acted on while the main thread runs a request
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
            except ValueError as exc:
                send(failure(None, "", "usage", str(exc)))
                continue
            if request.get("op") == "cancel":
                send(agent.cancel(request.get("id")))
            else:
                requests.put(request)
        requests.put(None)

    threading.Thread(target=read, daemon=True).start()
    while (request := requests.get()) is not None:
        send(agent.answer(request))
        if request.get("op") == "exit":
            break
    agent.close()


if __name__ == "__main__":
    main()
