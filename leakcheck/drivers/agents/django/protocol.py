"""What leakcheck's Python ORM agents share (django/ and sqlalchemy/ run this file beside their agent.py):
agent protocol 1 (docs/agent-protocol.md) over the psycopg 3 connection under the ORM.

- the request loop (`serve`): JSON lines on stdin/stdout, one request at a time on the main thread, a
  cancel acted on at once by the stdin thread;
- answers and failures (the protocol's classes usage and unsupported, else the ORM's error with psycopg's
  SQLSTATE under it; 08006 when the server ended the connection);
- hello, and the harness way of query / execute on the psycopg connection (`execute(sql, prepare=False)`,
  the simple query protocol, no named statement, PostgreSQL's text form for AS_TEXT types);
- cancel: psycopg's cancel_safe(); after each answer, psycopg's notifies(timeout=0) and parameter_status.

Each agent's ORM code (connect, close, and the ops the ORM runs: prepared, free, begin, commit, rollback)
stays in its agent.py, a subclass of Agent; its `main` starts it, or with `--preload FD` its preloader
(preload.py: one process a run that imported the agent, each agent a fork of it).
"""

from __future__ import annotations

import contextlib
import json
import math
import queue
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.types.string import TextLoader

if TYPE_CHECKING:  # run from the agent's folder, beside this file (drivers/agents/install.py)
    import leakcheck.drivers.agents.django.preload as preload
else:
    import preload

#: ParameterStatus names PostgreSQL reports.
REPORTED = ("application_name", "client_encoding", "DateStyle", "default_transaction_read_only", "in_hot_standby",
            "integer_datetimes", "IntervalStyle", "is_superuser", "scram_iterations", "search_path",
            "server_encoding", "server_version", "session_authorization", "standard_conforming_strings", "TimeZone")
#: Types whose values travel as PostgreSQL's text form (the protocol's "everything else").
AS_TEXT = ("date", "time", "timetz", "timestamp", "timestamptz", "interval", "numeric", "uuid", "json", "jsonb",
           "bytea", "inet", "cidr", "macaddr", "money", "oid", "xid")


class Usage(Exception):
    """A request the caller got wrong (class "usage")."""


class Unsupported(Exception):
    """An op the ORM has no API for (class "unsupported")."""


def value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list):
        return [value(e) for e in v]
    return str(v)


def rows(cursor: Any) -> list[list[Any]]:
    return [[value(v) for v in row] for row in cursor.fetchall()] if cursor.description else []


def as_text(holder: Any) -> Any:
    """`holder` (a psycopg cursor or connection), loading the AS_TEXT types as text."""
    for name in AS_TEXT:
        holder.adapters.register_loader(name, TextLoader)
    return holder


class Agent:
    """One client slot: the ops every agent answers alike, the ORM's in `orm_op`, `connect` and `close`."""

    #: The driver id hello reports.
    driver = ""

    def __init__(self) -> None:
        self.raw: psycopg.Connection[Any] | None = None  # the psycopg connection under the ORM (cancel reads it)

    def release(self) -> str:
        """The ORM's release, for hello."""
        raise NotImplementedError

    def connect(self, request: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def orm_op(self, op: str, sql: str, request: dict[str, Any], out: dict[str, Any]) -> None:
        """An op the ORM runs (prepared, free, begin, commit, rollback); Usage for an unknown one."""
        raise NotImplementedError

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"id": request.get("id"), "ok": True}
        try:
            self.run(str(request.get("op")), request, out)
        except Usage as exc:
            out = failure(request.get("id"), "", "usage", str(exc))
        except Unsupported as exc:
            out = failure(request.get("id"), "", "unsupported", str(exc))
        except Exception as exc:  # a statement failed: the ORM's error, psycopg's under it
            out = failure(request.get("id"), self.sqlstate(exc), f"{type(exc).__module__}.{type(exc).__name__}",
                          str(exc))
        if self.raw is not None:
            self.drain(out)
        return out

    def run(self, op: str, request: dict[str, Any], out: dict[str, Any]) -> None:
        if op == "hello":
            out.update(protocol=1, driver=self.driver, release=self.release(),
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
            with as_text(self.raw.cursor()) as cursor:
                cursor.execute(sql, prepare=False)
                if op == "query":
                    out["rows"] = rows(cursor)
        else:
            self.orm_op(op, sql, request, out)

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
        for each in (exc, getattr(exc, "orig", None), exc.__cause__):  # orig: SQLAlchemy's DBAPI error
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


def serve(agent: Agent) -> None:
    """Answer stdin's requests until exit or its end, then close the agent's connection."""
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


def main(agent: Callable[[], Agent]) -> None:
    """The agent's process: one `agent()` serving stdin; with `--preload FD` the driver's preloader, each
    agent a fork of this process that serves its own (preload.py)."""
    if sys.argv[1:2] == ["--preload"]:
        preload.serve(int(sys.argv[2]), lambda: serve(agent()))
    else:
        serve(agent())
