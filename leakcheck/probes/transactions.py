"""Statement lifecycles as applications run them, and what each application keeps: its commits, its
connection, its own results (the outcome oracles, probes/outcomes.py).

Each client is driven through its driver's ordinary API only: its transaction API, its prepared path, its
own call to free a statement (where it has one: a driver without one skips that step, as its applications
do). What a transaction wrote is read back by the witness from PostgreSQL after the run. These probes are
about what one client's own calls do, so no control may see anything cross (Scope.TRANSACTION: isolated on
every control route).
"""

from __future__ import annotations

from leakcheck.model.verdicts import Observation, Scope
from leakcheck.probes.base import Attempt, Probe, probe, said
from leakcheck.probes.prepared import fails
from leakcheck.probes.scenario import Scenario
from leakcheck.probes.settings import setting


def _freed(freed: Attempt | None) -> str:
    return "its driver has no call to free one" if freed is None else str(freed)


@probe("tx_free_before_commit", "a transaction that frees its prepared statement before COMMIT (PDO's statement "
       "going out of scope): is the commit kept?", scope=Scope.TRANSACTION, fixtures=True)
async def tx_free_before_commit(s: Scenario) -> Observation:
    await s.observe(s.a, "connected", "1")
    # A: one unit of work as PDO applications write it: BEGIN, a prepared INSERT, the statement freed (its
    # object goes out of scope: pdo_pgsql sends DEALLOCATE), COMMIT. Its driver's own words for each step.
    began = await s.begin(s.a, "unit of work")
    wrote = await s.write(s.a, "prepared INSERT in the transaction", prepared=True)
    freed = await s.free_last(s.a, "free the INSERT")
    done = await s.commit(s.a, "unit of work")
    # B: another application's write afterwards, on the server A used.
    b_wrote = await s.write(s.b, "INSERT after A's commit")
    await s.observe(s.b, "after A's commit", "1")
    return Observation(
        evidence=f"A: BEGIN gave {began}, a prepared INSERT {wrote}, freeing it: {_freed(freed)}, COMMIT {done}. "
        f"B's INSERT afterwards gave {b_wrote}",
        broke=fails(("A's BEGIN", began), ("A's INSERT", wrote), ("A's COMMIT", done), ("B's INSERT", b_wrote)),
    )


@probe("tx_unit_of_work", "an ORM-style unit of work (BEGIN, prepared SELECT, INSERT, UPDATE, COMMIT) by both "
       "clients in turn: each keeps its writes and gets its own results", scope=Scope.TRANSACTION, fixtures=True)
async def tx_unit_of_work(s: Scenario) -> Observation:
    mine, theirs = s.name("uow_a"), s.name("uow_b")
    told = []
    for client, own in ((s.a, mine), (s.b, theirs), (s.a, mine)):
        # A, then B, then A again: each a transaction of its own through its driver, on the one server.
        began = await s.begin(client, "unit of work")
        read = await s.prepared(client, "prepared SELECT", f"'{own}'::text", own=own)
        wrote = await s.write(client, "prepared INSERT", prepared=True)
        changed = await s.run(client, "UPDATE its row", f"UPDATE lc_writes SET who = who WHERE id LIKE '{s.token}-%'")
        done = await s.commit(client, "unit of work")
        told.append((client.label, began, read, wrote, changed, done))
    return Observation(
        evidence="; ".join(f"{who}: BEGIN {b}, SELECT {r}, INSERT {w}, UPDATE {u}, COMMIT {d}"
                           for who, b, r, w, u, d in told),
        broke=fails(*((f"{who}'s {what}", got) for who, *steps in told
                      for what, got in zip(("BEGIN", "SELECT", "INSERT", "UPDATE", "COMMIT"), steps, strict=True))),
    )


@probe("tx_prepare_close", "a statement prepared, freed, and prepared again while another client prepares its own",
       scope=Scope.TRANSACTION)
async def tx_prepare_close(s: Scenario) -> Observation:
    mine, theirs = s.name("pc_a"), s.name("pc_b")
    # A: prepares and runs its statement (autocommit), then frees it by its driver's own call.
    first = await s.prepared(s.a, "prepared run", f"'{mine}'::text", own=mine)
    freed = await s.free(s.a, "free it", s.prepared_text(s.a, f"'{mine}'::text"))
    # B: its own statement, which its driver may name as A's driver named the freed one.
    b_run = await s.prepared(s.b, "prepared run", f"'{theirs}'::text", own=theirs)
    # A: prepares the same text again (its driver's next name) and must get its own value back.
    again = await s.prepared(s.a, "prepared again", f"'{mine}'::text", own=mine)
    b_again = await s.prepared(s.b, "prepared again", f"'{theirs}'::text", own=theirs)
    return Observation(
        evidence=f"A's prepared run gave {first}, freeing it: {_freed(freed)}; B's own gave {b_run}; A's again "
        f"{again}; B's again {b_again}",
        broke=fails(("A", first), ("A's free", freed or Attempt()), ("B", b_run), ("A again", again),
                    ("B again", b_again)),
    )


@probe("tx_cursor", "a cursor inside a transaction (DECLARE, FETCH, CLOSE, COMMIT) by each client in turn",
       scope=Scope.TRANSACTION)
async def tx_cursor(s: Scenario) -> Observation:
    told = []
    for client, own in ((s.a, s.name("cur_a")), (s.b, s.name("cur_b"))):
        cursor = s.name(f"c{client.label.lower()}")
        began = await s.begin(client, "cursor")
        declared = await s.run(client, "DECLARE", f"DECLARE {cursor} CURSOR FOR SELECT '{own}'::text")
        fetched = await s.run(client, "FETCH", f"FETCH 1 FROM {cursor}")
        if not fetched.failed and fetched.value != own:
            s.ledger.other_result(client.label, "FETCH", fetched.value, own)
        closed = await s.run(client, "CLOSE", f"CLOSE {cursor}")
        done = await s.commit(client, "cursor")
        told.append((client.label, began, declared, fetched, closed, done))
    return Observation(
        evidence="; ".join(f"{who}: BEGIN {b}, DECLARE {d}, FETCH {f}, CLOSE {c}, COMMIT {e}"
                           for who, b, d, f, c, e in told),
        broke=fails(*((f"{who}'s {what}", got) for who, *steps in told
                      for what, got in zip(("BEGIN", "DECLARE", "FETCH", "CLOSE", "COMMIT"), steps, strict=True))),
    )


@probe("bind_unprepared", "a client executes by name a statement its driver did not prepare (a SQL PREPARE, "
       "then the protocol's Bind): is it, or the other client, disconnected or moved?", scope=Scope.TRANSACTION)
async def bind_unprepared(s: Scenario) -> Observation:
    stmt, theirs = s.name("bound"), "123s"
    # B: a session setting of its own, on the server they share.
    await s.change(s.b, "SET statement_timeout", f"SET statement_timeout = '{theirs}'")
    b_before = await s.observe(s.b, "read statement_timeout", setting("statement_timeout"))
    # A: prepares a statement with SQL (poolers pass it through), then executes it by name through its
    # driver's call for a statement it did not prepare itself (libpq PQexecPrepared, exec_prepared...).
    await s.change(s.a, "PREPARE", f"PREPARE {stmt} AS SELECT 42")
    bound = await s.bind(s.a, "execute by name", stmt)
    # B: its next statement, and its own setting: still there?
    b_after = await s.observe(s.b, "read statement_timeout again", setting("statement_timeout"))
    if not bound.failed:
        await s.run(s.a, "DEALLOCATE", f"DEALLOCATE {stmt}")
    return Observation(
        evidence=f"B: SET statement_timeout='{theirs}' (read {said(b_before)}). A: PREPARE {stmt}, then its driver "
        f"executed {stmt} by name: {bound}. B then read {said(b_after)}",
        lost=b_before == theirs and b_after != theirs,
        broke=f"A's execution by name: {bound}" if bound.failed and not s.ledger.disconnects else None,
    )


PROBES: tuple[Probe, ...] = (tx_free_before_commit, tx_unit_of_work, tx_prepare_close, tx_cursor, bind_unprepared)
