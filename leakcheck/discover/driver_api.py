"""What discovery asks of a driver beyond the `Client` API (drivers/interface.py, which offers every client's
prepared path, free, bind and transaction API): a statement with a bound parameter, the application's
ordinary way to pass a value, and which of the optional calls a driver has.

psycopg: `conn.execute(sql, params)` (its prepare threshold); asyncpg: `conn.fetch(sql, *params)` (its
statement cache). An agent has no bound-parameter op; whether it can free a statement or execute one by a
name it did not prepare is asked of the agent itself (`abilities`).
"""

from __future__ import annotations

from collections.abc import Awaitable

import asyncpg
import psycopg

from leakcheck.discover.ops import Abilities
from leakcheck.drivers.clients import AsyncpgClient, PsycopgClient, connect
from leakcheck.drivers.interface import Client, Row, ServerError
from leakcheck.model.errors import NotApplicable
from leakcheck.model.faults import NO_SQLSTATE
from leakcheck.model.target import Driver, Setting
from leakcheck.provision.base import Endpoint

#: asyncpg's errors, as clients.py takes them (InternalClientError: its protocol after the server ended the connection)
_ASYNCPG_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.exceptions.InternalClientError)


def _server_error(exc: BaseException, closed: bool) -> ServerError:
    return ServerError(str(getattr(exc, "sqlstate", None) or NO_SQLSTATE), str(exc).strip(), closed=closed)


async def bound(client: Client, sql: str, params: tuple[str, ...]) -> list[Row]:
    """`sql` with $1.. bound, the driver's default way (psycopg: its prepare threshold; asyncpg: its
    statement cache), as an application passes a parameter."""
    if isinstance(client, PsycopgClient):
        try:
            cur = await client.conn.execute(sql.replace("$1", "%s"), params)
            return list(await cur.fetchall()) if cur.description else []
        except psycopg.Error as exc:
            raise _server_error(exc, client.conn.closed) from exc
    if isinstance(client, AsyncpgClient):
        try:
            return [tuple(r) for r in await client.conn.fetch(sql, *params)]
        except _ASYNCPG_ERRORS as exc:
            raise _server_error(exc, client.conn.is_closed()) from exc
    raise TypeError(f"no bound-parameter call for {type(client).__name__}")


async def _offers(call: Awaitable[object]) -> bool:
    """Whether the driver has the call: NotApplicable (its words that it has none) is no; a server's error is yes."""
    try:
        await call
    except NotApplicable:
        return False
    except ServerError:
        return True
    return True


async def abilities(driver: Driver, endpoint: Endpoint, settings: tuple[Setting, ...] = ()) -> Abilities:
    """What the driver's API offers, asked of the driver itself on `endpoint`: a bound parameter (the
    native drivers), freeing the statement it just prepared (`Client.free`), executing a statement by a
    name it did not prepare (`Client.bind`, of a name that does not exist: an error says it has the call)."""
    client = await connect(driver, "A", endpoint, settings)
    try:
        sql = "SELECT 1 AS leakcheck_free_check"
        try:
            await client.prepared(sql)
        except NotApplicable:  # its settings never prepare (Django's defaults): no prepared path, nothing to free
            bind = await _offers(client.bind("leakcheck_no_such_statement"))
            return Abilities(bound=driver.native, free=False, bind=bind, prepared=False)
        free = await _offers(client.free(sql))
        bind = await _offers(client.bind("leakcheck_no_such_statement"))
        return Abilities(bound=driver.native, free=free, bind=bind)
    finally:
        await client.close()
