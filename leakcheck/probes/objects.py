"""Session-scoped objects: temporary tables, cursors, SQL-level prepared statements."""

from __future__ import annotations

from ..errors import ProbeError
from ..verdicts import Observation
from .base import Probe, Scenario, attempt, probe


@probe("temp_table", "temporary table (plain)")
async def temp_table(s: Scenario) -> Observation:
    table = s.name("tmp")
    # A: a temp table lives until A's session ends.
    await s.a.execute(f"CREATE TEMP TABLE {table} (v int)")
    await s.shared("after A's CREATE TEMP TABLE")
    # B: does B's session resolve A's table?
    seen = await s.b.fetchval(f"SELECT to_regclass('pg_temp.{table}')::text")
    mine = await s.a.fetchval(f"SELECT to_regclass('pg_temp.{table}')::text")
    return Observation(
        evidence=f"A created TEMP TABLE {table}; B resolved it as {seen!r}; A as {mine!r}",
        leaked=seen is not None,
        lost=mine is None,
    )


@probe("temp_table_on_commit_drop", "temporary table ON COMMIT DROP")
async def temp_table_on_commit_drop(s: Scenario) -> Observation:
    table = s.name("tmpdrop")
    # A: a temp table that vanishes at the end of A's transaction.
    await s.a.execute("BEGIN")
    await s.a.execute(f"CREATE TEMP TABLE {table} (v int) ON COMMIT DROP")
    inside = await s.a.fetchval(f"SELECT to_regclass('pg_temp.{table}')::text")
    await s.a.execute("COMMIT")
    if inside is None:
        raise ProbeError(f"A's transaction could not resolve its own {table}; nothing was exercised")
    await s.shared("after A's COMMIT")
    # B: nothing should remain.
    seen = await s.b.fetchval(f"SELECT to_regclass('pg_temp.{table}')::text")
    return Observation(
        evidence=f"A created {table} ON COMMIT DROP and committed; B resolved it as {seen!r}",
        leaked=seen is not None,
    )


@probe("with_hold_cursor", "WITH HOLD cursor")
async def with_hold_cursor(s: Scenario) -> Observation:
    cursor = s.name("cur")
    # A: a cursor that outlives its transaction.
    await s.a.execute(f"DECLARE {cursor} CURSOR WITH HOLD FOR SELECT generate_series(1, 3)")
    await s.shared("after A's DECLARE")
    # B: can B's session see (and fetch from) A's cursor?
    seen = await s.b.fetchval(f"SELECT count(*) FROM pg_cursors WHERE name = '{cursor}'")
    mine = await attempt(s.a.fetchval(f"FETCH 1 FROM {cursor}"))
    await attempt(s.a.execute(f"CLOSE {cursor}"))
    return Observation(
        evidence=f"A declared {cursor} WITH HOLD; B's pg_cursors lists {seen}; A's FETCH gave {mine}",
        leaked=int(seen) > 0,
        lost=mine.failed,
    )


@probe("plain_cursor", "cursor without HOLD, inside a transaction")
async def plain_cursor(s: Scenario) -> Observation:
    cursor = s.name("cur")
    # A: a cursor that ends with A's transaction.
    await s.a.execute("BEGIN")
    await s.a.execute(f"DECLARE {cursor} CURSOR FOR SELECT generate_series(1, 3)")
    first = await s.a.fetchval(f"FETCH 1 FROM {cursor}")
    await s.a.execute("COMMIT")
    if first != 1:
        raise ProbeError(f"A's FETCH from its own cursor gave {first!r}, not 1; nothing was exercised")
    await s.shared("after A's COMMIT")
    # B: nothing should remain.
    seen = await s.b.fetchval(f"SELECT count(*) FROM pg_cursors WHERE name = '{cursor}'")
    return Observation(
        evidence=f"A declared {cursor}, fetched {first!r}, committed; B's pg_cursors lists {seen}",
        leaked=int(seen) > 0,
    )


@probe("sql_prepare", "SQL PREPARE / EXECUTE")
async def sql_prepare(s: Scenario) -> Observation:
    stmt = s.name("stmt")
    # A: a named statement prepared with SQL (PgBouncer passes these through untouched).
    await s.a.execute(f"PREPARE {stmt} AS SELECT 42")
    await s.shared("after A's PREPARE")
    # B: does B's session list A's statement?
    seen = await s.b.fetchval(f"SELECT count(*) FROM pg_prepared_statements WHERE name = '{stmt}'")
    # A: can A still execute it?
    mine = await attempt(s.a.fetchval(f"EXECUTE {stmt}"))
    await attempt(s.a.execute(f"DEALLOCATE {stmt}"))
    return Observation(
        evidence=f"A ran PREPARE {stmt}; B's pg_prepared_statements lists {seen}; A's EXECUTE gave {mine}",
        leaked=int(seen) > 0,
        lost=mine.failed and mine.error is not None and mine.error.sqlstate == "26000",
        broke=str(mine) if mine.failed and mine.error is not None and mine.error.sqlstate != "26000" else None,
    )


PROBES: tuple[Probe, ...] = (temp_table, temp_table_on_commit_drop, with_hold_cursor, plain_cursor, sql_prepare)
