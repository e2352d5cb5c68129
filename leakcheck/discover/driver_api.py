"""The driver's own API beyond plain SQL, for discovery's driver-level ops: a statement with a bound
parameter, freeing a prepared statement, and the transaction API, for each kind of client.

psycopg: `conn.execute(sql, params)` (its prepare threshold), `conn.transaction()` entered and left
by hand (left with `psycopg.Rollback` to roll back), no public way to free one statement. asyncpg:
`conn.fetch(sql, *params)` (its statement cache), `conn.transaction()` with start/commit/rollback, no
public way to free one statement. An agent: the protocol's `free`, `begin`, `commit`, `rollback`;
it has no bound-parameter op, and whether it can `free` is asked of the agent itself (`abilities`).
"""

from __future__ import annotations

from typing import Any

import asyncpg
import psycopg

from leakcheck.discover.lab import Endpoint
from leakcheck.discover.ops import Abilities
from leakcheck.drivers.agents.client import AgentClient
from leakcheck.drivers.clients import AsyncpgClient, Client, PsycopgClient, Row, ServerError, connect
from leakcheck.model.errors import NotApplicable
from leakcheck.model.faults import NO_SQLSTATE
from leakcheck.model.target import Setting
from leakcheck.model.verdicts import Driver

_ERRORS = (psycopg.Error, asyncpg.PostgresError, asyncpg.InterfaceError)


def _server_error(exc: BaseException) -> ServerError:
    return ServerError(str(getattr(exc, "sqlstate", None) or NO_SQLSTATE), str(exc).strip())


async def bound(client: Client, sql: str, params: tuple[str, ...]) -> list[Row]:
    """`sql` with $1.. bound, the driver's default way (psycopg: its prepare threshold; asyncpg: its
    statement cache), as an application passes a parameter."""
    try:
        if isinstance(client, PsycopgClient):
            cur = await client.conn.execute(sql.replace("$1", "%s"), params)
            return list(await cur.fetchall()) if cur.description else []
        if isinstance(client, AsyncpgClient):
            return [tuple(r) for r in await client.conn.fetch(sql, *params)]
    except _ERRORS as exc:
        raise _server_error(exc) from exc
    raise TypeError(f"no bound-parameter call for {type(client).__name__}")


async def free(client: Client, sql: str) -> None:
    """The driver frees the statement it prepared for `sql` (only drivers whose abilities say so)."""
    if not isinstance(client, AgentClient):
        raise TypeError(f"{type(client).__name__} has no API to free one statement")
    await client.free(sql)


class Transactions:
    """The transactions one sequence's clients opened through their driver's API, by client."""

    def __init__(self) -> None:
        self._open: dict[str, Any] = {}

    async def begin(self, key: str, client: Client) -> None:
        try:
            if isinstance(client, PsycopgClient):
                tx = client.conn.transaction()
                await tx.__aenter__()
                self._open[key] = tx
            elif isinstance(client, AsyncpgClient):
                tx = client.conn.transaction()
                await tx.start()
                self._open[key] = tx
            elif isinstance(client, AgentClient):
                await client.transaction("begin")
            else:
                raise TypeError(f"no transaction API for {type(client).__name__}")
        except _ERRORS as exc:
            raise _server_error(exc) from exc

    async def end(self, key: str, client: Client, commit: bool) -> None:
        tx = self._open.pop(key, None)
        if tx is None and not isinstance(client, AgentClient):  # its begin failed: nothing of the driver's is open
            await client.execute("COMMIT" if commit else "ROLLBACK")
            return
        try:
            if isinstance(client, PsycopgClient):
                rollback = psycopg.Rollback()
                await (tx.__aexit__(None, None, None) if commit else tx.__aexit__(psycopg.Rollback, rollback, None))
            elif isinstance(client, AsyncpgClient):
                await (tx.commit() if commit else tx.rollback())
            elif isinstance(client, AgentClient):
                await client.transaction("commit" if commit else "rollback")
            else:
                raise TypeError(f"no transaction API for {type(client).__name__}")
        except _ERRORS as exc:
            raise _server_error(exc) from exc


async def abilities(driver: Driver, endpoint: Endpoint, settings: tuple[Setting, ...] = ()) -> Abilities:
    """What the driver's API offers: the native drivers' are known; an agent is asked, on `endpoint`,
    to prepare and free one statement (answered `unsupported`: it cannot free; a prepared run that is not
    applicable, an ORM whose settings never prepare: it has no prepared path)."""
    if driver.native:
        return Abilities(bound=True, free=False)
    client = await connect(driver, "A", endpoint, settings)
    try:
        sql = "SELECT 1 AS leakcheck_free_check"
        try:
            await client.prepared(sql)
        except NotApplicable:
            return Abilities(bound=False, free=False, prepared=False)
        try:
            await free(client, sql)
        except NotApplicable:  # the agent answered `unsupported`: it has no call to free one
            return Abilities(bound=False, free=False)
        return Abilities(bound=False, free=True)
    finally:
        await client.close()
