"""Run one sequence as two applications and record what each got, with the witness's proofs.

Each op is one call of the client's driver, as an application makes it, through the matrix's own
`Scenario` (probes/scenario.py): in autocommit, or inside the transaction the client began through its
driver's transaction API; the driver's prepared path, its own free and bind. No statement of the
harness's runs inside a client's transaction. A step's proof is where the witness, the harness's own
session on PostgreSQL (probes/witness.py), saw the client's tagged statement, or the identity a snapshot
or a prepared statement read in the same statement, confirmed by the witness. A driver call that sends
only the driver's own statement (BEGIN, COMMIT, ROLLBACK, a free, a bind) carries no tag: inside a
transaction its transaction's proven steps cover it (no pooler moves a client inside a transaction
block); elsewhere it has none (compare.proof_problems).

What the applications lost that only the run can tell is kept in the trace: each row written is read
back by the witness after the clients closed (told committed and not there: a lost write, at the step
that told it), and a call that waited for a server connection another client's transaction held ends
the run (the pool stalled; the steps after it never ran).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from leakcheck.discover.compare import closes
from leakcheck.discover.driver_api import bound
from leakcheck.discover.ops import PREPARED, Kind, Op, Who
from leakcheck.discover.render import CLIENT_KEYS, REPORTED, Via, protocol_select, snapshot_columns, statements
from leakcheck.discover.trace import SILENT, Event, Failure, Loss, Lost, Proof, Trace
from leakcheck.drivers.agents.process import AgentRefused
from leakcheck.drivers.interface import Client, ServerError
from leakcheck.model.errors import NotApplicable, ProbeError
from leakcheck.model.faults import NO_SQLSTATE
from leakcheck.probes.base import Attempt
from leakcheck.probes.outcomes import WRITES_TABLE, Stalled, Write
from leakcheck.probes.scenario import Scenario
from leakcheck.probes.witness import Witness

#: A call its driver (or the pooler) refused, closing the client's connection: the application's error, a step like any
#: other (compare.closes reads "closed").
REFUSED = "its connection closed: the driver or the pooler refused to go on"
#: A call its agent refused after an earlier step closed the client's connection (compare.closes reads "closed").
GONE = "its connection closed at an earlier step: its driver has no such call to make now"


def _failure(exc: ServerError) -> Failure:
    return Failure(exc.sqlstate, exc.message)


def _event(index: int, op: Op, got: Attempt) -> Event:
    if got.error is not None:
        return Event(index, op.who, op, failure=_failure(got.error))
    return Event(index, op.who, op, value=got.value)


def _first(rows: object) -> object:
    """The first column of the first row of a driver's rows (bind's answer)."""
    return rows[0][0] if isinstance(rows, list) and rows and rows[0] else None


class Run:
    """One route's run of one sequence: clients A and B as applications in a Scenario, and its trace."""

    def __init__(self, a: Client, b: Client, trace: Trace, witness: Witness) -> None:
        self.trace = trace
        self.s = Scenario(a=a, b=b, route=trace.route, witness=witness, token=trace.names.token,
                          session_ends_observed=True)
        self.clients = {Who.A: a, Who.B: b}
        self.written_at: dict[str, int] = {}  # a write's row id -> its step
        self.told_at: dict[str, int] = {}  # a write's row id -> the step that told its client committed or not

    def _gone(self, who: Who) -> bool:
        """Whether an earlier step's failure closed the client's connection (compare.closes)."""
        return any(e.who is who and closes(e.failure) for e in self.trace.events)

    def _step_name(self, index: int, who: Who, op: Op | None) -> str:
        return f"step {index + 1} ({who}: {op or 'final snapshot'})"

    async def _snapshot(self, index: int, who: Who, op: Op | None) -> Event:
        """Every observation of one client in one statement, its identity read in the same row."""
        client = self.clients[who]
        columns = snapshot_columns(self.trace.names)
        try:
            row = await self.s.observe_row(client, self._step_name(index, who, op), ", ".join(e for _, e in columns))
        except ServerError as exc:
            return Event(index, who, op, failure=_failure(exc))
        fields = [*zip((key for key, _ in columns), row, strict=True)]
        try:
            notes = [f"{n.channel}:{n.payload}" for n in client.notifications]
        except NotApplicable:  # its driver drops them (sqlx): none on either side, as on the reference
            notes = []
        fields.append(("notifications", notes))
        fields += [(f"reported:{name}", client.reported(name)) for name in REPORTED]
        assert [k for k, _ in fields[len(columns):]] == list(CLIENT_KEYS)
        return Event(index, who, op, fields=tuple(fields))

    async def _call(self, index: int, op: Op) -> Attempt:
        """The op as its client's driver call(s); a failed statement ends the op."""
        s, client, step, names = self.s, self.clients[op.who], self._step_name(index, op.who, op), self.trace.names
        k = op.kind
        if k is Kind.BEGIN:
            return await s.begin(client, step)
        if k is Kind.COMMIT:
            return await s.commit(client, step)
        if k is Kind.ROLLBACK:
            return await s.rollback(client, step)
        if k is Kind.PROTOCOL:
            return await s.prepared(client, step, protocol_select(op, names))
        if k is Kind.FREE:
            freed = await s.free_last(client, step)
            if freed is None:
                raise ProbeError(f"{op.who}'s driver has no call to free a statement, yet FREE was drawn (abilities)")
            return freed
        if k is Kind.WRITE:
            got = await s.write(client, step, prepared=op.variant == PREPARED)
            self.written_at[s.ledger.writes[-1].id] = index
            return got
        if k is Kind.BIND:
            got = await s.bind(client, step, names.obj(op.arg))
            return got if got.failed else Attempt(value=_first(got.value))
        got = Attempt()
        for st in statements(op, names):
            if st.via is Via.BOUND:
                got = await s.call(client, step, bound(client, s.tagged(client, st.sql), st.params))
            else:
                got = await s.run(client, step, st.sql)
            if got.failed:
                break
        return got

    async def _step(self, index: int, op: Op | None, who: Who) -> Event:
        proven, told = len(self.s.proofs), {w.id for w in self.s.ledger.writes if w.told_committed is not None}
        try:
            if op is None or op.kind is Kind.OBSERVE:
                event = await self._snapshot(index, who, op)
            else:
                event = _event(index, op, await self._call(index, op))
        except NotApplicable as refused:  # the driver refused to go on (pgjdbc on a DateStyle not ISO), or the pooler
            event = Event(index, who, op, failure=Failure(NO_SQLSTATE, f"{REFUSED}: {refused}"))
        except AgentRefused as refused:
            ends = op is not None and op.kind in (Kind.COMMIT, Kind.ROLLBACK)
            if not (ends and refused.kind == "usage" and self._gone(who)):
                raise
            # a call an application on a closed connection cannot make as the sequence says: pgx v4's BEGIN failed
            # there, so it has no transaction to end (the application's call fails; nothing reaches a server)
            event = Event(index, who, op, failure=Failure(NO_SQLSTATE, f"{GONE}: {refused}"))
        self.trace.proofs += [Proof(index, Who(p.client), p.server) for p in self.s.proofs[proven:]]
        self.told_at.update({w.id: index for w in self.s.ledger.writes
                             if w.told_committed is not None and w.id not in told})
        return event

    async def play(self, ops: tuple[Op, ...]) -> None:
        """Every op in order, then A's and B's final snapshots; a stalled pool ends the run there."""
        steps: list[tuple[Op | None, Who]] = [(op, op.who) for op in ops] + [(None, who) for who in Who]
        if self.s.witness is not None:
            self.s.witness.start()
        try:
            for index, (op, who) in enumerate(steps):
                self.trace.events.append(await self._step(index, op, who))
        except Stalled as stall:
            index = len(self.trace.events)
            who = steps[index][1]
            self.trace.losses.append(Loss(index, who, Lost.STALLED, "waited for a server connection another "
                                          "client's open transaction held", str(stall)))
            self.trace.events += [Event(i, w, op, ran=False) for i, (op, w) in enumerate(steps) if i >= index]
        self.trace.events[:] = covered(self.trace.events, self.trace.proofs, ops)

    def read_back(self) -> None:
        """After the clients closed: the witness reads every row back; one its client was told is committed and
        is not there is a lost write, at the step that told it (silent when no error reached that client)."""
        writes = self.s.ledger.writes
        if not writes or self.s.witness is None:
            return
        present = self.s.witness.present(WRITES_TABLE, [w.id for w in writes])
        for w in writes:
            if w.told_committed and w.id not in present:
                self.trace.losses.append(_lost(w, self.written_at.get(w.id, 0), self.told_at.get(w.id, 0)))


def _lost(w: Write, written: int, told: int) -> Loss:
    who = Who(w.who)
    how = "its commit" if told != written else "its statement"
    if w.error_after is None:
        return Loss(told, who, Lost.WRITE, f"lost, and {SILENT} {who}",
                    f"{how} returned success, and {who}'s row of step {written + 1} is not in the database; {SILENT} "
                    f"{who}")
    return Loss(told, who, Lost.WRITE, f"lost, after an error reached {who}",
                f"{how} returned success, and {who}'s row of step {written + 1} is not in the database (an error "
                f"reached {who} before: {w.error_after})")


def covered(events: Sequence[Event], proofs: Sequence[Proof], ops: Sequence[Op]) -> list[Event]:
    """Each event with the step whose proof covers it: its own; inside its client's transaction, any proven
    step of that transaction (no pooler moves a client inside a transaction block); else none."""
    proven = {(p.who, p.index) for p in proofs}
    began: dict[int, int] = {}  # an op's index -> the index of the BEGIN of the transaction it runs in
    open_: dict[Who, int] = {}
    for index, op in enumerate(ops):
        if op.kind is Kind.BEGIN:
            open_[op.who] = index
        if op.who in open_:
            began[index] = open_[op.who]
        if op.kind in (Kind.COMMIT, Kind.ROLLBACK):
            open_.pop(op.who, None)
    first: dict[int, int] = {}  # a BEGIN's index -> the first proven step of its transaction
    for index, start in sorted(began.items()):
        if (ops[index].who, index) in proven:
            first.setdefault(start, index)
    out = []
    for event in events:
        at = event.index if (event.who, event.index) in proven else first.get(began.get(event.index, -1))
        out.append(dataclasses.replace(event, proof_at=at))
    return out
