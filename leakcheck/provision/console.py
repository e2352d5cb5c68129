"""A command on a server's or a pooler's console, bounded (PgBouncer's admin console, Odyssey's console,
pgpool-II's PGPOOL SHOW, PostgreSQL's SELECT 1).

Consoles speak the simple query protocol only and take no `options` (so no statement_timeout): a
command is sent with libpq's PQsendQuery and its answer awaited on the connection's socket with a
deadline (CONSOLE_TIMEOUT). A console that does not answer in time (a pooler stopped with SIGSTOP,
or hung) is a StartError naming it, and the connection is closed: nothing waits on it for ever.
A wait in Python's select() also lets a Ctrl-C or SIGTERM through at once, which PQexec does not.
"""

from __future__ import annotations

import select
import time
from typing import Any

import psycopg
from psycopg.pq import ExecStatus
from psycopg.pq.abc import PGresult

from leakcheck.model.errors import StartError, one_line
from leakcheck.provision.base import Endpoint

#: Seconds a console command may take (they answer in milliseconds); connecting has CONNECT_TIMEOUT.
CONSOLE_TIMEOUT = 5.0
CONNECT_TIMEOUT = 3


def query_postgres(endpoint: Endpoint) -> None:
    with psycopg.connect(endpoint.conninfo(), autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
        execute(conn, "SELECT 1", f"PostgreSQL at {endpoint.host}:{endpoint.port}")


def execute(conn: psycopg.Connection[Any], command: str, console: str = "the console",
            timeout: float = CONSOLE_TIMEOUT) -> list[dict[str, str]]:
    """A command on a pooler's console (simple query protocol only); its rows as dicts. No answer
    within `timeout` seconds: the connection is closed and a StartError names the console."""
    result = _answer(conn, command, console, timeout)
    if result.status not in (ExecStatus.COMMAND_OK, ExecStatus.TUPLES_OK):
        message = (result.error_message or b"").decode(errors="replace")
        raise StartError(f"{console} refused {command!r}: {one_line(message)}")
    names = [(result.fname(i) or b"").decode() for i in range(result.nfields)]
    return [
        {name: (result.get_value(row, col) or b"").decode() for col, name in enumerate(names)}
        for row in range(result.ntuples)
    ]


def _answer(conn: psycopg.Connection[Any], command: str, console: str, timeout: float) -> PGresult:
    """The last result of `command`, awaited on the socket until the deadline."""
    pgconn, deadline = conn.pgconn, time.monotonic() + timeout
    pgconn.send_query(command.encode())
    results: list[PGresult] = []
    while True:
        pgconn.consume_input()
        while not pgconn.is_busy():
            result = pgconn.get_result()
            if result is None:
                if not results:
                    raise StartError(f"{console} gave no result for {command!r}")
                return results[-1]
            results.append(result)
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([pgconn.socket], [], [], left)[0]:
            where = f"{conn.info.host}:{conn.info.port}"
            conn.close()
            raise StartError(f"{console} at {where} did not answer {command!r} within {timeout:g} s: "
                             "it stopped answering (stopped or hung)")
