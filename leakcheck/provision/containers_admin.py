"""Talking to the servers the containers backend starts: readiness and PgBouncer's admin console."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg.pq import ExecStatus

from ..errors import ProbeError
from .base import DBNAME, Endpoint
from .containers_images import one_line


def query_postgres(endpoint: Endpoint) -> None:
    with psycopg.connect(endpoint.conninfo(), autocommit=True, connect_timeout=3) as conn:
        conn.execute("SELECT 1")


def _admin(endpoint: Endpoint) -> psycopg.Connection[Any]:
    return psycopg.connect(endpoint.conninfo("pgbouncer"), autocommit=True, connect_timeout=3)


def _admin_exec(conn: psycopg.Connection[Any], command: str) -> list[dict[str, str]]:
    """A command on PgBouncer's admin console (simple query protocol only); its rows."""
    result = conn.pgconn.exec_(command.encode())
    if result.status not in (ExecStatus.COMMAND_OK, ExecStatus.TUPLES_OK):
        message = (result.error_message or b"").decode(errors="replace")
        raise ProbeError(f"PgBouncer's admin console refused {command!r}: {one_line(message)}")
    names = [(result.fname(i) or b"").decode() for i in range(result.nfields)]
    return [
        {name: (result.get_value(row, col) or b"").decode() for col, name in enumerate(names)}
        for row in range(result.ntuples)
    ]


def show_version(endpoint: Endpoint) -> None:
    with _admin(endpoint) as conn:
        _admin_exec(conn, "SHOW VERSION")


def reset_pool(endpoint: Endpoint) -> None:
    """Drop every server connection of the pool (KILL), then let clients in again (RESUME)."""
    try:
        with _admin(endpoint) as conn:
            _admin_exec(conn, f"KILL {DBNAME}")
            _admin_exec(conn, f"RESUME {DBNAME}")
            deadline = time.monotonic() + 5
            while any(row.get("database") == DBNAME for row in _admin_exec(conn, "SHOW SERVERS")):
                if time.monotonic() > deadline:
                    raise ProbeError(
                        f"PgBouncer at port {endpoint.port} still holds server connections after KILL"
                    )
                time.sleep(0.05)
    except psycopg.Error as exc:
        raise ProbeError(
            f"could not reset PgBouncer's pool at {endpoint.host}:{endpoint.port} ({one_line(exc, 160)})"
        ) from None
