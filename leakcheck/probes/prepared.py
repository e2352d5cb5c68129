"""Protocol-level prepared statements (psycopg prepare=True, asyncpg's statement cache)."""

from __future__ import annotations

from ..clients import Client
from ..errors import ProbeError
from ..verdicts import Observation
from .base import Probe, Scenario, attempt, probe

# Names the drivers give their statements (PgBouncer's own are PGBOUNCER_N).
_DRIVER_NAMES = "(name LIKE '\\_pg3\\_%' OR name LIKE '\\_\\_asyncpg\\_%')"


def _query(marker: str) -> str:
    return f"SELECT '{marker}'::text AS marker"


async def _prepared_names(client: Client, marker: str, driver_names_only: bool = False) -> list[str]:
    only = f" AND {_DRIVER_NAMES}" if driver_names_only else ""
    # The marker is split so this query's own text (which asyncpg prepares) never matches.
    half = len(marker) // 2
    pattern = f"'%' || '{marker[:half]}' || '{marker[half:]}' || '%'"
    rows = await client.fetchall(
        f"SELECT name FROM pg_prepared_statements WHERE statement LIKE {pattern}{only} ORDER BY name"
    )
    return [str(r[0]) for r in rows]


async def _prepare_in_a(s: Scenario, sql: str, marker: str) -> list[str]:
    # A: runs the statement twice the prepared way; it must really be prepared on the server.
    await s.a.prepared_fetchval(sql)
    await s.a.prepared_fetchval(sql)
    names = await _prepared_names(s.a, marker)
    if not names:
        raise ProbeError(
            f"{s.a.label}'s driver did not prepare {sql!r} on the server (pg_prepared_statements is empty); "
            "the probe cannot measure protocol prepares with this driver configuration"
        )
    return names


@probe("protocol_prepare", "protocol-level prepared statement, same server")
async def protocol_prepare(s: Scenario) -> Observation:
    marker = s.name("prep")
    sql = _query(marker)
    first = await attempt(_prepare_in_a(s, sql, marker))
    if first.failed:
        return Observation(evidence=f"A's prepared execution failed: {first}", broke=str(first))
    await s.shared("after A prepared")
    # B: can B's session see A's statement under the name A's driver gave it?
    visible = await _prepared_names(s.b, marker, driver_names_only=True)
    # B: prepares the very same query (two app instances running the same code).
    b_run = await attempt(s.b.prepared_fetchval(sql))
    b_again = await attempt(s.b.prepared_fetchval(sql))
    # A: uses its statement again after B did.
    a_again = await attempt(s.a.prepared_fetchval(sql))
    errors = [f"{who}: {r}" for who, r in (("B", b_run), ("B again", b_again), ("A again", a_again)) if r.failed]
    return Observation(
        evidence=f"A prepared {sql!r} (server names {first.value}); B saw driver-named {visible}; "
        f"B's prepared run gave {b_run}, again {b_again}; A's re-run gave {a_again}",
        leaked=bool(visible),
        broke="; ".join(errors) if errors else None,
    )


@probe("protocol_prepare_moved", "protocol-level prepared statement, client moved to another server", 2)
async def protocol_prepare_moved(s: Scenario) -> Observation:
    marker = s.name("prep")
    sql = _query(marker)
    first = await attempt(_prepare_in_a(s, sql, marker))
    if first.failed:
        return Observation(evidence=f"A's prepared execution failed: {first}", broke=str(first))
    # B claims A's server; A must run its statement on the other one.
    async with s.a_on_another_server():
        again = await attempt(s.a.prepared_fetchval(sql))
        # "Works" needs proof it ran prepared there too, not as a plain query.
        there = [] if again.failed else await _prepared_names(s.a, marker)
    if not again.failed and not there:
        raise ProbeError("A's statement ran on the other server connection without being prepared there; "
                         "the move was not exercised")
    missing = again.failed and again.error is not None and again.error.sqlstate == "26000"
    return Observation(
        evidence=f"A prepared {sql!r} (server names {first.value}); while B held that server, "
        f"A's prepared run on another server gave {again}"
        + (f" (prepared there as {there})" if there else ""),
        lost=missing,
        broke=str(again) if again.failed and not missing else None,
    )


PROBES: tuple[Probe, ...] = (protocol_prepare, protocol_prepare_moved)
