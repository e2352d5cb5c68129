"""leakcheck agent for Django's ORM (its psycopg 3 backend): one client slot, JSON lines on stdin/stdout
(agent protocol 1, docs/agent-protocol.md; the plumbing in protocol.py, shared with the sqlalchemy agent).

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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import django
from django.conf import settings
from django.db import NotSupportedError, connections, transaction
from django.db.backends.postgresql.base import DatabaseWrapper

if TYPE_CHECKING:  # run from its own folder, beside protocol.py (the agent's sources, drivers/agents/install.py)
    import leakcheck.drivers.agents.django.protocol as protocol
else:
    import protocol

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
NEVER_PREPARES = "Django never prepares a statement"


class Agent(protocol.Agent):
    driver = "django"

    def __init__(self) -> None:
        super().__init__()
        self.atomic: Any = None
        self.threshold: int | None = None
        self.server_side_binding = False

    def release(self) -> str:
        return str(django.get_version())

    def orm_op(self, op: str, sql: str, request: dict[str, Any], out: dict[str, Any]) -> None:
        if op == "prepared":
            if not self.server_side_binding or self.threshold is None:
                raise NotSupportedError(f"{NEVER_PREPARES} with server_side_binding {self.server_side_binding} and "
                                  f"prepare_threshold {self.threshold}: its cursors bind parameters client-side "
                                  "or psycopg's preparing is off (Django's default turns both off)")
            with connections["default"].cursor() as cursor:
                protocol.as_text(cursor.cursor)
                for _ in range(max(int(request.get("times") or 1), self.threshold + 1)):
                    cursor.execute(sql)
                out["rows"] = protocol.rows(cursor)
        elif op == "free":
            raise protocol.Unsupported("Django has no API to drop one prepared statement")
        elif op == "begin":
            self.atomic = transaction.atomic()
            self.atomic.__enter__()
        elif op in ("commit", "rollback"):
            if self.atomic is None:
                raise protocol.Usage(f"{op} without begin")
            atomic, self.atomic = self.atomic, None
            if op == "rollback":
                transaction.set_rollback(True)
            atomic.__exit__(None, None, None)
        else:
            raise protocol.Usage(f"unknown op {op}")

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
                    raise protocol.Usage(f"unknown Django setting {name} (DATABASES keys: {', '.join(TOP)}; "
                                         f"OPTIONS: {', '.join(OPTIONS)})")
            except ValueError:
                raise protocol.Usage(f"Django setting {name}={text} is not a value it takes") from None
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


if __name__ == "__main__":
    protocol.main(Agent)
