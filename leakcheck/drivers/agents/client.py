"""`Client` (drivers/interface.py) over an agent process, and the agent processes a run reuses.

An agent is started once per lane and client slot (the lane's thread and the client's label, A, B
or C) and reused by the next probe of that lane, with a fresh connection each time; a lease is
exclusive, so two clients never share an agent process. A driver whose statement names count over
the whole process (catalogue `names_per_process`) would carry its history from probe to probe (on
the shared route only A's agent connects): an agent of it that may have named a statement serves
only the probe it did so in (`next_probe()`, called by the runner as each probe starts, ends the
lane thread's earlier ones), so every probe starts with processes whose counters are where a fresh
process's are. Whether it may have is the agent's own word: its close answer's `named` (the
tokio-postgres agent: true once a named Parse was written, or a driver error where one may have been due;
pgx v4's: false once its close left no connection and it set its driver's counter back to a fresh
process's 0); an agent whose close answer does not say false serves one probe.
`stop_all()` ends every agent at the end of the run, all at once (process.py: each with everything it
started); an agent also ends when its stdin closes (when leakcheck itself ends).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from leakcheck.drivers.agents.catalogue import Shipped
from leakcheck.drivers.agents.install import installed
from leakcheck.drivers.agents.process import (
    STOP_BOUND,
    STOP_TIMEOUT,
    AgentFault,
    AgentProcess,
    AgentRefused,
    stop_every,
    stop_together,
)
from leakcheck.drivers.cancel import int32
from leakcheck.drivers.interface import CopyIn, Notification, Piped, Pipelined, Row, ServerError
from leakcheck.model.errors import DriverRefused, NotApplicable
from leakcheck.model.faults import NO_SQLSTATE
from leakcheck.model.target import Setting
from leakcheck.provision.base import Endpoint
from leakcheck.provision.host.proc_sockets import Ends, tcp_connections
from leakcheck.provision.host.timing import timed

#: Seconds closing a connection may take before the agent is stopped instead of reused.
CLOSE_TIMEOUT = 5.0
#: Seconds a client's close waits for the answer to a call the harness gave up on before the agent is stopped
#: instead: a call held by a stalled pool returns within milliseconds once the harness ended what held it (the
#: server connection left in a transaction ended, the holding client closed first), and its agent then serves
#: the slot's next probe instead of a fresh one (a JVM's start and first connect: ~0.5 s of CPU).
ABANDONED_END = 1.0
#: The longest a client's close takes (`AgentClient.close`): ABANDONED_END for a call the harness gave up on, then
#: CLOSE_TIMEOUT for the close's answer, then, when none came, the agent's stop (STOP_BOUND). A close cut short sooner
#: (the runner's CLOSE_WAIT, a probe's own bound) stops its agent: left, it would be neither given back nor stopped,
#: running until the run's end (`stop_all`).
CLOSE_BOUND = ABANDONED_END + CLOSE_TIMEOUT + STOP_BOUND

#: An agent slot: the driver, the lane's thread, the client's label, and the probe it serves (None: any probe;
#: a number: only that one, for an agent whose statement names count over its process and which may have named one).
Slot = tuple[str, str, str, int | None]

_lock = threading.Lock()
_idle: dict[Slot, list[AgentProcess]] = {}
_probes = threading.local()  # .count: the probes this thread has started


def next_probe() -> None:
    """A probe starts on this thread: the agents that served only its earlier probe end now."""
    _probes.count = getattr(_probes, "count", 0) + 1
    thread = threading.current_thread().name
    with _lock:
        done = [slot for slot in _idle if slot[1] == thread and slot[3] is not None]
        ended = [agent for slot in done for agent in _idle.pop(slot)]
    stop_together(ended)


def _slot(shipped: Shipped, label: str) -> Slot:
    """The slot of this probe: an agent that may have named a statement in it is given back there."""
    probe = getattr(_probes, "count", 0) if shipped.names_per_process else None
    return shipped.spec.id, threading.current_thread().name, label, probe  # the lane's thread, not a worker's


def _lease(start: Callable[[], AgentProcess], slot: Slot) -> AgentProcess:
    """An idle agent of the slot (first one that served this probe alone, then one for any probe), else a new one."""
    with _lock:
        for each in dict.fromkeys((slot, (*slot[:3], None))):
            idle = _idle.get(each, [])
            while idle:
                agent = idle.pop()
                if agent.alive:
                    return agent
    with timed("agent starts"):  # (inside the connect's time: benchmark.py counts them apart)
        return start()


def _give_back(slot: Slot, agent: AgentProcess) -> None:
    with _lock:
        _idle.setdefault(slot, []).append(agent)


def stop_all(hurry: bool = False) -> None:
    """End every agent this process started, together (the end of a run); `hurry` (Ctrl-C): each gets
    SIGTERM at once with the end of its input, not STOP_TIMEOUT seconds later (process.py's stop)."""
    with _lock:
        _idle.clear()
    stop_every(0 if hurry else STOP_TIMEOUT)


def _where(endpoint: Endpoint) -> dict[str, Any]:
    if not endpoint.dsn:
        return {"host": endpoint.host, "port": endpoint.port, "user": endpoint.user,
                "password": endpoint.password, "dbname": endpoint.dbname}
    parts = conninfo_to_dict(endpoint.dsn)
    return {"host": parts.get("host", "127.0.0.1"), "port": int(parts.get("port") or 5432),
            "user": parts.get("user", ""), "password": parts.get("password", ""), "dbname": parts.get("dbname", "")}


def _shaped(value: object) -> bool:
    """A value of protocol 1: JSON null, a boolean, a number, text, or an array of such values."""
    if isinstance(value, list):
        return all(map(_shaped, value))
    return value is None or isinstance(value, (bool, int, float, str))


@dataclass
class _Lease:
    slot: Slot
    agent: AgentProcess
    returned: bool = False


@dataclass
class AgentClient:
    """One application connection held by one agent process (its own OS process and driver)."""

    label: str
    statement_names: str
    _lease: _Lease
    _shipped: Shipped
    _notifications: list[Notification] = field(default_factory=list)
    settings: tuple[Setting, ...] = ()
    _parameters: dict[str, str] = field(default_factory=dict)

    @property
    def notifications(self) -> list[Notification]:
        """Those its answers carried; NotApplicable, in its words, from an agent whose hello says
        `no_notifications` (its driver drops them: a probe that waits for one would read a false absence)."""
        never = self._lease.agent.hello.get("no_notifications")
        if never:
            raise NotApplicable(f"the {self._lease.agent.driver} agent receives no notifications: {never}")
        return self._notifications

    @classmethod
    async def connect(cls, shipped: Shipped, label: str, endpoint: Endpoint, settings: tuple[Setting, ...] = (),
                      startup: dict[str, str] | None = None) -> AgentClient:
        """`settings`: the cell's driver settings (--driver-set); `startup`: the agent's own settings that
        send a probe's startup parameter (catalogue `startup_settings`), on top of them."""
        return await cls.open(shipped, lambda: installed(shipped.spec).start(), label, endpoint, settings, startup)

    @classmethod
    async def open(cls, shipped: Shipped, start: Callable[[], AgentProcess], label: str, endpoint: Endpoint,
                   settings: tuple[Setting, ...] = (), startup: dict[str, str] | None = None) -> AgentClient:
        """A client of any agent (shipped, or a team's own: clients.py gives it an entry of its own);
        `start` makes a new process when the slot has no idle one."""
        slot = _slot(shipped, label)
        agent = await asyncio.to_thread(_lease, start, slot)
        client = cls(label, shipped.statement_names, _Lease(slot, agent), shipped, settings=settings)
        try:
            await client._call("connect", settings={**dict(settings), **(startup or {})}, **_where(endpoint))
        except BaseException:
            await client.close()
            raise
        return client

    @property
    def agent_pid(self) -> int:
        """The agent's OS pid (two clients never have the same one)."""
        return self._lease.agent.pid

    async def _call(self, op: str, **fields: Any) -> dict[str, Any]:
        return self._checked(op, self._absorb(await asyncio.to_thread(self._lease.agent.request, op, by=self.label,
                                                                      **fields)))

    def _checked(self, op: str, answer: dict[str, Any]) -> dict[str, Any]:
        """The answer to `op` where it is `ok`; else its error raised, as the harness reads it."""
        if answer.get("ok"):
            return answer
        error = answer.get("error") or {}
        kind, message = str(error.get("class", "")), str(error.get("message", ""))
        if kind in ("usage", "unsupported"):
            raise AgentRefused(f"{self._lease.agent.about} refused {op!r} ({kind}): {message}", kind)
        refusal = next((why for start, why in self._shipped.refusals if message.startswith(start)), None)
        if refusal is not None:
            said = f"{self.label}'s driver refused to go on: {message} ({refusal})"
            if self._shipped.refused_values:
                raise DriverRefused(said, self.label, closed=self._shipped.refused_values == "closes")
            raise NotApplicable(said)
        raise ServerError(str(error.get("sqlstate") or NO_SQLSTATE), f"{message} ({kind})" if kind else message)

    def _absorb(self, answer: dict[str, Any]) -> dict[str, Any]:
        """The answer, its notifications and ParameterStatus values kept (any answer may carry them)."""
        self._notifications.extend(Notification(str(n.get("channel", "")), str(n.get("payload", "")))
                                  for n in answer.get("notifications") or ())
        if isinstance(answer.get("parameters"), dict):
            self._parameters.clear()
            self._parameters.update({str(k): str(v) for k, v in answer["parameters"].items()})
        return answer

    async def _rows(self, op: str, sql: str, **fields: Any) -> list[Row]:
        rows = (await self._call(op, sql=sql, **fields)).get("rows") or []
        if not isinstance(rows, list) or not all(isinstance(row, list) and all(map(_shaped, row)) for row in rows):
            raise AgentFault(f"{self._lease.agent.about} answered {op!r} with rows of a shape protocol "
                             f"1 does not have (lists of null, booleans, numbers, text and arrays): {rows!r:.200}")
        return [tuple(row) for row in rows]

    async def query(self, sql: str) -> list[Row]:
        with timed("statements"):
            return await self._rows("query", sql)

    async def execute(self, sql: str) -> None:
        with timed("statements"):
            await self._call("execute", sql=sql)

    async def prepared(self, sql: str) -> list[Row]:
        """The driver's prepared way; an agent whose driver has none with its settings (Prisma 7 without a
        statementNameGenerator) answers `unsupported`: the probe is not applicable, in its words."""
        try:
            with timed("statements"):
                return await self._rows("prepared", sql, times=self._shipped.prepared_times)
        except AgentRefused as exc:
            if exc.kind != "unsupported":
                raise
            raise NotApplicable(str(exc)) from None

    async def free(self, sql: str) -> None:
        """The driver's own way to drop the statement `prepared` made for `sql` (NotApplicable where it has none:
        the agent answers `unsupported`)."""
        try:
            await self._call("free", sql=sql)
        except AgentRefused as exc:
            if exc.kind != "unsupported":
                raise
            raise NotApplicable(f"the {self._lease.agent.driver} agent cannot free a statement: {exc}") from None

    async def transaction(self, op: str) -> None:
        """`begin`, `commit` or `rollback` through the driver's transaction API."""
        with timed("statements"):
            await self._call(op)

    async def begin(self) -> None:
        await self.transaction("begin")

    async def commit(self) -> None:
        await self.transaction("commit")

    async def rollback(self) -> None:
        await self.transaction("rollback")

    async def bind(self, name: str) -> list[Row]:
        """The optional `bind` op (hello's `ops`): the driver executes a statement by name without preparing
        it; NotApplicable, in words, where the agent does not offer it."""
        agent = self._lease.agent
        if "bind" not in (agent.hello.get("ops") or ()):
            raise NotApplicable(f"the {agent.driver} agent does not answer bind: its driver has no call that "
                                "executes a prepared statement by a name it did not prepare itself")
        with timed("statements"):
            return await self._rows("bind", "", name=name)

    async def copy_in(self, copy: CopyIn) -> None:
        """The optional `copy_in` op (hello's `ops`): COPY ... FROM STDIN through the driver's copy API;
        NotApplicable, in words, where the agent does not offer it. An agent that offers `go` too ends the
        copy's pause on the `go` sent once `copy.settled` has seen the server fail the COPY (its answer says
        `"go": true` where its pause ended on it: `copy.seen` then keeps when), else `pause_ms` later."""
        agent = self._lease.agent
        ops = agent.hello.get("ops") or ()
        if "copy_in" not in ops:
            raise NotApplicable(f"the {agent.driver} agent does not answer copy_in: {self._shipped.copy}")
        fields: dict[str, Any] = {"sql": copy.sql, "table": copy.table, "columns": list(copy.columns),
                                  "first": copy.first, "rows": copy.rows, "times": copy.times,
                                  "pause_ms": round(copy.pause * 1000)}
        with timed("statements"):
            if copy.settled is None or "go" not in ops:
                await self._call("copy_in", **fields)
                return
            call = asyncio.ensure_future(asyncio.to_thread(agent.request, "copy_in", by=self.label, **fields))
            watch = asyncio.ensure_future(copy.settled())
            try:
                await asyncio.wait({call, watch}, return_when=asyncio.FIRST_COMPLETED)
                seen = watch.result() if watch.done() else None
                if seen is not None and not call.done():  # read beside the copy, answered at once
                    self._absorb(await asyncio.to_thread(agent.request, "go", by=self.label))
                answer = self._absorb(await call)
            finally:  # (done already, but where the witness failed or the probe gave up on the copy)
                for task in (call, watch):
                    task.cancel()
            if seen is not None and answer.get("go") is True:
                copy.seen.append(seen)
            self._checked("copy_in", answer)

    async def pipeline(self, commands: tuple[Piped, ...]) -> Pipelined:
        raise NotApplicable(f"the {self._lease.agent.driver} agent sends no pipeline: {self._shipped.pipeline}")

    def protocol(self) -> str | None:
        return None

    def reported(self, name: str) -> str | None:
        return self._parameters.get(name)

    async def cancel(self) -> bool:
        """The agent's `cancel`, sent beside the request now running (process.py); an agent whose
        driver cannot cancel (now) answers `unsupported`: the probe is not applicable, in its words. An
        agent whose hello said `no_cancel` (it could only answer after the statement it would cancel) is
        not asked: the same words at once. True when the answer says `"closed": true`: the driver's
        cancel connection was closed by the peer before the agent answered."""
        never = self._lease.agent.hello.get("no_cancel")
        if never:
            raise NotApplicable(f"{self._lease.agent.about} cannot cancel: {never}")
        answer = self._absorb(await asyncio.to_thread(self._lease.agent.request, "cancel", by=self.label))
        if answer.get("ok"):
            return answer.get("closed") is True
        error = answer.get("error") or {}
        if error.get("class") == "unsupported":
            raise NotApplicable(f"{self._lease.agent.about} cannot cancel: {error.get('message', '')}")
        message = f"{error.get('message', '')} ({error.get('class')})"
        raise ServerError(str(error.get("sqlstate") or NO_SQLSTATE), message)

    async def cancel_key(self) -> tuple[int, int]:
        """The (pid, secret key) of the BackendKeyData its driver holds: the optional `cancel_key` op,
        asked only of an agent whose hello offers it (`"ops": ["cancel_key"]`); NotApplicable, saying
        so, where it does not or answers `unsupported`."""
        agent = self._lease.agent
        if "cancel_key" not in (agent.hello.get("ops") or ()):
            raise NotApplicable(f"{agent.about} does not answer cancel_key (its hello does not offer "
                                "it: docs/agent-protocol.md), so the key its login was given is not known")
        try:
            answer = await self._call("cancel_key")
        except AgentRefused as exc:
            if exc.kind != "unsupported":
                raise
            raise NotApplicable(f"{agent.about} cannot tell its cancel key: {exc}") from None
        pid, key = answer.get("pid"), answer.get("secret_key")
        if not all(isinstance(v, int) and not isinstance(v, bool) and -2**31 <= v < 2**32 for v in (pid, key)):
            raise AgentFault(f"{agent.about} answered cancel_key without a 32-bit pid and secret_key: "
                             f"{answer!r:.200}")
        assert isinstance(pid, int) and isinstance(key, int)
        return int32(pid), int32(key)  # pgx answers them unsigned

    def connections(self) -> set[Ends]:
        # the agent's process and what it started (its driver's own connections; a lease is one client's alone)
        return tcp_connections(self._lease.agent.pid)

    def alias(self, label: str) -> AgentClient:
        return replace(self, label=label)  # same agent, connection, notification list and parameters

    async def close(self) -> None:
        lease = self._lease
        if lease.returned:
            return
        lease.returned = True
        try:
            await self._close(lease)
        except asyncio.CancelledError:
            # cut short (its caller's bound): the agent is stopped, in a thread of its own since this task ends now,
            # rather than left running, neither given back nor stopped, until the run's end
            threading.Thread(target=lease.agent.stop, args=(0,), name=f"agent-close-{self.label}", daemon=True).start()
            raise

    async def _close(self, lease: _Lease) -> None:
        if lease.agent.busy and not await asyncio.to_thread(lease.agent.idle_within, ABANDONED_END):
            # still in a call the harness gave up on (a driver's loop, a pool that stalled) that did not end within
            # ABANDONED_END: a close would wait CLOSE_TIMEOUT behind it, and the stop a further STOP_TIMEOUT for an
            # agent that reads no input meanwhile. It ends now; the next probe of this slot starts a fresh agent.
            await asyncio.to_thread(lease.agent.stop, 0)
            return
        try:
            closed = await asyncio.to_thread(lease.agent.request, "close", CLOSE_TIMEOUT, by=self.label)
        except AgentFault:
            return  # already stopped: the next probe of this slot starts a fresh agent
        # Any later probe may have it unless it may have named a statement (its word: the module's docstring).
        _give_back(lease.slot if closed.get("named") is not False else (*lease.slot[:3], None), lease.agent)
