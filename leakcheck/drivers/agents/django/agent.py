"""leakcheck agent for Django's ORM (its psycopg 3 backend): one client slot, JSON lines on stdin/stdout
(agent protocol 1, docs/agent-protocol.md).

A probe's client is one request of a Django application: `connect` opens the request's connection
(django.db.connection with the DATABASES entry the settings make: Django sets its time zone on a new
connection, as every Django application's connection does), `close` ends it (Django's own close).
- query / execute: the harness way, on the connection Django opened (connection.connection, psycopg's):
  `execute(sql, prepare=False)`, the simple query protocol, no named statement.
- prepared: Django's path for raw SQL, `connection.cursor().execute(sql)`, run `times` times and at
  least prepare_threshold + 1 times, so psycopg prepares it (_pg3_N) as in an application that repeats a
  query. Django's default (server_side_binding off: a client-side binding cursor; prepare_threshold None)
  never prepares: then `prepared` fails with Django's NotSupportedError, words the catalogue's refusals
  map to not applicable (there is nothing of the driver's to measure), not to a fault.
- free: Django has no way to drop one statement (class unsupported).
- begin / commit / rollback: transaction.atomic() entered and left by hand (rollback marks it first).
- cancel: psycopg's cancel_safe() on the request's connection, from the stdin thread.
- notifications: psycopg's notifies(timeout=0) after each answer; parameters: psycopg's parameter_status.
"""

from __future__ import annotations

import contextlib
import json
import math
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

import django
import psycopg
from django.conf import settings
from django.db import NotSupportedError, connections, transaction
from django.db.backends.postgresql.base import DatabaseWrapper
from psycopg.types.string import TextLoader

#: Django's settings of a new project (startproject): USE_TZ on, TIME_ZONE UTC.
settings.configure(USE_TZ=True, TIME_ZONE="UTC", DATABASES={}, INSTALLED_APPS=[])
django.setup()

#: The DATABASES entry's own keys this agent takes (the others below go into its OPTIONS).
TOP: dict[str, Callable[[str], Any]] = {
    "DISABLE_SERVER_SIDE_CURSORS": lambda v: v == "true",
    "CONN_MAX_AGE": lambda v: None if v == "None" else int(v),
    "CONN_HEALTH_CHECKS": lambda v: v == "true",
}
#: The OPTIONS this agent takes: two Django reads itself, and libpq's `options`.
OPTIONS: dict[str, Callable[[str], Any]] = {
    "server_side_binding": lambda v: v == "true",
    "prepare_threshold": lambda v: None if v == "None" else int(v),
    "options": str,  # libpq's, which Django passes on to psycopg as every other OPTIONS key
}
#: ParameterStatus names PostgreSQL reports.
REPORTED = ("application_name", "client_encoding", "DateStyle", "default_transaction_read_only", "in_hot_standby",
            "integer_datetimes", "IntervalStyle", "is_superuser", "scram_iterations", "search_path",
            "server_encoding", "server_version", "session_authorization", "standard_conforming_strings", "TimeZone")
#: Types whose values travel as PostgreSQL's text form (the protocol's "everything else").
AS_TEXT = ("date", "time", "timetz", "timestamp", "timestamptz", "interval", "numeric", "uuid", "json", "jsonb",
           "bytea", "inet", "cidr", "macaddr", "money", "oid", "xid")
NEVER_PREPARES = "Django never prepares a statement"


class Usage(Exception):
    """A request the caller got wrong (class "usage")."""


class Unsupported(Exception):
    """An op Django has no API for (class "unsupported")."""


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


def as_text(cursor: Any) -> Any:
    for name in AS_TEXT:
        cursor.adapters.register_loader(name, TextLoader)
    return cursor


class Agent:
    def __init__(self) -> None:
        self.raw: psycopg.Connection[Any] | None = None  # the request's psycopg connection (cancel reads it)
        self.atomic: Any = None
        self.threshold: int | None = None
        self.server_side_binding = False

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"id": request.get("id"), "ok": True}
        try:
            self.run(str(request.get("op")), request, out)
        except Usage as exc:
            out = failure(request.get("id"), "", "usage", str(exc))
        except Unsupported as exc:
            out = failure(request.get("id"), "", "unsupported", str(exc))
        except Exception as exc:  # a statement failed: Django's error, psycopg's under it
            out = failure(request.get("id"), self.sqlstate(exc), f"{type(exc).__module__}.{type(exc).__name__}",
                          str(exc))
        if self.raw is not None:
            self.drain(out)
        return out

    def run(self, op: str, request: dict[str, Any], out: dict[str, Any]) -> None:
        if op == "hello":
            out.update(protocol=1, driver="django", release=django.get_version(),
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
        elif op == "prepared":
            if not self.server_side_binding or self.threshold is None:
                raise NotSupportedError(f"{NEVER_PREPARES} with server_side_binding {self.server_side_binding} and "
                                  f"prepare_threshold {self.threshold}: its cursors bind parameters client-side "
                                  "or psycopg's preparing is off (Django's default turns both off)")
            with connections["default"].cursor() as cursor:
                as_text(cursor.cursor)
                for _ in range(max(int(request.get("times") or 1), self.threshold + 1)):
                    cursor.execute(sql)
                out["rows"] = rows(cursor)
        elif op == "free":
            raise Unsupported("Django has no API to drop one prepared statement")
        elif op == "begin":
            self.atomic = transaction.atomic()
            self.atomic.__enter__()
        elif op in ("commit", "rollback"):
            if self.atomic is None:
                raise Usage(f"{op} without begin")
            atomic, self.atomic = self.atomic, None
            if op == "rollback":
                transaction.set_rollback(True)
            atomic.__exit__(None, None, None)
        else:
            raise Usage(f"unknown op {op}")

    def connect(self, request: dict[str, Any]) -> None:
        self.close()
        entry: dict[str, Any] = {"ENGINE": "django.db.backends.postgresql", "NAME": request.get("dbname"),
                                 "USER": request.get("user"), "PASSWORD": str(request.get("password") or ""),
                                 "HOST": request.get("host"), "PORT": str(request.get("port")),
                                 "OPTIONS": {"connect_timeout": 10}}
        for name, text in (request.get("settings") or {}).items():
            try:
                if name in TOP:
                    entry[name] = TOP[name](str(text))
                elif name in OPTIONS:
                    entry["OPTIONS"][name] = OPTIONS[name](str(text))
                else:
                    raise Usage(f"unknown Django setting {name} (DATABASES keys: {', '.join(TOP)}; OPTIONS: "
                                f"{', '.join(OPTIONS)})")
            except ValueError:
                raise Usage(f"Django setting {name}={text} is not a value it takes") from None
        self.server_side_binding = entry["OPTIONS"].get("server_side_binding") is True
        self.threshold = entry["OPTIONS"].get("prepare_threshold")
        configured = connections.configure_settings({"default": entry})
        connections["default"] = DatabaseWrapper(configured["default"], "default")
        connections["default"].ensure_connection()
        self.raw = connections["default"].connection

    def close(self) -> None:
        self.atomic = None
        self.raw = None
        with contextlib.suppress(Exception):  # no connection yet, or one the server ended
            connections["default"].close()

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
        for each in (exc, exc.__cause__):
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
