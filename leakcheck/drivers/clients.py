"""Two real drivers behind one small async interface, so every probe runs on both.

Each client is one application: its driver keeps its defaults (psycopg's prepare_threshold,
asyncpg's statement cache) and its own driver state, as in a fresh application process. asyncpg
numbers its statements with a process-wide counter (`__asyncpg_stmt_N__`); two clients in one
Python process would never collide by name, which two application processes do. So each asyncpg
client numbers its statements from 1 on its own, exactly as the only connection of a fresh
process does (tests/servers/test_fresh_process.py checks this against two real processes).

The harness's own statements (`query`, `execute`) add no driver state: psycopg runs them with
prepare=False, asyncpg as fetch() runs a text longer than its max_cacheable_statement_size (the
unnamed statement), so neither prepares a named statement. Only `prepared` takes the driver's prepared path, on purpose.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib.metadata
import inspect
import os
import select
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.copy import AsyncLibpqWriter

from leakcheck.drivers.agents.catalogue import Shipped, known_drivers, shipped
from leakcheck.drivers.agents.client import AgentClient
from leakcheck.drivers.agents.team import registered
from leakcheck.drivers.cancel import CANCEL_TIMEOUT, send_cancel_request
from leakcheck.drivers.interface import Client, CopyIn, Notification, Piped, PipedResult, Pipelined, Row, ServerError
from leakcheck.drivers.settings import native_values
from leakcheck.model.errors import NotApplicable, UsageError
from leakcheck.model.faults import NO_SQLSTATE
from leakcheck.model.target import Driver, Setting
from leakcheck.model.versions import Version, version_in_output
from leakcheck.provision.base import Endpoint
from leakcheck.provision.dsn_backend import CONNECT_TIMEOUT, connect_timeout, without_connect_timeout
from leakcheck.provision.host.proc_sockets import Ends
from leakcheck.provision.host.timing import timed


def _sqlstate(exc: BaseException) -> str:
    return str(getattr(exc, "sqlstate", None) or NO_SQLSTATE)


#: Whether this psycopg's copy writer takes flush_threshold (psycopg 3.2 on; 3.1's writes what it is given).
_FLUSH_THRESHOLD = "flush_threshold" in inspect.signature(AsyncLibpqWriter.__init__).parameters

#: Seconds a pipeline has to bring back its results up to its Sync.
PIPELINE_BOUND = 10.0


def _pipelined(pgconn: Any, commands: tuple[Piped, ...], bound: float) -> Pipelined:
    """`commands` in one libpq pipeline, then its Sync (blocking: run in a thread, under the connection's
    lock): libpq's results for each command, in order, and whether the connection is stuck in pipeline
    mode (libpq still waits for results after the Sync's)."""
    pq = psycopg.pq
    pgconn.enter_pipeline_mode()
    for c in commands:
        if c.op == "prepare":
            pgconn.send_prepare(c.name.encode(), c.sql.encode())
        elif c.op == "close":
            pgconn.send_close_prepared(c.name.encode())
        else:
            pgconn.send_query_prepared(c.name.encode(), [])
    pgconn.pipeline_sync()
    deadline = time.monotonic() + bound
    while pgconn.flush():
        select.select([], [pgconn.socket], [], max(0.0, deadline - time.monotonic()))
    per: list[list[Any]] = [[]]
    while True:
        if pgconn.is_busy():
            left = deadline - time.monotonic()
            if left <= 0:
                return Pipelined(_results(per, commands), f"no Sync came back within {bound:.0f} s")
            select.select([pgconn.socket], [], [], min(left, 0.1))
            pgconn.consume_input()
            continue
        result = pgconn.get_result()
        if result is None:
            per.append([])
        elif result.status == pq.ExecStatus.PIPELINE_SYNC:
            break
        else:
            per[-1].append(result)
    try:
        pgconn.exit_pipeline_mode()
    except psycopg.Error as exc:
        return Pipelined(_results(per, commands), f"libpq: {exc}")
    return Pipelined(_results(per, commands))


def _results(per: list[list[Any]], commands: tuple[Piped, ...]) -> tuple[PipedResult, ...]:
    """Each command's first libpq result, in words (what comes after the last command's is left out)."""
    out = []
    for i in range(len(commands)):
        results = per[i] if i < len(per) else []
        if not results:
            out.append(PipedResult("no result"))
            continue
        r = results[0]
        status = psycopg.pq.ExecStatus(r.status).name
        if r.status == psycopg.pq.ExecStatus.FATAL_ERROR:
            state = r.error_field(psycopg.pq.DiagnosticField.SQLSTATE) or NO_SQLSTATE.encode()
            first = (r.error_message or b"").decode(errors="replace").strip().splitlines()[:1]
            out.append(PipedResult(status, error=f"{state.decode()}: {''.join(first)}"))
            continue
        value = r.get_value(0, 0) if r.ntuples and r.nfields else None
        out.append(PipedResult(status, None if value is None else value.decode()))
    return tuple(out)


@dataclass
class PsycopgClient:
    label: str
    conn: psycopg.AsyncConnection[Any]
    notifications: list[Notification] = field(default_factory=list)
    statement_names: str = "name LIKE '\\_pg3\\_%'"
    settings: tuple[Setting, ...] = ()
    _tx: Any = None  #: the transaction begin() opened

    @classmethod
    async def connect(cls, label: str, endpoint: Endpoint, settings: tuple[Setting, ...] = (),
                      startup: tuple[str, str] | None = None, protocol: str | None = None) -> PsycopgClient:
        # a startup parameter, libpq's way: the startup packet's `options` (-c name=value)
        conninfo = endpoint.conninfo()
        if startup:
            conninfo = make_conninfo(conninfo, options=f"-c {startup[0]}={startup[1]}")
        timeout = connect_timeout(endpoint.dsn) if endpoint.dsn else CONNECT_TIMEOUT  # a DSN's own, if it says
        if protocol:  # libpq 18's max_protocol_version: the newest version the connection may negotiate
            if psycopg.pq.version() < 180000:
                raise NotApplicable(f"psycopg's libpq {psycopg.pq.version()} cannot ask for protocol {protocol}: "
                                    "max_protocol_version is libpq 18's")
            conninfo = make_conninfo(conninfo, max_protocol_version=protocol)
        conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, connect_timeout=timeout)
        for name, value in native_values(Driver.PSYCOPG, settings).items():
            setattr(conn, name, value)  # prepare_threshold, prepared_max: the connection's own attributes
        client = cls(label, conn, settings=settings)
        conn.add_notify_handler(lambda n: client.notifications.append(Notification(n.channel, n.payload)))
        return client

    async def _run(self, sql: str, prepare: bool) -> list[Row]:
        try:
            with timed("statements"):
                cur = await self.conn.execute(sql, prepare=prepare)
                return list(await cur.fetchall()) if cur.description else []
        except psycopg.Error as exc:
            raise ServerError(_sqlstate(exc), str(exc).strip(), closed=self.conn.closed) from exc

    async def query(self, sql: str) -> list[Row]:
        return await self._run(sql, prepare=False)

    async def execute(self, sql: str) -> None:
        await self._run(sql, prepare=False)

    async def prepared(self, sql: str) -> list[Row]:
        # execute(prepare=True): psycopg prepares a named statement (_pg3_N) at once.
        return await self._run(sql, prepare=True)

    async def begin(self) -> None:
        # psycopg's transaction(), entered here and left by commit/rollback (psycopg.Rollback to roll back)
        tx = self.conn.transaction()
        await self._guard(lambda: tx.__aenter__())
        self._tx = tx  # only once entered: a context that failed to enter cannot be left (its generator is done)

    async def commit(self) -> None:
        tx, self._tx = self._tx, None
        await self._guard(lambda: tx.__aexit__(None, None, None) if tx is not None else self.conn.execute("COMMIT"))

    async def rollback(self) -> None:
        tx, self._tx = self._tx, None
        if tx is None:
            await self._guard(lambda: self.conn.execute("ROLLBACK"))
            return
        await self._guard(lambda: tx.__aexit__(psycopg.Rollback, psycopg.Rollback(), None))

    async def free(self, sql: str) -> None:
        raise NotApplicable("psycopg has no call to free one prepared statement (its cache drops them itself)")

    async def bind(self, name: str) -> list[Row]:
        # libpq's PQexecPrepared, psycopg's pq API: Bind/Execute of a statement by name, no Parse.
        async with self.conn.lock:
            try:
                res = await asyncio.to_thread(self.conn.pgconn.exec_prepared, name.encode(), [])
            except psycopg.Error as exc:  # libpq could not send it: the connection is gone (an earlier bind closed it)
                raise ServerError(_sqlstate(exc), str(exc).strip(), closed=self.conn.pgconn.status != 0) from exc
        if res.status in (psycopg.pq.ExecStatus.TUPLES_OK, psycopg.pq.ExecStatus.COMMAND_OK):
            cells = ((res.get_value(r, c) for c in range(res.nfields)) for r in range(res.ntuples))
            return [tuple(None if v is None else v.decode() for v in row) for row in cells]
        state = res.error_field(psycopg.pq.DiagnosticField.SQLSTATE)
        message = (res.error_message or b"").decode(errors="replace").strip()
        raise ServerError(state.decode() if state else NO_SQLSTATE, message, closed=self.conn.pgconn.status != 0)

    async def _guard(self, call: Callable[[], Awaitable[Any]]) -> None:
        """The driver's call, its errors as ServerError (made inside: some raise before they await)."""
        try:
            with timed("statements"):
                await call()
        except psycopg.Error as exc:
            raise ServerError(_sqlstate(exc), str(exc).strip(), closed=self.conn.closed) from exc

    async def copy_in(self, copy: CopyIn) -> None:
        async def send() -> None:
            # flush_threshold=0: every write is flushed to the server before the next (psycopg.copy's own writer,
            # as an application that streams a file sets it); psycopg before 3.2 has no such setting, and its
            # application copies with the writer it has
            async with self.conn.cursor() as cur, cur.copy(copy.sql, writer=(
                    AsyncLibpqWriter(cur, flush_threshold=0) if _FLUSH_THRESHOLD else AsyncLibpqWriter(cur))) as stream:
                await stream.write(copy.first.encode())
                await copy.paused()
                rows = copy.rows.encode()
                for _ in range(copy.times):
                    await stream.write(rows)

        await self._guard(send)

    async def pipeline(self, commands: tuple[Piped, ...]) -> Pipelined:
        # libpq's pipeline mode through psycopg's libpq wrapper (psycopg.pq), as psycopg's own pipeline sends
        # it; psycopg's high-level pipeline sends a Close only for a statement its cache evicts
        if any(c.op == "close" for c in commands):
            capabilities: Any = getattr(psycopg, "capabilities", None)  # psycopg 3.2's
            if capabilities is None:
                raise NotApplicable(f"psycopg {psycopg.__version__} cannot send a Close message (its libpq "
                                    "wrapper has send_close_prepared from psycopg 3.2)")
            if not capabilities.has_send_close_prepared():
                raise NotApplicable(f"psycopg's libpq {psycopg.pq.version()} cannot send a Close message "
                                    "(PQsendClosePrepared is libpq 17's)")
        async with self.conn.lock:
            with timed("statements"):
                return await asyncio.to_thread(_pipelined, self.conn.pgconn, commands, PIPELINE_BOUND)

    def protocol(self) -> str | None:
        full = int(getattr(self.conn.pgconn, "full_protocol_version", 0) or self.conn.pgconn.protocol_version * 10000)
        return f"{full // 10000}.{full % 10000}"

    def reported(self, name: str) -> str | None:
        return self.conn.info.parameter_status(name)

    def connections(self) -> set[Ends]:
        try:
            fd = self.conn.pgconn.socket
        except psycopg.OperationalError:  # closed
            return set()
        return _ends(lambda: _socket_ends(fd))

    def alias(self, label: str) -> PsycopgClient:
        return dataclasses.replace(self, label=label)  # same connection, same notification list

    async def cancel(self) -> bool:
        # psycopg's own (libpq's PQcancelConn): the key of this connection, whether or not a query runs.
        # psycopg before 3.2 has no cancel_safe(): its cancel() is libpq's blocking PQcancel, in a thread.
        # Both return once the peer closed the cancel connection ("its way of communicating that the
        # cancel has been handled", libpq's PQcancelPoll).
        safe = getattr(self.conn, "cancel_safe", None)
        try:
            if safe is not None:
                await safe(timeout=CANCEL_TIMEOUT)
            else:
                await asyncio.wait_for(asyncio.to_thread(self.conn.cancel), CANCEL_TIMEOUT)
        except psycopg.Error as exc:
            raise ServerError(_sqlstate(exc), f"psycopg's cancel failed: {exc}") from exc
        return True

    async def close(self) -> None:
        await self.conn.close()


class _AppConnection(asyncpg.Connection):  # type: ignore[misc]
    """asyncpg as in a fresh application process: statement names counted per connection from 1;
    every notification recorded (asyncpg only hands out those of channels it LISTENed on itself)."""

    _leakcheck_seen: list[Notification]
    _leakcheck_uid: int = 0

    def _get_unique_id(self, prefix: str) -> str:
        # asyncpg's own: a module-global counter, i.e. one per process.
        self._leakcheck_uid += 1
        return f"__asyncpg_{prefix}_{self._leakcheck_uid:x}__"

    def _process_notification(self, pid: int, channel: str, payload: str) -> None:
        self._leakcheck_seen.append(Notification(channel, payload))


@dataclass
class AsyncpgClient:
    label: str
    conn: Any
    notifications: list[Notification] = field(default_factory=list)
    statement_names: str = "name LIKE '\\_\\_asyncpg\\_%'"
    settings: tuple[Setting, ...] = ()
    _tx: Any = None  #: the transaction begin() started

    @classmethod
    async def connect(cls, label: str, endpoint: Endpoint, settings: tuple[Setting, ...] = (),
                      startup: tuple[str, str] | None = None) -> AsyncpgClient:
        given = native_values(Driver.ASYNCPG, settings)  # statement_cache_size etc.: connect's own arguments
        if startup:  # a startup parameter, asyncpg's way: server_settings, each one its own (name=value)
            given = {**given, "server_settings": {startup[0]: startup[1]}}
        if endpoint.dsn:
            # asyncpg would send a connect_timeout in the URI to the server as a setting: its `timeout` is that
            conn = await asyncpg.connect(dsn=without_connect_timeout(endpoint.dsn),
                                         timeout=connect_timeout(endpoint.dsn), connection_class=_AppConnection,
                                         **given)
        else:  # asyncpg's own TLS default (prefer), as an application connects: a team's ini may set
            # client_tls_sslmode=require, which ssl=False would turn into a refused login (it costs 2-4 ms a
            # connect against a pooler that speaks no TLS: the SSLRequest it refuses)
            conn = await asyncpg.connect(
                host=endpoint.host, port=endpoint.port, user=endpoint.user, password=endpoint.password or None,
                database=endpoint.dbname, timeout=CONNECT_TIMEOUT, connection_class=_AppConnection, **given,
            )
        client = cls(label, conn, settings=settings)
        conn._leakcheck_seen = client.notifications
        return client

    async def _fetch_unnamed(self, sql: str) -> list[Any]:
        """fetch() of a statement asyncpg's cache does not take: the unnamed statement's Parse and Describe, then
        Bind and Execute, the messages fetch() sends for a text longer than max_cacheable_statement_size. (The
        harness padded its text past that size: 15 KB more a statement for the pooler to relay and the server to
        keep, and for every witness look on that server to copy and search: `_get_statement`'s use_cache=False is
        the same path without the padding.)"""
        conn = self.conn
        conn._check_open()
        timeout = conn._protocol._get_timeout(None)  # as fetch(): a command_timeout, if one was given (None here)
        with conn._stmt_exclusive_section:
            stmt = await conn._get_statement(sql, timeout, use_cache=False)
            return list(await conn._protocol.bind_execute(state=stmt, args=(), portal_name="", limit=0,
                                                          return_extra=False, timeout=timeout))

    async def _call(self, method: str, sql: str) -> Any:
        run = self._fetch_unnamed if method == "unnamed" else getattr(self.conn, method)
        try:
            with timed("statements"):
                return await run(sql)
        # InternalClientError: asyncpg's protocol after the server ended the connection mid-operation
        # (e.g. idle_in_transaction_session_timeout): a closed connection, as psycopg reports it.
        except (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.exceptions.InternalClientError) as exc:
            raise ServerError(_sqlstate(exc), str(exc).strip(), closed=self.conn.is_closed()) from exc

    async def query(self, sql: str) -> list[Row]:
        return [tuple(r) for r in await self._call("unnamed", sql)]

    async def execute(self, sql: str) -> None:
        await self._call("execute", sql)  # no arguments: the simple query protocol, nothing prepared

    async def prepared(self, sql: str) -> list[Row]:
        # fetch goes through asyncpg's statement cache: a named __asyncpg_stmt_N__, reused.
        return [tuple(r) for r in await self._call("fetch", sql)]

    async def begin(self) -> None:
        tx = self.conn.transaction()
        await self._guard(lambda: tx.start())
        self._tx = tx  # only once started: the commit or rollback of a failed start is the plain statement's

    async def commit(self) -> None:
        tx, self._tx = self._tx, None
        await self._guard(lambda: tx.commit() if tx is not None else self.conn.execute("COMMIT"))

    async def rollback(self) -> None:
        tx, self._tx = self._tx, None
        await self._guard(lambda: tx.rollback() if tx is not None else self.conn.execute("ROLLBACK"))

    async def free(self, sql: str) -> None:
        raise NotApplicable("asyncpg has no call to free one statement of its cache")

    async def bind(self, name: str) -> list[Row]:
        raise NotApplicable("asyncpg has no call to execute a statement by name it did not prepare itself")

    async def copy_in(self, copy: CopyIn) -> None:
        async def rows() -> AsyncIterator[bytes]:
            yield copy.first.encode()  # asyncpg sends each item as it comes
            await copy.paused()
            body = copy.rows.encode()
            for _ in range(copy.times):
                yield body

        # copy_to_table writes the COPY statement itself: COPY "table"(columns) FROM STDIN
        await self._guard(lambda: self.conn.copy_to_table(copy.table, source=rows(), columns=list(copy.columns)))

    async def pipeline(self, commands: tuple[Piped, ...]) -> Pipelined:
        raise NotApplicable("asyncpg has no call that sends Parse and Close messages in one batch: its public API "
                            "has no pipeline")

    def protocol(self) -> str | None:
        return None

    async def _guard(self, call: Callable[[], Awaitable[Any]]) -> None:
        """The driver's call, its errors as ServerError (asyncpg's guarded methods raise before they await)."""
        try:
            with timed("statements"):
                await call()
        except (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.exceptions.InternalClientError) as exc:
            raise ServerError(_sqlstate(exc), str(exc).strip(), closed=self.conn.is_closed()) from exc

    def reported(self, name: str) -> str | None:
        try:
            return str(getattr(self.conn.get_settings(), name))
        except AttributeError:
            return None

    def connections(self) -> set[Ends]:
        transport = getattr(self.conn, "_transport", None)  # asyncpg's own, of its one connection
        if transport is None or transport.is_closing():
            return set()
        return _ends(lambda: (transport.get_extra_info("sockname"), transport.get_extra_info("peername")))

    def alias(self, label: str) -> AsyncpgClient:
        return dataclasses.replace(self, label=label)

    async def cancel(self) -> bool:
        # asyncpg's public cancel is cancelling the awaiting task, which hides the server's answer
        # (57014) and needs a query running; its Connection._cancel sends exactly this packet with the
        # BackendKeyData its protocol kept, to the address it connected to.
        addr, protocol = self.conn._addr, self.conn._protocol
        if not isinstance(addr, tuple):
            raise NotApplicable(f"asyncpg is connected over a Unix socket ({addr}); leakcheck cancels over TCP only")
        try:
            await send_cancel_request(addr[0], addr[1], protocol.backend_pid, protocol.backend_secret)
        except (OSError, TimeoutError) as exc:
            raise ServerError("08006", f"the cancel request to {addr[0]}:{addr[1]} failed: {exc!r}") from exc
        return True  # send_cancel_request returns once the peer closed the connection, as asyncpg's own

    async def close(self) -> None:
        if not self.conn.is_closed():
            await self.conn.close(timeout=5)


@functools.cache
def driver_version(driver: Driver) -> Version | None:
    """The installed release of the driver (part of every cell: ids, keys, reports). An agent's is
    the one its own `hello` reported when it was installed into the cache (installed here if needed)."""
    if not driver.native:
        from leakcheck.drivers.agents.install import installed  # agents import this module (ServerError, Notification)
        from leakcheck.drivers.agents.team import registered

        team = registered(driver.value)
        return team.release if team is not None else installed(_shipped(driver).spec).release
    try:
        return version_in_output(importlib.metadata.version(driver.value))
    except importlib.metadata.PackageNotFoundError:
        return None


def _shipped(driver: Driver) -> Shipped:
    found = shipped(driver.value)
    if found is None:
        raise UsageError(f"no driver {driver.value!r}: leakcheck drives {', '.join(known_drivers())}")
    return found


async def connect(driver: Driver, label: str, endpoint: Endpoint, settings: tuple[Setting, ...] = (),
                  startup: tuple[str, str] | None = None, protocol: str | None = None) -> Client:
    """One application connection of `driver`, with the cell's driver settings (drivers/settings.py);
    `startup` (name, value) is a setting sent in its startup packet, the driver's way; `protocol` the
    newest protocol version it asks for (NotApplicable where the driver cannot ask)."""
    with timed("connects"):
        return await _connect(driver, label, endpoint, settings, startup, protocol)


async def _connect(driver: Driver, label: str, endpoint: Endpoint, settings: tuple[Setting, ...],
                   startup: tuple[str, str] | None, protocol: str | None) -> Client:
    if driver == Driver.PSYCOPG:
        return await PsycopgClient.connect(label, endpoint, settings, startup, protocol)
    if driver == Driver.ASYNCPG:
        if protocol:
            raise NotApplicable(f"asyncpg speaks protocol 3.0 only: it has no way to ask for {protocol}")
        return await AsyncpgClient.connect(label, endpoint, settings, startup)
    team = registered(driver.value)
    found = team.shipped() if team is not None else _shipped(driver)
    start = team.start if team is not None else None
    chosen = found.startup_settings(startup) if startup else None
    if protocol:
        raise NotApplicable(f"the {driver.value} agent cannot ask for protocol {protocol}: {found.protocols}")
    if start is not None:
        return await AgentClient.open(found, start, label, endpoint, settings, chosen)
    return await AgentClient.connect(found, label, endpoint, settings, chosen)


def _socket_ends(fd: int) -> tuple[Any, Any]:
    """A socket's own and its peer's address, read on a duplicate of its descriptor (the driver keeps its own)."""
    with socket.socket(fileno=os.dup(fd)) as sock:
        return sock.getsockname(), sock.getpeername()


def _ends(read: Callable[[], tuple[Any, Any]]) -> set[Ends]:
    """The one TCP connection whose ends `read` gives ((address, port, ...) each), else none (a Unix socket's are
    paths; a connection that closed meanwhile has none)."""
    try:
        near, far = read()
    except OSError:
        return set()
    if not (isinstance(near, tuple) and isinstance(far, tuple)):
        return set()
    return {(str(near[0]), int(near[1]), str(far[0]), int(far[1]))}
