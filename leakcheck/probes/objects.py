"""Session-scoped objects: temporary tables, cursors, SQL-level prepared statements."""

from __future__ import annotations

from leakcheck.model.errors import ProbeError
from leakcheck.model.verdicts import Observation, Scope
from leakcheck.probes.base import Probe, probe, said
from leakcheck.probes.scenario import Scenario


def _regclass(name: str) -> str:
    return f"to_regclass('pg_temp.{name}')::text"


@probe("temp_table", "temporary table (plain)")
async def temp_table(s: Scenario) -> Observation:
    table = s.name("tmp")
    # A: a temp table lives until A's session ends.
    await s.change(s.a, "CREATE TEMP TABLE", f"CREATE TEMP TABLE {table} (v int)")
    # B: does B's session resolve A's table? A: does it still?
    seen = await s.observe(s.b, "to_regclass", _regclass(table))
    mine = await s.observe(s.a, "to_regclass", _regclass(table))
    return Observation(
        evidence=f"A: CREATE TEMP TABLE {table}. B resolved it as {said(seen)}; A as {said(mine)}",
        leaked=seen is not None,
        lost=mine is None,
    )


@probe("temp_table_on_commit_drop", "temporary table ON COMMIT DROP", scope=Scope.TRANSACTION)
async def temp_table_on_commit_drop(s: Scenario) -> Observation:
    table = s.name("tmpdrop")
    # A: a temp table that vanishes at the end of A's transaction (opened through its driver's API).
    inside = await s.transaction(s.a, "CREATE TEMP TABLE ON COMMIT DROP",
                                 f"CREATE TEMP TABLE {table} (v int) ON COMMIT DROP", f"SELECT {_regclass(table)}")
    if inside.value is None:
        raise ProbeError(f"A's transaction could not resolve its own {table} ({inside}); nothing was exercised")
    # B: nothing should remain.
    seen = await s.observe(s.b, "to_regclass", _regclass(table))
    return Observation(
        evidence=f"A: CREATE TEMP TABLE {table} ON COMMIT DROP, COMMIT. B resolved it as {said(seen)}",
        leaked=seen is not None,
    )


def _cursors(name: str) -> str:
    return f"(SELECT count(*) FROM pg_cursors WHERE name = '{name}')"


@probe("with_hold_cursor", "WITH HOLD cursor")
async def with_hold_cursor(s: Scenario) -> Observation:
    cursor = s.name("cur")
    # A: a cursor that outlives its transaction.
    await s.change(s.a, "DECLARE WITH HOLD", f"DECLARE {cursor} CURSOR WITH HOLD FOR SELECT generate_series(1, 3)")
    # B: can B's session see A's cursor? A: can it still FETCH from it?
    seen = await s.observe(s.b, "read pg_cursors", _cursors(cursor))
    mine = await s.run(s.a, "FETCH", f"FETCH 1 FROM {cursor}")
    await s.run(s.a, "CLOSE", f"CLOSE {cursor}")
    return Observation(
        evidence=f"A: DECLARE {cursor} WITH HOLD. B's pg_cursors lists {seen}; A's FETCH gave {mine}",
        leaked=int(seen) > 0,
        lost=mine.state("34000"),
        broke=str(mine) if mine.failed and not mine.state("34000") else None,
    )


@probe("plain_cursor", "cursor without HOLD, inside a transaction", scope=Scope.TRANSACTION)
async def plain_cursor(s: Scenario) -> Observation:
    cursor = s.name("cur")
    # A: a cursor that ends with A's transaction (opened through its driver's API).
    first = await s.transaction(s.a, "DECLARE", f"DECLARE {cursor} CURSOR FOR SELECT generate_series(1, 3)",
                                f"FETCH 1 FROM {cursor}")
    if first.value != 1:
        raise ProbeError(f"A's FETCH from its own cursor gave {first}, not 1; nothing was exercised")
    # B: nothing should remain.
    seen = await s.observe(s.b, "read pg_cursors", _cursors(cursor))
    return Observation(
        evidence=f"A: DECLARE {cursor}, FETCH gave {said(first.value)}, COMMIT. B's pg_cursors lists {seen}",
        leaked=int(seen) > 0,
    )


@probe("sql_prepare", "SQL PREPARE / EXECUTE")
async def sql_prepare(s: Scenario) -> Observation:
    stmt = s.name("stmt")
    # A: a named statement prepared with SQL (PgBouncer passes these through untouched).
    await s.change(s.a, "PREPARE", f"PREPARE {stmt} AS SELECT 42")
    # B: does B's session list A's statement?
    seen = await s.observe(s.b, "read pg_prepared_statements",
                           f"(SELECT count(*) FROM pg_prepared_statements WHERE name = '{stmt}')")
    # A: can A still execute it?
    mine = await s.run(s.a, "EXECUTE", f"EXECUTE {stmt}")
    await s.run(s.a, "DEALLOCATE", f"DEALLOCATE {stmt}")
    return Observation(
        evidence=f"A: PREPARE {stmt}. B's pg_prepared_statements lists {seen}; A's EXECUTE gave {mine}",
        leaked=int(seen) > 0,
        lost=mine.state("26000"),
        broke=str(mine) if mine.failed and not mine.state("26000") else None,
    )


PROBES: tuple[Probe, ...] = (temp_table, temp_table_on_commit_drop, with_hold_cursor, plain_cursor, sql_prepare)
