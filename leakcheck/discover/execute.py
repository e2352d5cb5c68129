"""Run one sequence with two real clients and record what each observed, with its proofs.

Proofs, as the probes take them (probes/base.py): a snapshot reads the server identity in the same
statement; every other op outside the client's own transaction runs in a block `BEGIN; SELECT
<identity>; <op>; COMMIT` (ROLLBACK when it failed); inside the client's transaction the proof is
the one its BEGIN took (no pooler moves a client within a transaction block); a protocol-level
prepared statement carries the identity columns itself; DISCARD ALL, which no block may hold, is
proven by identities read right before and right after it, which must agree. A transaction
begun through the driver's API takes its proof right after, as a SQL BEGIN does; freeing a
statement (the driver's API) runs in the block like any op.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from typing import Any

from leakcheck.discover.driver_api import Transactions, bound, free
from leakcheck.discover.ops import DRIVER, Kind, Op, Who, in_transaction
from leakcheck.discover.render import CLIENT_KEYS, REPORTED, Statement, Via, snapshot_columns, snapshot_sql, statements
from leakcheck.discover.trace import Event, Failure, Proof, Trace
from leakcheck.drivers.clients import Client, Row, ServerError
from leakcheck.model.errors import NotApplicable
from leakcheck.model.verdicts import ServerId
from leakcheck.probes.base import IDENTITY


def _failure(exc: ServerError) -> Failure:
    return Failure(exc.sqlstate, exc.message)


class Runner:
    """One route's run: clients A and B, the proofs they gave, the events they saw."""

    def __init__(self, clients: dict[Who, Client], trace: Trace) -> None:
        self.clients = clients
        self.trace = trace
        self.begun: dict[Who, int] = {}  # the index of each client's open BEGIN
        self.transactions = Transactions()  # those opened through the driver's transaction API

    def _prove(self, index: int, who: Who, pid: Any, started: Any) -> None:
        self.trace.proofs.append(Proof(index, who, ServerId(int(pid), str(started))))

    async def _identity(self, index: int, who: Who) -> None:
        rows = await self.clients[who].query(f"SELECT {IDENTITY}")
        self._prove(index, who, *rows[0][:2])

    async def _send(self, index: int, who: Who, st: Statement) -> list[Row]:
        client = self.clients[who]
        if st.via is Via.PROTOCOL:
            rows = await client.prepared(f"{st.sql}, {IDENTITY}")
            self._prove(index, who, *rows[0][-2:])
            return [row[:-2] for row in rows]
        if st.via is Via.BOUND:
            return await bound(client, st.sql, st.params)
        if st.via is Via.FREE:  # the very text PROTOCOL prepared, so the driver frees that statement
            await free(client, f"{st.sql}, {IDENTITY}")
            return []
        if st.via is Via.DRIVER:  # COMMIT or ROLLBACK of a BEGIN made through the driver's API
            await self.transactions.end(who, client, commit=st.sql == "COMMIT")
            return []
        return await client.query(st.sql)

    async def _statements(self, index: int, who: Who, sts: Sequence[Statement]) -> Any:
        rows: list[Row] = []
        for st in sts:
            rows = await self._send(index, who, st)
        return rows[0][0] if rows and rows[0] else None

    async def _blocked(self, index: int, who: Who, sts: Sequence[Statement]) -> Event:
        """Outside the client's transaction: a block that starts with the proof."""
        client = self.clients[who]
        await client.execute("BEGIN")
        try:
            await self._identity(index, who)
            value = await self._statements(index, who, sts)
        except ServerError as exc:  # the block ends here, whatever failed, so no transaction stays open
            with contextlib.suppress(ServerError):
                await client.execute("ROLLBACK")
            return Event(index, who, None, failure=_failure(exc))
        await client.execute("COMMIT")
        return Event(index, who, None, value=value)

    async def snapshot(self, index: int, who: Who, op: Op | None) -> Event:
        """Every observation of one client in one statement, its proof in the same row. Inside the
        client's transaction, a failed snapshot (an aborted block) is covered by its BEGIN's proof."""
        client = self.clients[who]
        keys = [key for key, _ in snapshot_columns(self.trace.names)]
        try:
            rows = await client.query(snapshot_sql(self.trace.names, IDENTITY))
        except ServerError as exc:
            return Event(index, who, op, failure=_failure(exc))
        row = rows[0]
        self._prove(index, who, *row[-2:])
        fields = list(zip(keys, row[:-2], strict=True))
        try:
            notes = [f"{n.channel}:{n.payload}" for n in client.notifications]
        except NotApplicable:  # its driver drops them (sqlx): none on either side, as on the reference
            notes = []
        fields.append(("notifications", notes))
        fields += [(f"reported:{name}", client.reported(name)) for name in REPORTED]
        assert [k for k, _ in fields[len(keys):]] == list(CLIENT_KEYS)
        return Event(index, who, op, fields=tuple(fields), proof_at=index)

    async def step(self, index: int, op: Op, inside: bool) -> Event:
        """The op's event, with the index of the proof that covers it."""
        event = await self._step(index, op, inside)
        if op.kind is Kind.BEGIN:
            self.begun[op.who] = index
        covered = self.begun.get(op.who) if inside else None
        if covered is None and any(p.index == index and p.who is op.who for p in self.trace.proofs):
            covered = index
        if op.kind in (Kind.COMMIT, Kind.ROLLBACK):
            self.begun.pop(op.who, None)
        return dataclasses.replace(event, proof_at=covered)

    async def _step(self, index: int, op: Op, inside: bool) -> Event:
        who, client = op.who, self.clients[op.who]
        if op.kind is Kind.OBSERVE:
            return await self.snapshot(index, who, op)
        try:
            if op.kind is Kind.BEGIN:
                if op.variant == DRIVER:
                    await self.transactions.begin(who, client)
                else:
                    await client.execute("BEGIN")
                await self._identity(index, who)
                return Event(index, who, op)
            if op.kind is Kind.DISCARD and op.arg == "ALL" and not inside:
                await self._identity(index, who)
                await client.execute("DISCARD ALL")
                await self._identity(index, who)
                return Event(index, who, op)
            if not inside:
                done = await self._blocked(index, who, statements(op, self.trace.names))
                return Event(index, who, op, value=done.value, failure=done.failure)
            return Event(index, who, op, value=await self._statements(index, who, statements(op, self.trace.names)))
        except ServerError as exc:
            return Event(index, who, op, failure=_failure(exc))


async def run_sequence(a: Client, b: Client, ops: tuple[Op, ...], trace: Trace) -> Trace:
    """Every op in order, then A's and B's final snapshots."""
    runner = Runner({Who.A: a, Who.B: b}, trace)
    for index, (op, inside) in enumerate(zip(ops, in_transaction(ops), strict=True)):
        trace.events.append(await runner.step(index, op, inside))
    for offset, who in enumerate(Who):
        trace.events.append(await runner.snapshot(len(ops) + offset, who, None))
    return trace
