"""Session settings: SET, SET LOCAL, search_path, tracked parameters, custom GUCs, roles."""

from __future__ import annotations

from ..errors import ProbeError
from ..verdicts import Observation
from .base import Probe, Scenario, attempt, probe


def _lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@probe("statement_timeout", "SET statement_timeout (does B's query get cancelled?)")
async def statement_timeout(s: Scenario) -> Observation:
    # A: a short session-level timeout.
    await s.a.execute("SET statement_timeout = '150ms'")
    await s.shared("after A's SET")
    # B: a query that runs longer than A's timeout, with no timeout of its own.
    slept = await attempt(s.b.fetchval("SELECT pg_sleep(0.6)::text"))
    # A: is its own timeout still in force?
    mine = await s.a.fetchval("SELECT current_setting('statement_timeout')")
    cancelled = slept.failed and slept.error is not None and slept.error.sqlstate == "57014"
    return Observation(
        evidence=f"A ran SET statement_timeout='150ms'; B's pg_sleep(0.6) gave {slept}; "
        f"A then read statement_timeout={mine!r}",
        leaked=cancelled,
        lost=mine != "150ms",
        broke=str(slept) if slept.failed and not cancelled else None,
    )


@probe("set_local", "SET LOCAL inside a transaction")
async def set_local(s: Scenario) -> Observation:
    # A: SET LOCAL lives only until A's COMMIT.
    await s.a.execute("BEGIN")
    await s.a.execute("SET LOCAL work_mem = '1234kB'")
    inside = await s.a.fetchval("SELECT current_setting('work_mem')")
    await s.a.execute("COMMIT")
    await s.shared("after A's COMMIT")
    # B: must see the server default, not A's transaction-local value.
    seen = await s.b.fetchval("SELECT current_setting('work_mem')")
    return Observation(
        evidence=f"A ran SET LOCAL work_mem='1234kB' (read {inside!r} inside) and committed; B read {seen!r}",
        leaked=seen == "1234kB",
        lost=inside != "1234kB",
    )


async def _parameter(s: Scenario, name: str, a_value: str, b_value: str | None) -> Observation:
    """Values are SQL as written after `SET name =` (quoted literals, or a search_path list)."""
    read = f"SELECT current_setting({_lit(name)})"
    b_set = None
    if b_value is not None:
        # B: its own value first, so A's SET has something to overwrite.
        await s.b.execute(f"SET {name} = {b_value}")
        b_set = await s.b.fetchval(read)
    b_before = b_set if b_set is not None else await s.b.fetchval(read)
    # A: its own value.
    await s.a.execute(f"SET {name} = {a_value}")
    a_set = await s.a.fetchval(read)
    if a_set == b_before:
        raise ProbeError(f"A's {name} ({a_set!r}) equals B's own, so a leak could not be told apart; "
                         "choose a value that differs from the default")
    await s.shared("after the SETs")
    # B: reads the setting; then A reads it again after B used the server.
    b_seen = await s.b.fetchval(read)
    b_told = s.b.reported(name)
    a_seen = await s.a.fetchval(read)
    b_part = f"B set {name}={b_set!r}, " if b_value is not None else ""
    leaked = b_seen == a_set != b_set or (b_set is not None and a_seen == b_set != a_set)
    told = "not reported" if b_told is None else repr(b_told)
    return Observation(
        evidence=f"{b_part}A set {name}={a_set!r}; B read {b_seen!r} "
        f"(B's driver was told {told}); A read {a_seen!r} afterwards",
        leaked=leaked,
        lost=a_seen != a_set,
        details=(
            ("b_reported", told),
            ("b_server_value", repr(b_seen)),
            ("b_reported_matches_server", str(b_told == b_seen)),
        ),
    )


@probe("search_path", "SET search_path (and what B's driver is told)")
async def search_path(s: Scenario) -> Observation:
    return await _parameter(s, "search_path", "lc_schema_a, public", None)


@probe("timezone", "TimeZone (tracked by PgBouncer)")
async def timezone(s: Scenario) -> Observation:
    return await _parameter(s, "TimeZone", "'Pacific/Chatham'", None)


@probe("datestyle", "DateStyle (tracked by PgBouncer)")
async def datestyle(s: Scenario) -> Observation:
    return await _parameter(s, "DateStyle", "'SQL, DMY'", None)


@probe("intervalstyle", "IntervalStyle (tracked since 1.20 via track_extra_parameters)")
async def intervalstyle(s: Scenario) -> Observation:
    return await _parameter(s, "IntervalStyle", "iso_8601", None)


@probe("application_name", "application_name (tracked by PgBouncer)")
async def application_name(s: Scenario) -> Observation:
    return await _parameter(s, "application_name", "'leakcheck_a'", "'leakcheck_b'")


@probe("application_name_empty", "application_name set to '' after another client's value")
async def application_name_empty(s: Scenario) -> Observation:
    return await _parameter(s, "application_name", "''", "'leakcheck_b'")


@probe("custom_setting", "a custom setting (SET leakcheck.tenant)")
async def custom_setting(s: Scenario) -> Observation:
    # A: an application-defined GUC, as multi-tenant apps use for row-level security.
    await s.a.execute("SET leakcheck.tenant = 'tenant_a'")
    await s.shared("after A's SET")
    # B: never set it; current_setting(..., true) is NULL or '' in a fresh session.
    seen = await s.b.fetchval("SELECT current_setting('leakcheck.tenant', true)")
    mine = await s.a.fetchval("SELECT current_setting('leakcheck.tenant', true)")
    return Observation(
        evidence=f"A ran SET leakcheck.tenant='tenant_a'; B read {seen!r}; A read {mine!r}",
        leaked=seen == "tenant_a",
        lost=mine != "tenant_a",
    )


@probe("set_role", "SET ROLE")
async def set_role(s: Scenario) -> Observation:
    # A: switch to a less privileged role for the rest of its session.
    await s.a.execute("SET ROLE leakcheck_other")
    await s.shared("after A's SET ROLE")
    # B: which role does B's query run as?
    seen = await s.b.fetchval("SELECT current_user")
    mine = await s.a.fetchval("SELECT current_user")
    return Observation(
        evidence=f"A ran SET ROLE leakcheck_other; B's current_user is {seen!r}; A's is {mine!r}",
        leaked=seen == "leakcheck_other",
        lost=mine != "leakcheck_other",
    )


async def _moved(s: Scenario, name: str, value: str) -> Observation:
    read = f"SELECT current_setting({_lit(name)}, true)"
    # A: sets the value on the server it has now.
    await s.a.execute(f"SET {name} = {value}")
    a_set = await s.a.fetchval(read)
    # A: reads it back while B holds that server, i.e. from another server connection.
    async with s.a_on_another_server():
        a_seen = await s.a.fetchval(read)
    return Observation(
        evidence=f"A set {name}={a_set!r}; on another server connection A read {a_seen!r}",
        lost=a_seen != a_set,
    )


@probe("custom_setting_moved", "a custom setting, client moved to another server", pool_size=2)
async def custom_setting_moved(s: Scenario) -> Observation:
    return await _moved(s, "leakcheck.tenant", "'tenant_a'")


@probe("timezone_moved", "TimeZone, client moved to another server", pool_size=2)
async def timezone_moved(s: Scenario) -> Observation:
    return await _moved(s, "TimeZone", "'Pacific/Chatham'")


PROBES: tuple[Probe, ...] = (
    statement_timeout, set_local, search_path, timezone, datestyle, intervalstyle,
    application_name, application_name_empty, custom_setting, set_role, custom_setting_moved, timezone_moved,
)
