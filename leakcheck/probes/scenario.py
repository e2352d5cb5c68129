"""The scenario a probe runs in: two applications A and B, each step the driver's ordinary call, each
step's server connection seen by the witness (probes/witness.py), and what the applications lost kept
by the outcome oracles (probes/outcomes.py).

A and B act exactly as applications do: in autocommit, one call per step, through their driver's
API; only a probe about transactions opens one, through the driver's transaction API (`begin`,
`transaction`). The harness never wraps a client's call in a transaction of its own. Reads that are
no application's own (the statements on a server, `pg_prepared_statements`) go through an observer
(`read`): on a pooler that shares server connections between connected clients, O, the harness's own
session through the pooler, proven on the same server; elsewhere the client's own connection, in a
statement of its own.

A proof is the server connection a step ran on, as the witness saw it on the server (the client's own
report, the identity columns of `observe` and `prepared`, must agree with it, or it is an error). No
pooler moves a client inside a transaction block; between two steps a pool of one hands out the one
server connection it has, which a new one replaces only once it ended: the witness checks that, and
the client is then *moved* (an outcome), not an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from leakcheck.drivers.agents.process import AgentRefused
from leakcheck.drivers.interface import Client, Row
from leakcheck.model.errors import DriverRefused, NotApplicable, ProbeError, one_line
from leakcheck.model.faults import NO_SQLSTATE, machine_fault
from leakcheck.model.target import Route
from leakcheck.model.verdicts import Observation, Proof, ServerId, Slot
from leakcheck.probes.base import IDENTITY, Attempt, attempt
from leakcheck.probes.outcomes import WRITES_TABLE, Ledger, Stalled, Write, write_statement
from leakcheck.probes.witness import Witness, is_reset, returns, stands_for, tag
from leakcheck.provision.base import Endpoint

T = TypeVar("T")

#: How many transactions B may open to be handed A's server connection (a_on_another_server).
PLACEMENT_TRIES = 10
#: Seconds one client step may take before the witness looks for who holds the server connection (a pool
#: that stalled is an outcome; a step that is only slow stays a timeout, an error).
STEP_BOUND = 10.0
#: Seconds a call cancelled at STEP_BOUND has to end before the scenario goes on without it.
CANCEL_GRACE = 2.0
#: Seconds a client's call runs before the witness starts counting the runs of its statements (a step takes
#: milliseconds; the count costs the witness a query per look).
LOOP_WATCH = 0.5
#: Runs of the client's own tagged statements within one call that make it a driver's loop (ActiveRecord 6.1
#: re-runs a statement PostgreSQL refuses with 0A000 forever): no driver retries a statement more than a few
#: times on its own, and an application's call sends its statement once.
LOOP_RUNS = 100
#: Seconds between the witness's looks: while the count grew within LOOP_BURST seconds (a loop's statement
#: starts again every few milliseconds, and the call spins until the count is made), while it grew within
#: LOOP_QUIET seconds, and once it did not.
LOOP_AGAIN = 0.002
LOOP_BURST = 0.05
LOOP_LOOK = 0.01
LOOP_IDLE_LOOK = 0.1
LOOP_QUIET = 0.5
#: Seconds a driver's loop, once measured, has to end when the witness ends the backends its statements run on
#: (`_end_loop`): a call that returns leaves its agent to the slot's next probe, instead of a new agent started
#: there (ActiveRecord's boot); one that does not is left as before (its agent is stopped when its client closes).
LOOP_END = 1.0
#: Seconds between looks, while a client's call waits (from LOOP_WATCH on), at whether the pool is held for another
#: client's open transaction with nothing that could end it before STEP_BOUND (`_held_kept`).
HELD_LOOK = 0.2


def looping(runs: set[tuple[ServerId, str]], at_least: int) -> str | None:
    """The runs of one client's statements the witness counted within one call (each a backend and the start
    of a statement there), in words, when they are `at_least` many: a driver that loops; else None."""
    if len(runs) < at_least:
        return None
    servers = sorted({str(server) for server, _ in runs})
    return f"its statements {len(runs)} times on {', '.join(servers)}"


def _retrieved(task: asyncio.Future[Any]) -> None:
    """A cancelled call's end, read so that asyncio does not report it as never retrieved."""
    if not task.cancelled():
        task.exception()


@dataclass
class Scenario:
    """Clients A and B on one route, the proofs their steps carried, a direct session C on demand, the
    witness that sees where each step ran, and the outcome ledger."""

    a: Client
    b: Client
    route: Route
    #: the harness's own session on PostgreSQL; None only for a running pooler without --direct-dsn, where
    #: the in-process drivers' own reading of the server is taken and an agent's word is refused
    witness: Witness | None = None
    third: Callable[[], Awaitable[Client]] | None = None
    proofs: list[Proof] = field(default_factory=list)
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    #: the pooler promises to hand B the server A used last (PgBouncer does): the proofs check it, and a
    #: miss is an error; other poolers hand servers out in their own order (B retries; not applicable)
    placement_promised: bool = True
    #: a hand-over probe's B: the next application, connected only when A has left (hand_over)
    next_b: Callable[[], Awaitable[Client]] | None = None
    #: where A connected (its first item), then, in a fleet (--bouncer-fleet), the fleet's other processes
    addresses: tuple[Endpoint, ...] = ()
    #: H, one more client of a pool leakcheck started that hands out servers in its own order
    #: (Odyssey): it holds a server connection so the probe's pool of two places A and B (keep_a_home)
    holder: Callable[[], Awaitable[Client]] | None = None
    #: the route's word, once a driver's cancel returned after its peer closed the cancel connection,
    #: that no cancel request is in flight any more (probes/cancel.py); None where the route cannot tell
    cancels_settled: Callable[[], Awaitable[str | None]] | None = None
    #: the route's word, given the pids of server connections, that the pooler keeps them for a client while
    #: the client given (the one whose call waits) waits in a full pool, with no timer of the pooler's or
    #: PostgreSQL's that could change that within the seconds given (PgBouncer's console, admin.kept;
    #: run/runner.py pool_kept); None where the route cannot tell: a waiting client is then known stalled at its bound
    pool_kept: Callable[[set[int], float, Client], Awaitable[str | None]] | None = None
    #: O, the harness's observer through the pooler, where connected clients share server connections
    #: (transaction or statement mode); None elsewhere: a client's own connection observes for it
    observer: Callable[[], Awaitable[Client]] | None = None
    #: the pooler is configured to run its own statement on a server after each transaction
    #: (server_reset_query_always): session state cannot be read after an autocommit step
    resets_configured: bool = False
    #: the reset statement the witness saw the pooler run after a client's step (Odyssey's pool_discard...)
    pooler_resets: str | None = None
    #: the clients are processes of their own (agents): without a witness their word proves nothing
    clients_are_agents: bool = False
    #: a session ended under a client is what the application saw at any step, never a machine fault
    #: (discovery: a pooler that closes a connection is a finding; its later calls fail as the application's do)
    session_ends_observed: bool = False
    ledger: Ledger = field(default_factory=Ledger)
    _c: Client | None = None
    _h: Client | None = None
    _o: Client | None = None
    _h_server: ServerId | None = None
    _slot: dict[str, Slot] = field(default_factory=dict)
    _home: dict[Slot, ServerId] = field(default_factory=dict)
    _epoch: dict[Slot, int] = field(default_factory=dict)
    _in_transaction: set[str] = field(default_factory=set)
    #: server connections this scenario itself keeps in a transaction on purpose (B's on A's server while A is
    #: away): one of them idle in transaction is the probe's doing, never a pool that stalled
    _held_open: set[ServerId] = field(default_factory=set)
    _writes: int = 0
    _last_prepared: dict[str, str] = field(default_factory=dict)
    #: a statement of the clients named a timeout (a session's own timer may end a transaction the pool is held by)
    _timers_named: bool = False
    _transaction_timers: list[str] | None = None  #: PostgreSQL's, read at the first look (`_held_kept`)
    _read: set[int] = field(default_factory=set)  #: the writes read back (ids of their Write)
    _present: set[str] = field(default_factory=set)  #: the rows read back that were there

    @property
    def resets_after_transaction(self) -> bool:
        """No session state survives between a client's statements here: configured so, or seen by the witness
        (probes say so instead of taking a read-back that never had a chance for a harness failure)."""
        return self.resets_configured or self.pooler_resets is not None

    def name(self, stem: str) -> str:
        """A name unique to this run (for tables, cursors, channels, statements)."""
        return f"lc_{stem}_{self.token}"

    def tagged(self, client: Client, sql: str) -> str:
        """The statement as the client sends it: with the comment the witness finds it by (refused when the
        server would cut that comment off in pg_stat_activity: `Witness.fits`)."""
        self._timers_named = self._timers_named or "timeout" in sql.lower()
        text = f"{sql} {tag(self.token, client.label)}"
        return self.witness.fits(text) if self.witness is not None else text

    # --- proofs -------------------------------------------------------------------------------------

    def _record(self, label: str, step: str, server: ServerId, moved_silently: bool = True) -> None:
        slot = self._slot.get(label, Slot.HOME)
        if self.route is Route.TRANSACTION:
            home = self._home.setdefault(slot, server)
            was_there = any(p.client == label and p.slot is slot and p.server == home for p in self.proofs)
            if server != home and was_there and self.witness is not None and self.witness.ended(home):
                # the server connection this client shared ended; the pooler handed it a new one
                self._epoch[slot] = self._epoch.get(slot, 0) + 1
                self._home[slot] = server
                self.ledger.moved(label, step, home, server, silent=moved_silently)
        self.proofs.append(Proof(step, label, server, slot, self._epoch.get(slot, 0)))

    def _prove(self, client: Client, step: str, claimed: tuple[Any, Any] | None, silent: bool = True,
               returned: Any = None) -> bool:
        """The proof of the step `client` just took: the witness's sighting; the client's own report must
        agree with it. Without a sighting, a report is believed only as far as the witness confirms it: the
        statement that backend ran during the step is the client's, no client's, or the one whose value the
        client's call `returned` (`returns`: its driver ran another client's statement)."""
        said_server = None
        if claimed is not None:
            pid, started = claimed
            if started is None:  # pid alone is no proof: pids are reused
                raise ProbeError(f"{client.label}'s backend_start is not visible to its role at {step!r}, so its "
                                 "server connection cannot be proven: grant it pg_read_all_stats (leakcheck "
                                 "fixtures does)")
            said_server = ServerId(int(pid), str(started))
        if self.witness is None:
            if said_server is None:
                return False
            if self.clients_are_agents:
                raise ProbeError(f"{client.label} reported {said_server} at {step!r}, but there is no direct session "
                                 "to confirm it on the server (a client's word is no proof): give --direct-dsn")
            self._record(client.label, step, said_server, silent)
            return True
        seen = self.witness.look(tag(self.token, client.label))
        if seen is None:
            if said_server is None:
                # the step never reached PostgreSQL, or a statement ran on its server after it: the pooler's
                # own reset, on the server the client was last seen on?
                last = next((p.server for p in reversed(self.proofs) if p.client == client.label), None)
                ran = self.witness.confirms(last) if last is not None else None
                if ran is not None and is_reset(ran):
                    self.pooler_resets = ran.strip()
                return False
            ran = self.witness.confirms(said_server)
            if ran is not None and is_reset(ran):
                self.pooler_resets = ran.strip()  # the pooler's own statement followed the client's
            if ran is None:
                raise ProbeError(f"{client.label} reported server connection {said_server} (started "
                                 f"{said_server.started}) at {step!r}, but the server shows no such backend running "
                                 "that step: a proof is never taken on a client's word")
            if not stands_for(ran, tag(self.token, client.label)) and not returns(ran, returned):
                raise ProbeError(f"{client.label} reported server connection {said_server} at {step!r}, but the "
                                 f"statement that backend ran last is another client's ({one_line(ran, 120)!r}): "
                                 "a proof is never taken on a client's word")
            self._record(client.label, step, said_server, silent)
            return True
        if said_server is not None and said_server != seen.server:
            raise ProbeError(f"{client.label} reported server connection {said_server} at {step!r}, but the server "
                             f"shows the step ran on {seen.server} (started {seen.server.started}): a proof is never "
                             "taken on a client's word")
        self._record(client.label, step, seen.server, silent)
        return True

    def prove_failed(self, client: Client, step: str, got: Attempt) -> bool:
        """The proof of a failed step that no tag shows (PostgreSQL fails a Bind of a statement that does not exist
        before it shows any text): the server connection the client was last proven on, when that backend became
        ready again during this step, in the transaction the failure aborted where the client had one open, with no
        client's statement started meanwhile (`Witness.failed_unshown`). Nothing else sent it anything: the clients'
        steps run one at a time, and a pooler's own statement (PgBouncer's `SET client_encoding` for the step) is sent
        to the server it links the client to. A pooler that gave the client another server connection leaves that one
        untouched: no proof, an error."""
        last = next((p.server for p in reversed(self.proofs) if p.client == client.label), None)
        if self.witness is None or got.error is None or got.error.closed or last is None:
            return False
        if got.error.sqlstate == NO_SQLSTATE:  # the driver's or the agent's own error: nothing says a server answered
            return False
        if not self.witness.failed_unshown(last, in_transaction=client.label in self._in_transaction):
            return False
        self._record(client.label, step, last, moved_silently=False)
        return True

    async def _bounded(self, client: Client, step: str, call: Awaitable[T]) -> T:
        """A client's call, bounded by STEP_BOUND: past it, a stalled pool is an outcome (`_stalled`), looked at
        while the call still waits; the call is then cancelled, and left after CANCEL_GRACE if its driver does
        not let it go (psycopg 3.1's COPY waits for a server that never answers). Before the bound, from
        LOOP_WATCH on, the witness counts the runs of the client's statements since the call began: LOOP_RUNS of
        them is its driver's loop (`looping`), a stall measured then instead of at the bound; and every HELD_LOOK
        seconds whether the stall the bound would find is known already (`_held_kept`)."""
        task = asyncio.ensure_future(call)
        loop = asyncio.get_running_loop()
        began = loop.time()
        await asyncio.wait({task}, timeout=STEP_BOUND if self.witness is None else LOOP_WATCH)
        runs: set[tuple[ServerId, str]] = set()
        looped: str | None = None
        kept: str | None = None
        grew = began  # when the count last grew
        held_look = began  # when the pool was last looked at
        while not task.done() and self.witness is not None and (left := began + STEP_BOUND - loop.time()) > 0:
            seen = self.witness.runs(tag(self.token, client.label), loop.time() - began)
            if not seen <= runs:
                grew = loop.time()
            runs |= seen
            looped = looping(runs, LOOP_RUNS)
            if looped is not None:
                break
            if loop.time() - held_look >= HELD_LOOK:
                held_look = loop.time()
                kept = await self._held_kept(client)
                if kept is not None and not task.done() and self._held():
                    break
                kept = None  # (or let go meanwhile: the call waits on)
            quiet = loop.time() - grew
            look = LOOP_AGAIN if quiet < LOOP_BURST else LOOP_LOOK if quiet < LOOP_QUIET else LOOP_IDLE_LOOK
            await asyncio.wait({task}, timeout=min(left, look))
        if task.done():  # returned, even during the last look: its result, never a stall
            return task.result()
        try:
            took = f"{loop.time() - began:.1f} s"
            self._stalled(client, step, looped and f"{looped} within {took}", kept and f"{took} ({kept})")
        finally:
            try:
                if looped is not None:  # measured (Stalled is raised): the loop is ended, not only left
                    await self._end_loop(client, task, {server for server, _ in runs})
            finally:
                task.cancel()
                task.add_done_callback(_retrieved)
                await asyncio.wait({task}, timeout=CANCEL_GRACE)
        raise TimeoutError(f"{client.label}'s {step!r} did not return within {STEP_BOUND:.0f} s")

    async def _end_loop(self, client: Client, task: asyncio.Future[Any], servers: set[ServerId]) -> None:
        """After a driver's loop was measured: the witness ends the backends it was counted on (`servers`) until
        its call returns (the driver's statement then fails with the connection: through a pooler, once it ends
        while linked to the client; a lane's pooler serves only its own probes) or LOOP_END seconds passed. It is
        clean-up after the verdict: a witness that fails here leaves the call as before (its agent is stopped when
        its client closes), and the measured loop stands (a server that went away is the runner's watcher's)."""
        assert self.witness is not None
        loop = asyncio.get_running_loop()
        until = loop.time() + LOOP_END
        while not task.done() and (left := until - loop.time()) > 0:
            try:
                self.witness.end_runs(tag(self.token, client.label), servers)
            except Exception:  # noqa: BLE001 - best effort: the stall is measured already
                return
            await asyncio.wait({task}, timeout=min(left, LOOP_LOOK))

    async def _held_kept(self, waiter: Client) -> str | None:
        """The pool stall STEP_BOUND would find (`_stalled`), known now, in words (else None): a server connection
        this scenario's clients used sits in a transaction nobody ended, reading its client's next message, and
        the route says the pooler keeps it for that client while `waiter` waits in a full pool, with no timer of
        its own within STEP_BOUND (Scenario.pool_kept); PostgreSQL has no timer that ends an idle transaction,
        and no statement of the clients named a timeout. Nothing but the holding client could end that
        transaction, and the probe sends it nothing while this call waits."""
        witness = self.witness
        if witness is None or self.pool_kept is None or self._timers_named:
            return None
        held = {server for server, _ in witness.holding({p.server for p in self.proofs}, reading=True)
                if server not in self._held_open}
        if not held:
            return None
        if self._transaction_timers is None:
            self._transaction_timers = witness.transaction_timers()
        if self._transaction_timers:
            return None
        return await self.pool_kept({server.pid for server in held}, STEP_BOUND, waiter)

    def _held(self) -> list[tuple[ServerId, str]]:
        """The server connections this scenario's clients used that sit in a transaction nobody ended (and their
        state), those it keeps open on purpose aside."""
        assert self.witness is not None
        return [(server, state) for server, state in self.witness.holding({p.server for p in self.proofs})
                if server not in self._held_open]

    def _stalled(self, client: Client, step: str, looped: str | None = None, kept: str | None = None) -> None:
        """After a step ran out of time, or its driver was seen looping (`looped`: the runs counted), or the
        stall was known before (`kept`: how long it waited, and the pooler's word): when a
        server connection this scenario's clients used sits in a transaction nobody ended, the pool stalled (an
        outcome: Stalled, and the harness ends that backend); when the client's own driver kept sending
        statements all along, its call never returns (a retry loop: Stalled too); else the step was only
        slow, and the timeout stays an error."""
        if self.witness is None:
            return
        held = self._held()
        if not held:
            if looped is not None:
                raise Stalled(f"{client.label}'s {step!r} did not return while its driver ran {looped}: a loop, "
                              "the application's call never returns")
            mine = next((p.server for p in reversed(self.proofs) if p.client == client.label), None)
            sent = self.witness.busy(mine) if mine is not None else None
            if sent is not None:  # its driver kept sending statements all along: a retry that never ends
                raise Stalled(f"{client.label}'s {step!r} did not return within {STEP_BOUND:.0f} s while its driver "
                              f"kept sending statements on {mine} (the last: {one_line(sent, 120)!r}): the "
                              "application's call never returned")
            return
        for server, _ in held:
            self.witness.terminate(server)
        last = {p.server: p for p in self.proofs}
        who = "; ".join(f"{server} stayed {state} after {last[server].client}'s {last[server].step!r}"
                        for server, state in held)
        waited = kept or (f"{STEP_BOUND:.0f} s" if looped is None else f"while its driver ran {looped}")
        raise Stalled(f"{client.label}'s {step!r} waited {waited} for a server connection: {who}: the pool stalled")

    def _connected(self, client: Client, got: Attempt) -> bool:
        """Whether the client may still be asked something after this step: not closed under it, and not in a
        transaction the step's failure aborted."""
        return got.error is None or not (got.error.closed or client.label in self._in_transaction)

    # --- the clients' steps -------------------------------------------------------------------------

    def _begins(self) -> None:
        """A client's step begins: the witness's next look (a sighting, and `confirms`) counts what ran from now on
        only, never an earlier statement on that server (another client's COMMIT in a pool of one)."""
        if self.witness is not None:
            self.witness.start()

    async def _step(self, client: Client, step: str, call: Awaitable[Any], *, may_disconnect: bool = False,
                    session_end_observed: bool = False) -> Attempt:
        may_disconnect = may_disconnect or self.session_ends_observed
        self._begins()
        got = await self._bounded(client, step,
                                  attempt(call, session_end_observed=session_end_observed or may_disconnect))
        if got.error is not None:
            self.ledger.errored(client.label, str(got.error))
            if may_disconnect and machine_fault(got.error.sqlstate, closed=got.error.closed,
                                                session_end_observed=False) is not None:
                self.ledger.disconnected(client.label, step, str(got.error))
        return got

    async def observe(self, client: Client, step: str, expr: str, *, own: Any = None) -> Any:
        """The value of one SQL expression, read in the same statement as the client's own word on its server
        identity (checked against the witness). `own`: the value only this client may get back."""
        value, = await self.observe_row(client, step, f"({expr})")
        if own is not None and value != own:
            self.ledger.other_result(client.label, step, value, own)
        return value

    async def observe_row(self, client: Client, step: str, columns: str) -> tuple[Any, ...]:
        """`observe` of several columns at once (`columns`: a SELECT list), without the identity columns."""
        sql = self.tagged(client, f"SELECT {columns}, {IDENTITY}")
        self._begins()
        rows = await self._bounded(client, step, client.query(sql))
        *values, pid, started = rows[0]
        self._prove(client, step, (pid, started))
        return tuple(values)

    async def observe_array(self, client: Client, step: str, expr: str) -> list[Any]:
        """`observe` of an array expression (ARRAY(SELECT ...)): a value of another shape (an
        array's text form, `'{a,b}'`, which iterated gives its characters) is a harness error, never
        a verdict."""
        value = await self.observe(client, step, expr)
        if not isinstance(value, list):
            raise ProbeError(f"{client.label}'s driver returned {value!r} for an array at {step!r}, not a list "
                             "(agent protocol 1: arrays as JSON arrays): nothing is measured from a misread value")
        return value

    async def run(self, client: Client, step: str, sql: str, *, may_disconnect: bool = False,
                  session_end_observed: bool = False, wrote: tuple[str, str, str] | None = None) -> Attempt:
        """One statement, as the application sends it (autocommit, or inside the transaction it opened): its
        first column of its first row, or its error. `may_disconnect`: the step may end the client's
        connection, which is then an outcome (Fact.DISCONNECTED), not a machine fault. `wrote`: the row the
        statement writes (table, column, value), into the ledger as `call` says."""
        return await self.call(client, step, client.query(self.tagged(client, sql)), may_disconnect=may_disconnect,
                               session_end_observed=session_end_observed, wrote=wrote)

    async def call(self, client: Client, step: str, sent: Awaitable[list[Row]], *, may_disconnect: bool = False,
                   session_end_observed: bool = False, wrote: tuple[str, str, str] | None = None) -> Attempt:
        """`run` of a driver call that sends one tagged statement its own way (discovery's statement with a
        bound parameter): proven as `run` proves, its first column of its first row, or its error. `wrote`:
        the row the statement writes (table, column, value), into the ledger (`wrote`) as soon as the call
        returned, before a follow-up proof that may stall: a write the application was told is committed is
        read back whatever the probe's later steps do."""
        got = await self._step(client, step, sent, may_disconnect=may_disconnect,
                               session_end_observed=session_end_observed)
        if wrote is not None:
            self.wrote(client, step, got, *wrote)
        ended = (may_disconnect or self.session_ends_observed) and got.error is not None and machine_fault(
            got.error.sqlstate, closed=got.error.closed, session_end_observed=False) is not None
        if self._prove(client, step, None, silent=not got.failed) or ended:
            pass
        elif self._connected(client, got):
            # not seen: the driver ran a statement of its own after it (PDO reads a column's type), or the
            # pooler its reset: the client's next statement, a read of its own, tells where it is (not after a
            # session end the step may cause: an agent's error does not say its connection closed)
            await self.observe(client, f"{step}: where", "1")
        else:
            self.prove_failed(client, step, got)
        if got.failed:
            return got
        rows = got.value or []
        return Attempt(value=rows[0][0] if rows and rows[0] else None)

    async def change(self, client: Client, step: str, sql: str) -> None:
        """A state change the probe cannot measure without: a failure is a harness error."""
        try:
            done = await self.run(client, step, sql)
        except DriverRefused as refused:
            refused.own = refused.who == client.label  # its driver refused the value it set itself
            raise
        if done.failed:
            raise ProbeError(f"{client.label} could not {step} ({sql}): {done}")

    async def transaction(self, client: Client, step: str, *statements: str) -> Attempt:
        """Statements in one transaction the client opens through its driver's API (a probe about
        transactions): the first column of the last statement's first row; a failure rolls back."""
        begun = await self.begin(client, step)
        if begun.failed:
            return begun
        result = Attempt()
        for sql in statements:
            result = await self.run(client, step, sql)
            if result.failed:
                await self.rollback(client, step)
                return result
        done = await self.commit(client, step)
        return done if done.failed else result

    async def spell(self, name: str, value: str) -> str | None:
        """How the server spells `SET name = value`: asked in the witness's own transaction (no client's
        session changes); without a witness (a running pooler without --direct-dsn), in A's own transaction."""
        if self.witness is not None:
            return self.witness.spell(name, value)
        got = await self.transaction(self.a, f"spell {name}", f"SET LOCAL {name} = {value}",
                                     f"SELECT current_setting('{name}', true)")
        return None if got.failed else str(got.value) if got.value is not None else None

    async def begin(self, client: Client, step: str = "BEGIN") -> Attempt:
        """The driver's own BEGIN (its transaction API)."""
        got = await self._step(client, f"{step}: begin", client.begin())
        if not got.failed:
            self._in_transaction.add(client.label)
        return got

    async def commit(self, client: Client, step: str = "COMMIT") -> Attempt:
        """The driver's own commit: its writes since `begin` are reported committed when it returns success."""
        got = await self._step(client, f"{step}: commit", client.commit())
        if got.failed and self._connected(client, Attempt()):
            # as an application does after a failed commit (a framework's rollback): a transaction left open
            # would hold the pool's only server connection, and the next client would wait for ever (a driver
            # that ended its transaction itself refuses a second end: nothing is left open then)
            with contextlib.suppress(AgentRefused):
                await attempt(client.rollback(), session_end_observed=True)
        self._in_transaction.discard(client.label)
        self.ledger.ended(client.label, committed=not got.failed, error=str(got.error) if got.failed else None)
        return got

    async def rollback(self, client: Client, step: str = "ROLLBACK") -> Attempt:
        got = await self._step(client, f"{step}: rollback", client.rollback())
        self._in_transaction.discard(client.label)
        self.ledger.ended(client.label, committed=False)
        return got

    async def prepared(self, client: Client, step: str, select: str, *, own: Any = None) -> Attempt:
        """The client's driver runs `SELECT <select>` its prepared way; the statement itself carries the
        identity columns. The value is the first column; `own`: the value only this client may get back."""
        self._last_prepared[client.label] = self.prepared_text(client, select)
        got = await self._step(client, step, client.prepared(self._last_prepared[client.label]))
        if got.failed:
            if not self._prove(client, step, None, silent=False):
                self.prove_failed(client, step, got)
            return got
        value, pid, started = got.value[0]
        self._prove(client, step, (pid, started), returned=value)
        if own is not None and value != own:
            self.ledger.other_result(client.label, step, value, own)
        return Attempt(value=value)

    def prepared_text(self, client: Client, select: str) -> str:
        """The exact text `prepared` sends for `select` (what `free` names)."""
        return self.tagged(client, f"SELECT {select}, {IDENTITY}")

    async def free(self, client: Client, step: str, sql: str) -> Attempt | None:
        """The driver drops the statement it prepared for `sql` its own way (`prepared_text`); None where the
        driver has no such call (its applications never free one)."""
        try:
            return await self._step(client, step, client.free(sql))
        except DriverRefused:  # a value its server reported, not a call it lacks
            raise
        except NotApplicable:
            return None

    async def free_last(self, client: Client, step: str) -> Attempt | None:
        """`free` of the statement the client's last prepared call (`prepared`, a prepared `write`) made."""
        return await self.free(client, step, self._last_prepared[client.label])

    async def write(self, client: Client, step: str, *, prepared: bool = False) -> Attempt:
        """The client writes one row of its own (`lc_writes`), as a plain statement or its driver's prepared way,
        in autocommit or inside the transaction it opened; the ledger checks after the run that a row it was
        told is committed is there."""
        self._writes += 1
        row = f"{self.token}-{client.label}-{self._writes}"
        # idempotent: a driver's prepared path may run a statement several times (pgjdbc's prepareThreshold)
        sql = self.tagged(client, write_statement(row, client.label))
        if prepared:
            self._last_prepared[client.label] = sql
        # proven as `call` proves a step: not seen, the client's next statement tells where it is
        got = await self.call(client, step, client.prepared(sql) if prepared else client.query(sql),
                              wrote=(WRITES_TABLE, "id", row))
        return got if got.failed else Attempt()

    def wrote(self, client: Client, step: str, got: Attempt, table: str, column: str, value: str) -> None:
        """The client's step `got` wrote the row of `table` whose `column` is `value` (`write`'s own, or a probe's
        INSERT): into the ledger, so that a row the application was told is committed and is missing is a lost
        write (`read_back`)."""
        self.ledger.wrote(Write(value, client.label, step, table, column),
                          in_transaction=client.label in self._in_transaction,
                          failed=str(got.error) if got.failed else None)

    def read_back(self) -> None:
        """The witness reads back from PostgreSQL itself the writes whose end the applications were told and that
        were not read back yet: at the end (`finish`), and first in a probe that deletes its rows as its clean-up."""
        due = [w for w in self.ledger.writes if w.told_committed is not None and id(w) not in self._read]
        if not due:
            return
        if self.witness is None:
            raise ProbeError("the probe's writes cannot be read back: no direct session to PostgreSQL (give "
                             "--direct-dsn)")
        where: dict[tuple[str, str], list[str]] = {}
        for w in due:
            where.setdefault((w.table, w.column), []).append(w.id)
            self._read.add(id(w))
        for (table, column), ids in where.items():
            self._present |= self.witness.present(table, ids, column)

    def missing(self) -> list[str]:
        """The rows read back so far (`read_back`) that the applications were told are committed and are not there."""
        return [w.id for w in self.ledger.told_committed() if id(w) in self._read and w.id not in self._present]

    def found(self, value: str) -> None:
        """A row the probe's own proven read found in the database where the witness cannot read it (another
        session's temp table): it is no lost write."""
        self._present.add(value)

    async def bind(self, client: Client, step: str, name: str) -> Attempt:
        """The client's driver executes a prepared statement by its name (Bind/Execute, no Parse): the
        driver's call for a statement it did not prepare through itself. It may end the connection."""
        got = await self._step(client, step, client.bind(name), may_disconnect=True)
        if not self._prove(client, step, None, silent=not got.failed):
            self.prove_failed(client, step, got)
        return got

    def finish(self, observation: Observation) -> Observation:
        """The observation with what the applications lost (after the clients closed): writes read back by
        the witness from PostgreSQL itself."""
        self.read_back()
        return self.ledger.facts(self._present, observation)

    # --- observers and other sessions ---------------------------------------------------------------

    async def read(self, of: Client, step: str, expr: str) -> Any:
        """An observation of `of`'s server that is no application's own (e.g. its prepared statements): by O
        through the pooler where connected clients share server connections, proven on `of`'s server;
        else by `of`'s own connection, in a statement of its own."""
        if self.observer is None:
            return await self.observe(of, step, expr)
        if self._o is None:
            self._o = await self.observer()
        slot = self._slot.get(of.label, Slot.HOME)
        self._slot[self._o.label] = slot
        try:
            value = await self.observe(self._o, f"{step} (for {of.label})", expr)
        finally:
            self._slot.pop(self._o.label, None)
        theirs = next((p.server for p in reversed(self.proofs) if p.client == of.label and p.slot is slot), None)
        if theirs is not None and self.proofs[-1].server != theirs:
            raise ProbeError(f"the observer read {of.label}'s server at {step!r} on {self.proofs[-1].server}, but "
                             f"{of.label} was on {theirs}: the clients did not share the server as the probe requires")
        return value

    async def read_array(self, of: Client, step: str, expr: str) -> list[Any]:
        value = await self.read(of, step, expr)
        if not isinstance(value, list):
            raise ProbeError(f"the observer read {value!r} for an array at {step!r}, not a list")
        return value

    async def running(self, client: Client, step: str, marker: str, within: float) -> ServerId:
        """The witness waits (at most `within` seconds) until the client's statement marked `marker` runs and
        waits (on its lock or sleep), and takes its server connection as the client's proof: a statement
        that is still running cannot return its own identity."""
        if self.witness is None:
            raise NotApplicable("watching a running statement needs a direct session to PostgreSQL (give "
                                "--direct-dsn)")
        deadline = asyncio.get_running_loop().time() + within
        while True:
            server = self.witness.running(marker)
            if server is not None:
                self._record(client.label, step, server)
                return server
            if asyncio.get_running_loop().time() > deadline:
                raise ProbeError(f"{client.label}'s statement {marker} was not seen running within {within:.0f} s")
            await asyncio.sleep(0.02)

    async def c(self) -> Client:
        """C: a direct PostgreSQL session outside the pool (a third application, or an operator)."""
        if self._c is None:
            if self.third is None:
                raise ProbeError("this route offers no direct session for a third client")
            self._c = await self.third()
        return self._c

    async def _identity(self, client: Client) -> ServerId:
        """The server connection of the client's open transaction block (no proof recorded)."""
        (pid, started), = [r[:2] for r in await client.query(f"SELECT {IDENTITY}")]
        return ServerId(int(pid), str(started))

    async def keep_a_home(self) -> None:
        """Before A's first step of a probe that moves A (a_on_another_server). On a pooler that hands
        out servers in its own order (Odyssey; `holder` given), H opens a transaction and holds one
        server connection of the pool of two, so each of A's transactions runs on the other one,
        HOME; a_on_another_server then has B claim HOME and lets H's go to A. Elsewhere (PgBouncer
        hands B the server A used last; a running pooler's pool size is not known) it does nothing."""
        if self.holder is None or self.route is not Route.TRANSACTION or self._h is not None:
            return
        self._h = await self.holder()
        await self._h.begin()
        self._h_server = await self._identity(self._h)

    async def _claim_home_while_h_holds(self, home: ServerId | None) -> None:
        """B opens its transaction while H holds the pool's other server connection: a pool of two
        leaves B only A's (checked, with every server named); then H commits, so A's next steps can
        only be given the one H held."""
        assert self._h is not None
        await self.b.begin()
        got = await self._identity(self.b)
        if home is not None and got != home:
            await attempt(self.b.commit())
            raise NotApplicable(f"B was handed {got}, not A's server connection {home}, while H held "
                                f"{self._h_server}: the pooler did not keep to the pool of two server connections "
                                "the probe asked for, so A cannot be moved to another one as this probe needs")
        await attempt(self._h.commit())

    async def _claim_by_retries(self, home: ServerId | None) -> None:
        """B opens transactions until it is handed A's server connection (PgBouncer hands B the one A
        used last at once: the proofs check it); PLACEMENT_TRIES at most, then not applicable."""
        handed: list[str] = []
        for _ in range(PLACEMENT_TRIES):
            await self.b.begin()
            got = await self._identity(self.b)
            if home is None or got == home:
                return
            handed.append(str(got))
            await attempt(self.b.commit())
        raise NotApplicable(f"B could not claim A's server connection ({home}) in {PLACEMENT_TRIES} "
                            f"transactions (B was handed {', '.join(sorted(set(handed)))}): the pooler keeps B on "
                            "other server connections (in its own order, or each connected client on its own), so A "
                            "cannot be moved to another one as this probe needs")

    @contextlib.asynccontextmanager
    async def a_on_another_server(self) -> AsyncIterator[None]:
        """B, another application, holds a transaction open on A's server, so A's steps inside the block run
        on another server connection (the probe needs pool_size=2). A's proofs inside are AWAY, B's stay
        HOME; the classifier checks both. On a pooler that hands out servers in its own order, H
        (keep_a_home) makes B's claim certain; without H (a running pooler) B gets a few tries, and then
        the move cannot be set up: not applicable."""
        a_last = next((p.server for p in reversed(self.proofs) if p.client == self.a.label), None)
        if self.route is not Route.TRANSACTION or self.placement_promised:
            a_last = None  # the controls have sessions of their own; PgBouncer's choice the proofs check
        if self._h is not None:
            await self._claim_home_while_h_holds(a_last)
        else:
            await self._claim_by_retries(a_last)
        held: ServerId | None = None
        try:
            await self.observe(self.b, "holds A's server", "1")
            held = next((p.server for p in reversed(self.proofs) if p.client == self.b.label), None)
            if held is not None:
                self._held_open.add(held)
            self._slot[self.a.label] = Slot.AWAY
            try:
                yield
            finally:
                self._slot.pop(self.a.label, None)
        finally:
            await attempt(self.b.commit())
            if held is not None:
                self._held_open.discard(held)

    async def hand_over(self) -> None:
        """A leaves (disconnects); then B, the next application, connects. A pooler that caches A's
        server connection hands it to B, which the proofs check (a pool of one, one pgpool-II child).
        On the direct route B gets a new backend; on the shared route (the positive control) B takes
        over A's very session, with nothing reset; on the session route (a negative control) A stays
        connected, so B is given a server connection of its own."""
        if self.route is Route.SHARED:
            self.b = self.a.alias("B")
            return
        if self.next_b is None:
            raise ProbeError("this scenario has no next client for a hand-over")
        if self.route is not Route.SESSION:
            await self.a.close()
        self.b = await self.next_b()

    async def close(self) -> None:
        for client in (self._c, self._h, self._o):
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.close()
