"""Protocol-level prepared statements (psycopg prepare=True, asyncpg's statement cache)."""

from __future__ import annotations

from leakcheck.drivers.clients import Client
from leakcheck.model.errors import ProbeError
from leakcheck.model.verdicts import Observation
from leakcheck.probes.base import Attempt, Probe, Scenario, attempt, probe


def _names(marker: str, driver_names: str = "") -> str:
    """An expression: the names of prepared statements whose text holds `marker` (and, when given,
    whose name is one a driver gives: `Client.statement_names`; PgBouncer's own are PGBOUNCER_N)."""
    only = f" AND ({driver_names})" if driver_names else ""
    half = len(marker) // 2  # split, so a statement holding this very text never matches
    pattern = f"'%' || '{marker[:half]}' || '{marker[half:]}' || '%'"
    return f"ARRAY(SELECT name FROM pg_prepared_statements WHERE statement LIKE {pattern}{only} ORDER BY name)"


async def _run_and_read_names(s: Scenario, step: str, marker: str) -> tuple[Attempt, list[str]]:
    """A's prepared run and a look at its server's statements, in one transaction: one server, and no
    pooler reset (server_reset_query_always) in between. No names when the run failed."""
    await s.a.execute("BEGIN")
    try:
        run = await s.prepared(s.a, step, f"'{marker}'::text")
        names = [] if run.failed else list(await s.observe(s.a, "read pg_prepared_statements", _names(marker)))
    finally:
        await attempt(s.a.execute("ROLLBACK" if run.failed else "COMMIT"))
    return run, names


async def _prepare_in_a(s: Scenario, marker: str) -> tuple[Attempt, list[str]]:
    """A proves its server, then runs `SELECT marker` twice its driver's prepared way. A failure is
    returned (a break, proven by A's first proof); a run that was not really prepared is an error."""
    await s.observe(s.a, "connected", "1")
    run = await s.prepared(s.a, "prepared run", f"'{marker}'::text")
    if run.failed:
        return run, []
    run, names = await _run_and_read_names(s, "prepared run", marker)
    if run.failed:
        return run, []
    if not names:
        raise ProbeError(f"{s.a.label}'s driver did not prepare its statement on the server "
                         "(pg_prepared_statements is empty); the probe cannot measure protocol prepares here")
    return run, names


def _fails(*runs: tuple[str, Attempt]) -> str | None:
    errors = [f"{who}: {r}" for who, r in runs if r.failed]
    return "; ".join(errors) if errors else None


@probe("protocol_prepare", "protocol-level prepared statement, same server")
async def protocol_prepare(s: Scenario) -> Observation:
    marker = s.name("prep")
    first, names = await _prepare_in_a(s, marker)
    if first.failed:
        return Observation(evidence=f"A's first prepared run failed: {first}", broke=f"A: {first}")
    # B: can B's session see A's statement under the name A's driver gave it?
    visible = await s.observe(s.b, "read pg_prepared_statements", _names(marker, driver_names=s.a.statement_names))
    # B: prepares the very same query (two app instances running the same code); A runs it again.
    b_run = await s.prepared(s.b, "prepared run", f"'{marker}'::text")
    b_again = await s.prepared(s.b, "prepared run again", f"'{marker}'::text")
    a_again = await s.prepared(s.a, "prepared run again", f"'{marker}'::text")
    return Observation(
        evidence=f"A prepared SELECT '{marker}' (server names {names}). B saw driver-named {list(visible)}; "
        f"B's prepared run gave {b_run}, again {b_again}; A's re-run gave {a_again}",
        leaked=bool(visible),
        broke=_fails(("B", b_run), ("B again", b_again), ("A again", a_again)),
    )


@probe("protocol_prepare_moved", "protocol-level prepared statement, client moved to another server",
       pool_size=2)
async def protocol_prepare_moved(s: Scenario) -> Observation:
    await s.keep_a_home()  # where the pooler chooses servers itself, H holds the one A must not use yet
    marker = s.name("prep")
    first, names = await _prepare_in_a(s, marker)
    if first.failed:
        return Observation(evidence=f"A's first prepared run failed: {first}", broke=f"A: {first}")
    # B claims A's server; A runs its statement on the other one, and B looks for it on A's old one.
    async with s.a_on_another_server():
        # "Works" needs proof it ran prepared there too, not as a plain query (read in the same
        # transaction: one server, no pooler reset in between); a failed run, a proof that A really
        # was elsewhere.
        again, there = await _run_and_read_names(s, "prepared run elsewhere", marker)
        visible = await s.observe(s.b, "read pg_prepared_statements", _names(marker, driver_names=s.a.statement_names))
    if not again.failed and not there:
        raise ProbeError("A's statement ran on the other server connection without being prepared there; "
                         "the move was not exercised")
    missing = again.state("26000")
    return Observation(
        evidence=f"A prepared SELECT '{marker}' (server names {names}). While B held that server, A's "
        f"prepared run on another one gave {again}" + (f" (prepared there as {there})" if there else "")
        + f"; B saw driver-named {list(visible)} on A's old one",
        lost=missing,
        leaked=bool(visible),
        broke=str(again) if again.failed and not missing else None,
    )


async def _execute_by_name(s: Scenario, client: Client, names: list[str]) -> list[str]:
    """What EXECUTE of each named statement returned to `client` (its first column, or the error)."""
    out = []
    for name in names:
        quoted = '"' + name.replace('"', '""') + '"'
        got = await s.run(client, f"EXECUTE {name}", f"EXECUTE {quoted}")
        out.append(f"{name} -> {got}")
    return out


@probe("prepared_disclosure", "another client's prepared SQL text, and running it by name", security=True)
async def prepared_disclosure(s: Scenario) -> Observation:
    marker = s.name("secret")
    first, names = await _prepare_in_a(s, marker)
    if first.failed:
        return Observation(evidence=f"A's first prepared run failed: {first}", broke=f"A: {first}")
    # B: reads A's SQL text from pg_prepared_statements (any name: the driver's or PgBouncer's).
    visible = list(await s.observe(s.b, "read pg_prepared_statements", _names(marker)))
    # B: runs each by name with SQL EXECUTE, and gets A's result.
    ran = await _execute_by_name(s, s.b, visible)
    return Observation(
        evidence=f"A prepared SELECT '{marker}' (server names {names}). B read the text of {visible}"
        + (f" and ran them: {'; '.join(ran)}" if ran else ""),
        leaked=bool(visible),
    )


PROBES: tuple[Probe, ...] = (protocol_prepare, protocol_prepare_moved, prepared_disclosure)
