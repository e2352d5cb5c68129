"""The one small async interface every client is, whatever its driver (`Client`), and what goes through it:
rows, notifications, a COPY, a pipeline, a server's error. The in-process drivers (clients.py) and the agents
(agents/client.py) fill it; the probes use only it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from leakcheck.model.faults import NO_SQLSTATE
from leakcheck.model.target import Setting
from leakcheck.provision.host.proc_sockets import Ends


class ServerError(Exception):
    """A statement failed; the driver's error reduced to SQLSTATE and message, and whether the
    client's connection was closed after it (faults.py: a session end)."""

    def __init__(self, sqlstate: str, message: str, closed: bool = False) -> None:
        first = message.strip().splitlines()[0] if message.strip() else ""
        super().__init__(f"{sqlstate}: {first}" if sqlstate != NO_SQLSTATE else f"without SQLSTATE: {first}")
        self.sqlstate = sqlstate
        self.message = first
        self.closed = closed


@dataclass
class Notification:
    channel: str
    payload: str


Row = tuple[Any, ...]


@dataclass(frozen=True)
class CopyIn:
    """What a client sends with COPY ... FROM STDIN (text format): `first`, sent on at once (flushed); then,
    once `settled` returns (the harness has seen the server fail the COPY, or its bound passed), else `pause`
    seconds later (an agent's copy whose agent takes no `go`), `rows` `times` times; then the copy's end."""

    sql: str  #: the statement, for a driver whose copy API takes one
    table: str  #: the table and its columns, for a driver whose copy API writes the statement itself
    columns: tuple[str, ...]
    first: str
    rows: str
    times: int
    pause: float = 0.0
    #: the harness's wait for the server's failure of the COPY: how long after it began the server was seen
    #: to fail it (the pause ends then), None at its bound, unseen
    settled: Callable[[], Awaitable[float | None]] | None = field(default=None, compare=False, repr=False)
    #: what `settled` returned, where the client's pause ended on it (the probe's evidence says so)
    seen: list[float] = field(default_factory=list, compare=False, repr=False)

    async def paused(self) -> None:
        """The wait between `first` and the rest, in a client of leakcheck's own process."""
        if self.settled is None:
            await asyncio.sleep(self.pause)
        elif (when := await self.settled()) is not None:
            self.seen.append(when)


@dataclass(frozen=True)
class Piped:
    """One command of a pipeline (no Sync until its end): `prepare` `name` as `sql`, `close` the statement
    `name`, or `execute` it."""

    op: str
    name: str
    sql: str = ""


@dataclass(frozen=True)
class PipedResult:
    """What the driver gave back for one command of a pipeline, in its own words: `status` (libpq's
    ExecStatus name, or `no result`), `value` (the first column of the first row), `error`."""

    status: str
    value: Any = None
    error: str | None = None

    def __str__(self) -> str:
        shown = self.error or (repr(self.value) if self.value is not None else None)
        return f"{self.status} ({shown})" if shown else self.status


@dataclass(frozen=True)
class Pipelined:
    """A pipeline's results, one per command, and why the connection could not leave pipeline mode after
    its Sync, if it could not (libpq still waits for results: the application can only drop it)."""

    results: tuple[PipedResult, ...]
    stuck: str | None = None


class Client(Protocol):
    """One application connection, as a probe sees it."""

    label: str
    #: a SQL condition on pg_prepared_statements.name: the names this client's driver gives its statements
    statement_names: str
    #: the driver settings it was connected with that differ from the driver's defaults (--driver-set)
    settings: tuple[Setting, ...]

    @property
    def notifications(self) -> list[Notification]:
        """The notifications its driver delivered, in order; NotApplicable where the driver delivers none
        on an ordinary connection (sqlx: only its PgListener does)."""
        ...

    async def query(self, sql: str) -> list[Row]: ...
    async def execute(self, sql: str) -> None: ...
    async def prepared(self, sql: str) -> list[Row]: ...

    async def begin(self) -> None:
        """The driver's transaction API: open one (psycopg `transaction()`, asyncpg `transaction().start()`,
        an agent's `begin`)."""
        ...

    async def commit(self) -> None: ...
    async def rollback(self) -> None: ...

    async def free(self, sql: str) -> None:
        """The driver drops the statement it prepared for `sql` its own way; NotApplicable where it has no
        such call (its applications never free one)."""
        ...

    async def bind(self, name: str) -> list[Row]:
        """The driver executes a prepared statement by its name without preparing it (Bind/Execute, no
        Parse): libpq's PQexecPrepared, ruby-pg's exec_prepared, pgx's ExecPrepared; NotApplicable where
        the driver has no such call."""
        ...

    async def copy_in(self, copy: CopyIn) -> None:
        """COPY ... FROM STDIN through the driver's copy API (psycopg `cursor.copy`, asyncpg
        `copy_to_table`, an agent's `copy_in`); NotApplicable where the driver has none."""
        ...

    async def pipeline(self, commands: tuple[Piped, ...]) -> Pipelined:
        """The commands in one pipeline, one Sync at its end (libpq's pipeline mode): what the driver gave
        back for each, in order; NotApplicable where the driver cannot send them so."""
        ...

    def protocol(self) -> str | None:
        """The protocol version the connection speaks (`3.0`, `3.2`), where the driver tells."""
        ...

    def reported(self, name: str) -> str | None: ...

    def connections(self) -> set[Ends]:
        """The TCP connections its driver holds now, each as its own and its peer's address and port (what a
        pooler's SHOW CLIENTS names a client by); empty where none can be read (then no pooler's word is about it)."""
        ...

    def alias(self, label: str) -> Client: ...
    async def close(self) -> None: ...

    async def cancel(self) -> bool:
        """The driver's cancel request for this connection, sent with the key it got at login: it
        stops the statement now running (a `query` awaited elsewhere), or, when none runs, reaches
        whatever that key names now (probes/cancel.py). Returns once it was sent: True when the driver
        returned only once the peer (PostgreSQL or the pooler) had closed the cancel connection, so the
        peer has read the request (libpq waits for that close); False when it may return before.
        NotApplicable when the driver cannot send one."""
        ...
