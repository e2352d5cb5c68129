"""Two real drivers behind one small async interface, so every probe runs on both.

Each client keeps its driver's defaults (psycopg's prepare_threshold, asyncpg's statement
cache): leakcheck measures what applications get. Harness queries carry a unique comment so
a driver never auto-prepares them; only `prepared_fetchval` repeats a text on purpose.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

import asyncpg
import psycopg

from .provision.base import Endpoint

_unique = itertools.count(1)


class Driver(StrEnum):
    """The client libraries leakcheck drives."""

    PSYCOPG = "psycopg"  #: psycopg 3, AsyncConnection, autocommit
    ASYNCPG = "asyncpg"  #: asyncpg, autocommit outside explicit transactions


class ServerError(Exception):
    """A statement failed; the driver's error reduced to SQLSTATE and message."""

    def __init__(self, sqlstate: str, message: str) -> None:
        first = message.strip().splitlines()[0] if message.strip() else ""
        super().__init__(f"{sqlstate}: {first}")
        self.sqlstate = sqlstate
        self.message = first


@dataclass
class Notification:
    channel: str
    payload: str


class Client(Protocol):
    """One application connection, as a probe sees it."""

    label: str
    notifications: list[Notification]

    async def execute(self, sql: str) -> None: ...
    async def fetchval(self, sql: str) -> Any: ...
    async def fetchall(self, sql: str) -> list[tuple[Any, ...]]: ...
    async def prepared_fetchval(self, sql: str) -> Any: ...
    def reported(self, name: str) -> str | None: ...
    async def wait_for_notifications(self, seconds: float) -> list[Notification]: ...
    async def close(self) -> None: ...


def tag(sql: str) -> str:
    """The same statement with a unique trailing comment (defeats auto-prepare)."""
    return f"{sql} /* leakcheck {next(_unique)} */"


def _sqlstate(exc: BaseException) -> str:
    return str(getattr(exc, "sqlstate", None) or "?????")


@dataclass
class PsycopgClient:
    label: str
    conn: psycopg.AsyncConnection[Any]
    notifications: list[Notification] = field(default_factory=list)

    @classmethod
    async def connect(cls, label: str, endpoint: Endpoint) -> PsycopgClient:
        conn = await psycopg.AsyncConnection.connect(endpoint.conninfo(), autocommit=True, connect_timeout=10)
        client = cls(label, conn)
        conn.add_notify_handler(lambda n: client.notifications.append(Notification(n.channel, n.payload)))
        return client

    async def _run(self, sql: str, prepare: bool | None = None) -> list[tuple[Any, ...]]:
        try:
            cur = await self.conn.execute(sql, prepare=prepare)
            return list(await cur.fetchall()) if cur.description else []
        except psycopg.Error as exc:
            raise ServerError(_sqlstate(exc), str(exc).strip()) from exc

    async def execute(self, sql: str) -> None:
        await self._run(tag(sql))

    async def fetchval(self, sql: str) -> Any:
        rows = await self._run(tag(sql))
        return rows[0][0] if rows else None

    async def fetchall(self, sql: str) -> list[tuple[Any, ...]]:
        return await self._run(tag(sql))

    async def prepared_fetchval(self, sql: str) -> Any:
        # execute(prepare=True): psycopg prepares a named statement (_pg3_N) at once.
        rows = await self._run(sql, prepare=True)
        return rows[0][0] if rows else None

    def reported(self, name: str) -> str | None:
        return self.conn.info.parameter_status(name)

    async def wait_for_notifications(self, seconds: float) -> list[Notification]:
        return await _poll(self, seconds)

    async def close(self) -> None:
        await self.conn.close()


class _RecordingConnection(asyncpg.Connection):  # type: ignore[misc]
    """asyncpg only hands notifications to channels it LISTENed on; record them all."""

    def _process_notification(self, pid: int, channel: str, payload: str) -> None:
        self._leakcheck_seen.append(Notification(channel, payload))

    _leakcheck_seen: list[Notification]


@dataclass
class AsyncpgClient:
    label: str
    conn: Any
    notifications: list[Notification] = field(default_factory=list)

    @classmethod
    async def connect(cls, label: str, endpoint: Endpoint) -> AsyncpgClient:
        conn = await asyncpg.connect(
            host=endpoint.host, port=endpoint.port, user=endpoint.user, database=endpoint.dbname,
            timeout=10, connection_class=_RecordingConnection,
        )
        client = cls(label, conn)
        conn._leakcheck_seen = client.notifications
        return client

    async def _call(self, method: str, sql: str) -> Any:
        try:
            return await getattr(self.conn, method)(sql)
        except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise ServerError(_sqlstate(exc), str(exc).strip()) from exc

    async def execute(self, sql: str) -> None:
        await self._call("execute", tag(sql))

    async def fetchval(self, sql: str) -> Any:
        return await self._call("fetchval", tag(sql))

    async def fetchall(self, sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in await self._call("fetch", tag(sql))]

    async def prepared_fetchval(self, sql: str) -> Any:
        # fetchval goes through asyncpg's statement cache: a named __asyncpg_stmt_N__ reused.
        return await self._call("fetchval", sql)

    def reported(self, name: str) -> str | None:
        try:
            return str(getattr(self.conn.get_settings(), name))
        except AttributeError:
            return None

    async def wait_for_notifications(self, seconds: float) -> list[Notification]:
        return await _poll(self, seconds)

    async def close(self) -> None:
        await self.conn.close(timeout=5)


async def _poll(client: Client, seconds: float) -> list[Notification]:
    """Wait up to `seconds`, running a trivial query now and then: the same for both drivers,
    since through a pooler a client only receives while it is linked to a server."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        await client.execute("SELECT 1")
        if client.notifications or asyncio.get_running_loop().time() >= deadline:
            return list(client.notifications)
        await asyncio.sleep(0.05)


async def connect(driver: Driver, label: str, endpoint: Endpoint) -> Client:
    if driver is Driver.PSYCOPG:
        return await PsycopgClient.connect(label, endpoint)
    return await AsyncpgClient.connect(label, endpoint)
