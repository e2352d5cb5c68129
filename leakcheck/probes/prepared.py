"""Protocol-level prepared statements (psycopg prepare=True, asyncpg's statement cache)."""

from __future__ import annotations

from leakcheck.drivers.interface import Client
from leakcheck.model.errors import NotApplicable, ProbeError
from leakcheck.model.target import settings_label
from leakcheck.model.verdicts import Observation
from leakcheck.probes.base import Attempt, Probe, probe
from leakcheck.probes.scenario import Scenario

#: How a prepared probe's evidence begins when the cell's driver settings turn preparing off.
NEVER_PREPARED = "the driver never prepared"


def names_holding(marker: str, driver_names: str = "") -> str:
    """An expression: the names of prepared statements whose text holds `marker` (and, when given,
    whose name is one a driver gives: `Client.statement_names`; PgBouncer's own are PGBOUNCER_N)."""
    only = f" AND ({driver_names})" if driver_names else ""
    half = len(marker) // 2  # split, so a statement holding this very text never matches
    pattern = f"'%' || '{marker[:half]}' || '{marker[half:]}' || '%'"
    return f"ARRAY(SELECT name FROM pg_prepared_statements WHERE statement LIKE {pattern}{only} ORDER BY name)"


async def names_after(s: Scenario, marker: str) -> list[str]:
    """The names of A's statements holding `marker` on A's server, read by an observer (Scenario.read), never
    inside A's own transaction: the application's calls stay exactly its own."""
    return await s.read_array(s.a, "read pg_prepared_statements", names_holding(marker))


def unseen(s: Scenario) -> NotApplicable:
    """What a prepared probe is on a pooler that resets every server connection after each transaction, when
    every run worked: whether A's driver prepared cannot be seen between two of its statements."""
    return NotApplicable("the pooler runs its reset after each transaction (server_reset_query_always = 1): no "
                         f"statement of {s.a.label}'s survives its autocommit run to be seen, and every prepared "
                         "run worked, so whether its driver prepared cannot be measured here")


async def prepare_in_a(s: Scenario, marker: str) -> tuple[Attempt, list[str]]:
    """A proves its server, then runs `SELECT marker` twice its driver's prepared way (autocommit, as an
    application does); an observer then reads the names on A's server. A failure is returned (a break,
    proven by A's first proof); a run that was not really prepared is an error, or not applicable."""
    await s.observe(s.a, "connected", "1")
    run = await s.prepared(s.a, "prepared run", f"'{marker}'::text", own=marker)
    if run.failed:
        return run, []
    run = await s.prepared(s.a, "prepared run again", f"'{marker}'::text", own=marker)
    if run.failed:
        return run, []
    names = await names_after(s, marker)
    if not names and s.a.settings:  # the team's setting turns preparing off: nothing to measure
        raise NotApplicable(f"{NEVER_PREPARED}: with {settings_label(s.a.settings)} {s.a.label}'s "
                            "prepared run left no statement on the server (pg_prepared_statements is empty), "
                            "so protocol-level prepares do not happen with these driver settings")
    if not names and s.resets_after_transaction:
        raise unseen(s)
    if not names:
        raise ProbeError(f"{s.a.label}'s driver did not prepare its statement on the server "
                         "(pg_prepared_statements is empty); the probe cannot measure protocol prepares here")
    return run, names


def first_failed(first: Attempt) -> Observation:
    """What a probe saw when A's very first prepared run failed: a break (proven by A's first proof)."""
    return Observation(evidence=f"A's first prepared run failed: {first}", broke=f"A: {first}")


def fails(*runs: tuple[str, Attempt]) -> str | None:
    """The failed runs, named by who ran them, or None when every one worked."""
    errors = [f"{who}: {r}" for who, r in runs if r.failed]
    return "; ".join(errors) if errors else None


async def retried(s: Scenario, client: Client, step: str, marker: str, run: Attempt) -> tuple[Attempt, str | None]:
    """After a failed prepared run, the client runs it once more, as an application's next request
    does: its result, and how the driver recovered when that one worked (Fact.RECOVERED)."""
    if not run.failed:
        return run, None
    again = await s.prepared(client, f"{step}, retried", f"'{marker}'::text", own=marker)
    return again, None if again.failed else f"{client.label}'s next run worked after {run}"


@probe("protocol_prepare", "protocol-level prepared statement, same server")
async def protocol_prepare(s: Scenario) -> Observation:
    marker, other = s.name("prep"), s.name("bprep")
    first, names = await prepare_in_a(s, marker)
    if first.failed:
        return first_failed(first)
    # B: can B's session see A's statement under the name A's driver gave it?
    mine = names_holding(marker, driver_names=s.a.statement_names)
    visible = await s.observe_array(s.b, "read pg_prepared_statements", mine)
    # B: prepares a query of its own (another application's text), so a colliding name cannot pass unseen:
    # a driver that re-prepares a taken name in place (PDO on 42P05) replaces A's statement with B's.
    b_run = await s.prepared(s.b, "prepared run", f"'{other}'::text", own=other)
    b_again = await s.prepared(s.b, "prepared run again", f"'{other}'::text", own=other)
    # An observer: which of A's statement names on its server now hold B's text. A then runs its own
    # statement again, and must get its own value back, not B's.
    b_texts = set(await s.read_array(s.a, "read pg_prepared_statements", names_holding(other)))
    replaced = [n for n in names if n in b_texts]
    a_again, a_recovered = await retried(s, s.a, "prepared run again", marker,
                                         await s.prepared(s.a, "prepared run again", f"'{marker}'::text",
                                                          own=marker))
    foreign = not a_again.failed and a_again.value != marker
    recovered = [r for r in (
        f"B's next run worked after {b_run}" if b_run.failed and not b_again.failed else None,
        f"B's driver put its own statement under A's name(s) {replaced}" if replaced else None, a_recovered,
    ) if r]
    return Observation(
        evidence=f"A prepared SELECT '{marker}' (server names {names}). B saw driver-named {list(visible)}; "
        f"B's prepared run of SELECT '{other}' gave {b_run}, again {b_again}; A's re-run gave {a_again}"
        + (" (B's result, not A's)" if foreign else "") + (f"; recovered: {'; '.join(recovered)}" if recovered else ""),
        leaked=bool(visible) or foreign or bool(replaced),
        broke=fails(("B", b_run), ("B again", b_again), ("A again", a_again)),
        recovered="; ".join(recovered) or None,
    )


@probe("protocol_prepare_moved", "protocol-level prepared statement, client moved to another server",
       pool_size=2)
async def protocol_prepare_moved(s: Scenario) -> Observation:
    await s.keep_a_home()  # where the pooler chooses servers itself, H holds the one A must not use yet
    marker = s.name("prep")
    first, names = await prepare_in_a(s, marker)
    if first.failed:
        return first_failed(first)
    # B claims A's server; A runs its statement on the other one, and B looks for it on A's old one.
    async with s.a_on_another_server():
        # "Works" needs proof it ran prepared there too, not as a plain query (an observer reads A's new
        # server's statements); a failed run, a proof that A really was elsewhere.
        again = await s.prepared(s.a, "prepared run elsewhere", f"'{marker}'::text", own=marker)
        there = [] if again.failed else await names_after(s, marker)
        # A's next request: does the driver get over a failure by itself?
        retry, recovered = await retried(s, s.a, "prepared run elsewhere", marker, again)
        visible = await s.observe_array(s.b, "read pg_prepared_statements",
                                        names_holding(marker, driver_names=s.a.statement_names))
    if not again.failed and not there:
        if s.resets_after_transaction:
            raise unseen(s)
        raise ProbeError("A's statement ran on the other server connection without being prepared there; "
                         "the move was not exercised")
    missing = again.state("26000")
    return Observation(
        evidence=f"A prepared SELECT '{marker}' (server names {names}). While B held that server, A's "
        f"prepared run on another one gave {again}" + (f" (prepared there as {there})" if there else "")
        + (f", then {retry}" if again.failed else "") + f"; B saw driver-named {list(visible)} on A's old one",
        lost=missing,
        leaked=bool(visible),
        broke=str(again) if again.failed and not missing else None,
        recovered=recovered,
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
    first, names = await prepare_in_a(s, marker)
    if first.failed:
        return first_failed(first)
    # B: reads A's SQL text from pg_prepared_statements (any name: the driver's or PgBouncer's).
    visible = await s.observe_array(s.b, "read pg_prepared_statements", names_holding(marker))
    # B: runs each by name with SQL EXECUTE, and gets A's result.
    ran = await _execute_by_name(s, s.b, visible)
    return Observation(
        evidence=f"A prepared SELECT '{marker}' (server names {names}). B read the text of {visible}"
        + (f" and ran them: {'; '.join(ran)}" if ran else ""),
        leaked=bool(visible),
    )


async def _cached_plan(s: Scenario, b_change: tuple[str, ...], what: str) -> Observation:
    """A's prepared statement reads an unqualified table; B changes its own session so that name means
    another table, with another column type; A runs its statement again. On one server connection PostgreSQL
    re-plans it and refuses the new result type (0A000, "cached plan must not change result type")."""
    # A: its application's statement, unqualified, prepared its driver's way: NULL (lc_audit.note is text, and no
    # row of it is B's or lc_plan's).
    select = f"(SELECT note FROM lc_audit WHERE who IN ('{s.token}', 'lc_plan') LIMIT 1)"
    await s.observe(s.a, "connected", "1")
    first = await s.prepared(s.a, "prepared run", select)
    if not first.failed:
        first = await s.prepared(s.a, "prepared run again", select)
    if first.failed:
        return first_failed(first)
    # B: a session-level change of its own (another application on the server A used).
    for sql in b_change:
        await s.change(s.b, what, sql.format(token=s.token))
    await s.observe(s.b, f"after {what}", "1")
    # A: its statement again, as its next request; once more if that failed (a driver's recovery).
    again = await s.prepared(s.a, "prepared run after B", select)
    retry = await s.prepared(s.a, "prepared run after B, retried", select) if again.failed else None
    runs = [r for r in (again, retry) if r is not None and not r.failed and r.value is not None]
    for run in runs:  # A read B's table (or lc_plan's) through its own statement
        s.ledger.other_result(s.a.label, "prepared run after B", run.value, None)
    return Observation(
        evidence=f"A prepared and ran {select}: {first}. B: {what}. A's next run gave {again}"
        + (f", and the one after {retry}" if retry is not None else ""),
        leaked=again.state("0A000") or bool(runs),
        broke=str(again) if again.failed and not again.state("0A000") else None,
        recovered=f"A's next run worked after {again}" if retry is not None and not retry.failed else None,
    )


@probe("cached_plan_temp_table", "a cached plan after another client's DDL: B creates a temp table named like the "
       "table A's prepared statement reads, with another column type (cached plan must not change result type)",
       fixtures=True)
async def cached_plan_temp_table(s: Scenario) -> Observation:
    return await _cached_plan(s, ("CREATE TEMP TABLE lc_audit (note int, who text)",
                                  "INSERT INTO lc_audit VALUES (42, '{token}')"), "CREATE TEMP TABLE lc_audit")


@probe("cached_plan_search_path", "a cached plan after another client's search_path: B's path finds a table named "
       "like the one A's prepared statement reads, with another column type, in another schema", fixtures=True)
async def cached_plan_search_path(s: Scenario) -> Observation:
    return await _cached_plan(s, ("SET search_path = lc_plan, public",), "SET search_path = lc_plan, public")


PROBES: tuple[Probe, ...] = (protocol_prepare, protocol_prepare_moved, prepared_disclosure, cached_plan_temp_table,
                             cached_plan_search_path)
