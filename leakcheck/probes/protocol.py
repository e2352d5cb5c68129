"""The protocol's own traffic through a pooler, from bugs users hit in 2025-2026: a COPY whose data fails
while the client still sends it, Parse and Close in one pipeline, and what a pooler announces at login.

Each is about what one client's own calls do (Scope.TRANSACTION: isolated on every control route); what the
other client meets afterwards on the server they share is part of the measurement.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from leakcheck.drivers.interface import Client, CopyIn, Piped, PipedResult
from leakcheck.model.errors import NotApplicable, ProbeError
from leakcheck.model.verdicts import Observation, Scope, ServerId
from leakcheck.probes.base import Probe, attempt, probe, said
from leakcheck.probes.outcomes import WRITES_TABLE, Stalled
from leakcheck.probes.prepared import names_after
from leakcheck.probes.scenario import CANCEL_GRACE, Scenario, _retrieved

#: Seconds a client's statement may wait for a server connection that sits idle before the pool counts as
#: stalled: the pooler hands a free server connection out in microseconds; generous for a loaded machine.
IDLE_BOUND = 5.0
#: A's COPY: its malformed first row (one column of two), flushed; COPY_PAUSE seconds later (the server has failed
#: the COPY and said ReadyForQuery meanwhile, a matter of milliseconds), 16 chunks of 16 kB of rows and the copy's
#: end: the client still sending when the server has failed the COPY, as a bulk load whose data fails early
#: (PgBouncer's own test of it waits 1 s too). Without the pause the race went either way: PgBouncer 1.18 with
#: asyncpg stalled in about half the runs with 1 MB after the first row. Each row's id carries the scenario's token
#: (`{token}`).
COPY_PAUSE = 1.0
#: Where the witness watches A's server connection, the pause ends once it sees the server has failed the COPY
#: and sent its ReadyForQuery (a look every COPY_LOOK seconds), COPY_SETTLE seconds later (the pooler reads that
#: ReadyForQuery before A's next data reaches it): leakcheck's own clients then send on, an agent on the `go` the
#: harness then sends it (docs/agent-protocol.md); COPY_PAUSE is then its bound.
COPY_LOOK = 0.01
COPY_SETTLE = 0.05
COPY_FIRST = "{token}-malformed\n"
COPY_ROW = "{token}-copy\tA\n"
COPY_CHUNK_BYTES = 16 * 1024
COPY_TIMES = 16
#: Seconds between looks at a waiting client's pool (`_kept`): a step through a free pool takes milliseconds.
KEPT_LOOK = 0.2


async def waited(s: Scenario, client: Client, step: str, holder: Client, call: Awaitable[Any] | None = None) -> Any:
    """`client`'s step (`call`, else its next statement, an observation), waited for IDLE_BOUND at most:
    longer, while every server connection of the scenario sits idle, means the pooler keeps the client from one
    (Stalled); `holder`, the application whose connection the pooler keeps it for, then leaves (its connection closed,
    as an application that gives up does), so nothing waits on after the probe. While one is busy, the step was only
    slow. Before the bound, every KEPT_LOOK seconds, the same stall is known once it is conclusive (`_kept`): the pooler
    says it keeps each of those idle servers for a client while the waiting client itself waits."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    task = asyncio.ensure_future(call if call is not None else s.observe(client, step, "1"))
    kept: str | None = None
    try:
        done, _ = await asyncio.wait({task}, timeout=min(KEPT_LOOK, IDLE_BOUND))
        while not done and (left := began + IDLE_BOUND - loop.time()) > 0:
            try:  # a look is bounded by what is left of IDLE_BOUND (the console's own waits are longer)
                kept = await asyncio.wait_for(_kept(s, client), left)
            except TimeoutError:
                kept = None
            if kept is not None or task.done():
                break
            done, _ = await asyncio.wait({task}, timeout=min(KEPT_LOOK, max(0.0, began + IDLE_BOUND - loop.time())))
        if task.done():  # returned, even during the last look: its result, never a stall
            return task.result()
    finally:
        if not task.done():
            task.cancel()
            task.add_done_callback(_retrieved)
            await asyncio.wait({task}, timeout=CANCEL_GRACE)
    witness = s.witness
    if witness is None:
        raise TimeoutError(f"{client.label}'s {step!r} did not return within {IDLE_BOUND:.0f} s")
    servers = {p.server for p in s.proofs if witness.alive(p.server)}
    idle = witness.idle(servers)
    if not idle or len(idle) < len(servers):
        raise TimeoutError(f"{client.label}'s {step!r} did not return within {IDLE_BOUND:.0f} s")
    last = {p.server: p for p in s.proofs}
    sat = "; ".join(f"{server} sat idle after {last[server].client}'s {last[server].step!r}" for server in idle)
    with contextlib.suppress(Exception):  # the measurement is taken: closing is the harness's clean-up
        await asyncio.wait_for(holder.close(), IDLE_BOUND)
    waited_for = f"{IDLE_BOUND:.0f} s" if kept is None else f"{loop.time() - began:.1f} s ({kept})"
    raise Stalled(f"{client.label}'s {step!r} waited {waited_for} for a server connection while {sat}: "
                  f"the pooler kept it for {holder.label}") from None


async def _kept(s: Scenario, waiter: Client) -> str | None:
    """The stall IDLE_BOUND would find, known now: every server connection of the scenario sits idle, reading
    its client's next message (PostgreSQL sent its ReadyForQuery), and the route says the pooler keeps each for a
    client while `waiter` waits in a full pool, with no timer of its own or of PostgreSQL's within IDLE_BOUND
    (Scenario.pool_kept). Nothing in the probe sends on the keeping client meanwhile: what the pooler keeps now
    it still keeps at the bound. In words, else None."""
    witness = s.witness
    if witness is None or s.pool_kept is None:
        return None
    servers = {p.server for p in s.proofs if witness.alive(p.server)}
    if not servers or len(witness.reading(servers)) < len(servers):
        return None
    return await s.pool_kept({server.pid for server in servers}, IDLE_BOUND, waiter)


@probe("copy_error_autocommit", "COPY FROM STDIN outside a transaction, its data failing while the client still "
       "sends it (PgBouncer 1.26 changed COPY in transaction mode): does the pool get its server connection back?",
       scope=Scope.TRANSACTION, fixtures=True)
async def copy_error_autocommit(s: Scenario) -> Observation:
    # B: takes its proof first, on the server connection A is about to use (a pool of one).
    await s.observe(s.b, "before A's COPY", "1")
    await s.observe(s.a, "before its COPY", "1")
    # A: COPY ... FROM STDIN in autocommit through its driver's copy API, as a bulk load whose data fails early:
    # a malformed first row (one column of two), flushed; the rest of its rows once the server has failed the
    # COPY (COPY_PAUSE); then the copy's end. Its end may close A's connection, or never come.
    row = COPY_ROW.format(token=s.token)
    chunk = row * (COPY_CHUNK_BYTES // len(row))
    copy = CopyIn(sql=s.tagged(s.a, f"COPY {WRITES_TABLE} (id, who) FROM STDIN"), table=WRITES_TABLE,
                  columns=("id", "who"), first=COPY_FIRST.format(token=s.token), rows=chunk, times=COPY_TIMES,
                  pause=COPY_PAUSE, settled=_copy_failed(s))
    copied = await waited(s, s.a, "COPY", s.a, attempt(s.a.copy_in(copy), session_end_observed=True))
    for sent in dict.fromkeys(line.split("\t", 1)[0] for line in (copy.first + row).splitlines()):
        s.wrote(s.a, "COPY", copied, WRITES_TABLE, "id", sent)  # its rows, as a write's: read back after the probe
    error = copied.error
    if error is None:  # told it succeeded: a row of it missing is a lost write, the outcome
        s.read_back()
        if not s.missing():
            raise ProbeError(f"A's COPY of a malformed row gave {copied}, and its rows are in the database, not a data "
                             "error: nothing was exercised")
        return Observation(evidence=f"A's COPY of a malformed first row gave {copied}: told it succeeded")
    if error.closed:
        s.ledger.disconnected(s.a.label, "COPY", str(error))
    elif not error.sqlstate.startswith("22"):
        raise ProbeError(f"A's COPY of a malformed row gave {copied}, not a data error: nothing was exercised")
    # A: its next statement; then B's (in a pool of one, on the server connection A's COPY used).
    a_next = "none: its connection was closed" if s.ledger.disconnects else said(
        await waited(s, s.a, "next statement after its COPY", holder=s.a))
    await waited(s, s.b, "statement after A's COPY", holder=s.a)
    a_server, b_server = (_last(s, who) for who in ("A", "B"))
    return Observation(
        evidence=f"A's COPY (a malformed first row, {len(chunk) * COPY_TIMES // 1024} kB more {_after(copy.seen)}) "
        f"gave {copied}; "
        f"A's next statement: {a_next} (on {a_server}); B's ran on {b_server}",
    )


def _copy_failed(s: Scenario) -> Callable[[], Awaitable[float | None]] | None:
    """The end of A's COPY pause where the witness watches the server connections this scenario proved so far
    (the COPY runs on one of them, or the pause runs to its bound): once it sees one has failed the COPY,
    COPY_SETTLE seconds later (it returns how long after the pause began it saw it: CopyIn.seen keeps that where
    the client's pause ended on it); at COPY_PAUSE, unseen (None). None (a pause by time) without a witness or a
    proof."""
    witness, servers = s.witness, {p.server for p in s.proofs}
    if witness is None or not servers:
        return None

    async def settled() -> float | None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        while loop.time() - began < COPY_PAUSE:
            if witness.failed_copy(servers):
                seen = loop.time() - began
                await asyncio.sleep(COPY_SETTLE)
                return seen
            await asyncio.sleep(COPY_LOOK)
        return None

    return settled


def _after(seen: list[float]) -> str:
    if seen:
        return (f"{COPY_SETTLE:.2f} s after the server was seen to fail it ({seen[0]:.2f} s after the witness began "
                "to watch)")
    return f"{COPY_PAUSE:.0f} s later"


def _last(s: Scenario, who: str) -> ServerId | None:
    return next((p.server for p in reversed(s.proofs) if p.client == who), None)


def _expected(results: tuple[PipedResult, ...], want: tuple[str, ...]) -> str | None:
    """Where the driver's results differ from what each command gives (libpq's ExecStatus), in words."""
    wrong = [f"command {i + 1}: {got} where {w} belongs" for i, (got, w) in enumerate(zip(results, want, strict=True))
             if got.status != w]
    return "; ".join(wrong) or None


@probe("parse_close_batch", "Parse and Close of prepared statements in one pipeline without a Sync between them "
       "(PgBouncer 1.26 fixed the order of their responses): does each call get its own answer?",
       scope=Scope.TRANSACTION)
async def parse_close_batch(s: Scenario) -> Observation:
    mine, theirs = s.name("batch_a"), s.name("batch_b")
    text = s.prepared_text(s.a, f"'{mine}'::text")
    first, second = s.name("s1"), s.name("s2")
    await s.observe(s.a, "connected", "1")
    # A: prepares its statement by name and runs it (one pipeline, one Sync): its server connection holds it
    # (through a pooler that tracks statements, under the pooler's own name).
    setup = await s.a.pipeline((Piped("prepare", first, text), Piped("execute", first)))
    if setup.stuck or _expected(setup.results, ("COMMAND_OK", "TUPLES_OK")):
        raise ProbeError(f"A's first pipeline gave {', '.join(map(str, setup.results))}"
                         f"{f' ({setup.stuck})' if setup.stuck else ''}: nothing was exercised")
    # A: one pipeline: Parse of the same text under a second name, Close of the first, Execute of the second, Sync.
    got = await s.a.pipeline((Piped("prepare", second, text), Piped("close", first), Piped("execute", second)))
    wrong = _expected(got.results, ("COMMAND_OK", "COMMAND_OK", "TUPLES_OK"))
    value = got.results[2].value
    if not wrong and value != mine:
        s.ledger.other_result(s.a.label, "pipeline's Execute", value, mine)
    # A: its next statement (a connection stuck in pipeline mode has none); B: its own prepared statement on the
    # server connection A's pipeline used.
    a_next = "none: its connection cannot leave pipeline mode" if got.stuck else said(
        await s.observe(s.a, "next statement", "1"))
    b_run = await s.prepared(s.b, "prepared run", f"'{theirs}'::text", own=theirs)
    return Observation(
        evidence=f"A's pipeline (Parse {second}, Close {first}, Execute {second}, Sync) gave "
        f"{', '.join(map(str, got.results))}" + (f"; it could not end: {got.stuck}" if got.stuck else "")
        + f". A's next statement: {a_next}. B's prepared run then gave {b_run}",
        broke="; ".join(w for w in (
            f"A's pipeline: {wrong}" if wrong else None, f"A's connection: {got.stuck}" if got.stuck else None,
            f"B's prepared run: {b_run}" if b_run.failed else None) if w) or None,
    )


@probe("pooler_announced", "what a pooler announces at login (PgBouncer 1.26's pgbouncer.pool_mode and "
       "pgbouncer.max_prepared_statements ParameterStatus) against what it does", scope=Scope.TRANSACTION)
async def pooler_announced(s: Scenario) -> Observation:
    # PostgreSQL reports integer_datetimes at every login: a driver that does not show it shows only some values
    # (PDO) or none (node-postgres), and what the pooler announced cannot be read through it.
    if s.a.reported("integer_datetimes") is None:
        raise NotApplicable("A's driver does not show every ParameterStatus value it was sent (not even "
                            "integer_datetimes, which PostgreSQL reports at every login), so what a pooler announces "
                            "cannot be read through it")
    mode, limit, version = (s.a.reported(f"pgbouncer.{n}") for n in ("pool_mode", "max_prepared_statements", "version"))
    # A and B, both connected: which server connection is each given? (shared: transaction or statement mode)
    await s.observe(s.a, "connected", "1")
    await s.observe(s.b, "connected", "1")
    shared = _last(s, "A") == _last(s, "B")
    # A: a statement its driver prepares; an observer reads whose name it has on the server (PgBouncer's own
    # PGBOUNCER_n when the pooler tracks prepared statements, else the driver's).
    marker = s.name("announced")
    for step in ("prepared run", "prepared run again"):
        await s.prepared(s.a, step, f"'{marker}'::text", own=marker)
    names = await names_after(s, marker)
    tracked = any(n.startswith("PGBOUNCER_") for n in names) if names else None
    wrong = []
    if mode is not None and (mode != "session") != shared:
        wrong.append(f"pool_mode {mode!r}, but A and B, both connected, were given "
                     f"{'one server connection' if shared else 'two'}")
    if limit is not None and limit.isdigit() and tracked is not None and shared and (int(limit) > 0) != tracked:
        wrong.append(f"max_prepared_statements {limit}, but A's statement is named {names} on the server")
    heard = ", ".join(f"{n}={v!r}" for n, v in (("pgbouncer.version", version), ("pgbouncer.pool_mode", mode),
                                                 ("pgbouncer.max_prepared_statements", limit)) if v is not None)
    return Observation(
        evidence=f"announced at login: {heard or 'nothing'}. Measured: A and B were given "
        f"{'one server connection' if shared else 'two server connections'}; A's prepared statement is named "
        f"{names or 'nothing (its driver did not prepare)'} on the server"
        + (f"; misreported: {'; '.join(wrong)}" if wrong else ""),
        misreported=bool(wrong),
        details=(("announced_pool_mode", said(mode)), ("announced_max_prepared_statements", said(limit)),
                 ("shared_server_connection", str(shared)), ("tracked_statements", said(tracked))),
    )


PROBES: tuple[Probe, ...] = (copy_error_autocommit, parse_close_batch, pooler_announced)
