"""Hand-overs: A leaves, the next application B connects, and is handed A's server connection.

pgpool-II caches a backend per child process for the next session (`connection_cache`) and runs
`reset_query_list` when a client disconnects; PgBouncer and Odyssey in session mode run their reset
(`server_reset_query`, `pool_discard`) when a client leaves. A pool of one makes the pooler hand B
the server A used, which the proofs check (Scenario.hand_over); what A left there, B observes.
Only B's own session counts (its own locks, its own temp schema, its own channels): A's backend,
on the direct route, may still be ending while B connects.
"""

from __future__ import annotations

import zlib

from leakcheck.model.verdicts import Observation
from leakcheck.probes.base import Probe, probe, said
from leakcheck.probes.listen import sentinel
from leakcheck.probes.scenario import Scenario
from leakcheck.probes.settings import setting


async def _left(s: Scenario, what: str, statement: str, check: str, expected: object) -> bool:
    """A changes its session (one autocommit statement, as an application does), reads the change back in
    its next statement, and leaves for B. Whether A still had it then is returned (False: the pooler
    cleaned it between A's statements, e.g. its reset after each transaction). Only a LISTEN's loss is a
    fact of its probe: for the others what B is handed is the question (custom_setting and its kin measure
    what A keeps); the evidence says it all the same."""
    await s.change(s.a, what, statement)
    mine = await s.observe(s.a, f"read back {what}", check)
    await s.hand_over()
    return bool(mine == expected)


def _gone(kept: bool) -> str:
    return "" if kept else " (A's own next statement no longer had it: the pooler cleaned it)"


@probe("handover_setting", "a SET the previous client left (work_mem)", handover=True)
async def handover_setting(s: Scenario) -> Observation:
    # A: a session-level setting no pooler tracks; A leaves. B: connects and reads it.
    kept = await _left(s, "SET work_mem", "SET work_mem = '1234kB'", setting("work_mem"), "1234kB")
    seen = await s.observe(s.b, "read work_mem", setting("work_mem"))
    return Observation(evidence=f"A: SET work_mem='1234kB'{_gone(kept)}, left. B, the next client, read {said(seen)}",
                       leaked=seen == "1234kB")


@probe("handover_temp_table", "a temporary table the previous client left", handover=True)
async def handover_temp_table(s: Scenario) -> Observation:
    table = s.name("tmp")
    regclass = f"to_regclass('pg_temp.{table}')::text"  # B's own temp schema only
    # A: a temp table lives until its session ends; A leaves. B: does its session resolve it?
    kept = await _left(s, "CREATE TEMP TABLE", f"CREATE TEMP TABLE {table} (v int)", f"{regclass} IS NOT NULL", True)
    seen = await s.observe(s.b, "to_regclass", regclass)
    return Observation(evidence=f"A: CREATE TEMP TABLE {table}{_gone(kept)}, left. B resolved it as {said(seen)}",
                       leaked=seen is not None)


@probe("handover_advisory_lock", "a session advisory lock the previous client left", handover=True)
async def handover_advisory_lock(s: Scenario) -> Observation:
    key = zlib.crc32(s.token.encode()) & 0x7FFFFFFF
    mine = (f"(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = {key} AND granted "
            "AND pid = pg_backend_pid())")
    # A: takes a session lock and leaves without unlocking. B: does its own session hold it?
    kept = await _left(s, "pg_advisory_lock", f"SELECT pg_advisory_lock({key})", mine, 1)
    held = await s.observe(s.b, "read pg_locks", mine)
    if int(held):
        await s.run(s.b, "unlock all", "SELECT pg_advisory_unlock_all()")
    return Observation(evidence=f"A: pg_advisory_lock({key}){_gone(kept)}, left. B's own session holds it {held} "
                       "time(s)", leaked=int(held) > 0)


@probe("handover_prepare", "an SQL prepared statement the previous client left", handover=True)
async def handover_prepare(s: Scenario) -> Observation:
    stmt = s.name("stmt")
    count = f"(SELECT count(*) FROM pg_prepared_statements WHERE name = '{stmt}')"
    # A: PREPARE (a session's statement, as SQL); A leaves. B: is it in B's session? Can B run it?
    kept = await _left(s, "PREPARE", f"PREPARE {stmt} AS SELECT 42", count, 1)
    seen = await s.observe(s.b, "read pg_prepared_statements", count)
    ran = await s.run(s.b, "EXECUTE", f"EXECUTE {stmt}") if int(seen) else None
    return Observation(evidence=f"A: PREPARE {stmt}{_gone(kept)}, left. B's pg_prepared_statements lists {seen}"
                       + (f"; B's EXECUTE gave {ran}" if ran is not None else ""),
                       leaked=int(seen) > 0)


@probe("handover_listen", "a LISTEN the previous client left (is B notified?)", handover=True)
async def handover_listen(s: Scenario) -> Observation:
    channel, mark = s.name("chan"), s.name("sb")
    listed = f"'{channel}' = ANY(ARRAY(SELECT pg_listening_channels()))"
    # A: subscribes and leaves. B: is its session listening? C, outside the pool, notifies the channel;
    # then B notifies itself on its own channel, a sentinel that arrives after C's notification would.
    kept = await _left(s, "LISTEN", f"LISTEN {channel}", listed, True)
    b_listens = await s.observe(s.b, "read pg_listening_channels", listed)
    c = await s.c()
    await c.execute(f"NOTIFY {channel}, 'from_c'")
    if not await sentinel(s, s.b, mark):
        return Observation(evidence="B's own sentinel notification did not arrive",
                           broke="LISTEN/NOTIFY did not deliver a client's own notification")
    got = sum(n.channel == channel for n in s.b.notifications)
    await s.run(s.b, "UNLISTEN", "UNLISTEN *")
    return Observation(evidence=f"A: LISTEN {channel}{_gone(kept)}, left. B's session listens on it: "
                       f"{said(b_listens)}; "
                       f"C notified it and B (which never listened) received {got} notification(s), "
                       "proven final by a sentinel",
                       leaked=bool(b_listens) or got > 0, lost=not kept)


@probe("handover_role", "a SET ROLE the previous client left", handover=True, security=True, fixtures=True)
async def handover_role(s: Scenario) -> Observation:
    # A: switches to another role and leaves. B: which role does its query run as?
    kept = await _left(s, "SET ROLE", "SET ROLE leakcheck_other", "current_user", "leakcheck_other")
    seen = await s.observe(s.b, "read current_user", "current_user")
    return Observation(evidence=f"A: SET ROLE leakcheck_other{_gone(kept)}, left. B's current_user is {said(seen)}",
                       leaked=seen == "leakcheck_other")


PROBES: tuple[Probe, ...] = (
    handover_setting, handover_temp_table, handover_advisory_lock, handover_prepare, handover_listen, handover_role,
)
