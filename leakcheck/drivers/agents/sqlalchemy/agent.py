"""leakcheck agent for SQLAlchemy 2 (ORM Session and Core over its psycopg 3 dialect, postgresql+psycopg):
one client slot, JSON lines on stdin/stdout (agent protocol 1, docs/agent-protocol.md; the plumbing in
protocol.py, django/'s, shared with the django agent).

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
from typing import TYPE_CHECKING, Any

import sqlalchemy
import sqlalchemy.dialects.postgresql.psycopg  # noqa: F401 (create_engine's: loaded as an app's engine at import)
from sqlalchemy import URL, create_engine, text
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool, QueuePool

if TYPE_CHECKING:  # run from its own folder, beside protocol.py (the agent's sources, drivers/agents/install.py)
    import leakcheck.drivers.agents.django.protocol as protocol
else:
    import protocol

#: The pool classes the poolclass setting names.
POOLS = {"QueuePool": QueuePool, "NullPool": NullPool}
#: The settings this agent takes.
SETTINGS = ("pool_pre_ping", "poolclass", "prepare_threshold", "options")


class Agent(protocol.Agent):
    driver = "sqlalchemy"

    def __init__(self) -> None:
        super().__init__()  # raw: the DBAPI connection under the checked-out Connection
        self.engine: Any = None
        self.conn: Any = None  # the checked-out sqlalchemy Connection
        self.session: Any = None
        self.threshold: int | None = 5
        self.tx: Any = None

    def release(self) -> str:
        return str(sqlalchemy.__version__)

    def orm_op(self, op: str, sql: str, request: dict[str, Any], out: dict[str, Any]) -> None:
        if op == "prepared":
            result = None
            for _ in range(max(int(request.get("times") or 1), (self.threshold or 0) + 1)):
                result = self.session.execute(text(sql))
            assert result is not None
            out["rows"] = [[protocol.value(v) for v in row] for row in result.all()] if result.returns_rows else []
        elif op == "free":
            raise protocol.Unsupported("SQLAlchemy has no API to drop one prepared statement")
        elif op == "begin":
            self.session.commit()  # the autocommit Connection's logical transaction (nothing on the server)
            self.conn.execution_options(isolation_level=self.conn.default_isolation_level)
            self.tx = self.session.begin()
            self.session.connection()  # the Connection begins its transaction (BEGIN goes with the next statement)
        elif op in ("commit", "rollback"):
            if self.tx is None:
                raise protocol.Usage(f"{op} without begin")
            tx, self.tx = self.tx, None
            try:
                tx.commit() if op == "commit" else tx.rollback()
            finally:
                self.conn.execution_options(isolation_level="AUTOCOMMIT")
        else:
            raise protocol.Usage(f"unknown op {op}")

    def connect(self, request: dict[str, Any]) -> None:
        self.close()
        given = {str(k): str(v) for k, v in (request.get("settings") or {}).items()}
        for name in given:
            if name not in SETTINGS:
                raise protocol.Usage(f"unknown SQLAlchemy setting {name} (it takes {', '.join(SETTINGS)})")
        pool = given.get("poolclass", "QueuePool")
        threshold = given.get("prepare_threshold", "5")
        if pool not in POOLS or given.get("pool_pre_ping", "false") not in ("true", "false") or not (
                threshold == "None" or threshold.isdigit()):
            raise protocol.Usage(f"SQLAlchemy settings {given} hold a value it does not take")
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
        protocol.as_text(self.raw)

    def close(self) -> None:
        parts, self.tx, self.raw = (self.session, self.conn), None, None
        engine, self.session, self.conn, self.engine = self.engine, None, None, None
        for part in parts:  # the Connection back to its pool: QueuePool keeps it, NullPool closes it
            if part is not None:
                with contextlib.suppress(Exception):  # a connection the server ended
                    part.close()
        if engine is not None:
            engine.dispose()


if __name__ == "__main__":
    protocol.main(Agent)
