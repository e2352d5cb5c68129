"""Session settings: SET, SET LOCAL, search_path, tracked parameters, custom GUCs, roles."""

from __future__ import annotations

from leakcheck.model.errors import ProbeError
from leakcheck.model.verdicts import Observation, Scope
from leakcheck.probes.base import Attempt, Probe, probe, said
from leakcheck.probes.scenario import Scenario


def lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def setting(name: str) -> str:
    return f"current_setting({lit(name)}, true)"


@probe("statement_timeout", "SET statement_timeout (does B's query get cancelled?)")
async def statement_timeout(s: Scenario) -> Observation:
    # A: a short session-level timeout (long enough that no harness statement of B or A runs into it
    # on a loaded machine: 100 ms once cancelled one in CI).
    await s.change(s.a, "SET statement_timeout", "SET statement_timeout = '500ms'")
    # B: reads the setting; when it is A's, B runs a query longer than it: is B cancelled?
    # (B's own setting is the answer; the sleep only shows the effect, so it runs only then.)
    b_seen = await s.observe(s.b, "read statement_timeout", setting("statement_timeout"))
    slept = await s.run(s.b, "slept", "SELECT pg_sleep(1.0)::text") if b_seen == "500ms" else Attempt("not run")
    # A: is its own timeout still in force?
    mine = await s.observe(s.a, "read statement_timeout", setting("statement_timeout"))
    cancelled = slept.state("57014")
    return Observation(
        evidence=f"A: SET statement_timeout='500ms'. B read {said(b_seen)}, and its pg_sleep(1.0) gave {slept}. "
        f"A read {said(mine)}",
        leaked=cancelled or b_seen == "500ms",
        lost=mine != "500ms",
        broke=str(slept) if slept.failed and not cancelled else None,
    )


@probe("set_local", "SET LOCAL inside a transaction", scope=Scope.TRANSACTION)
async def set_local(s: Scenario) -> Observation:
    # A: SET LOCAL lives only until A's COMMIT (A's transaction, through its driver's API).
    inside = await s.transaction(s.a, "SET LOCAL", "SET LOCAL work_mem = '1234kB'", f"SELECT {setting('work_mem')}")
    if inside.value != "1234kB":
        raise ProbeError(f"A's SET LOCAL work_mem read back {inside}; nothing was exercised")
    # B: must see the server default, not A's transaction-local value.
    seen = await s.observe(s.b, "read work_mem", setting("work_mem"))
    return Observation(
        evidence=f"A: SET LOCAL work_mem='1234kB' (read {said(inside.value)} inside), COMMIT. B read {said(seen)}",
        leaked=seen == "1234kB",
    )


async def _parameter(s: Scenario, name: str, a_value: str, b_value: str | None) -> Observation:
    """Values are SQL as written after `SET name =` (quoted literals, or a search_path list)."""
    b_part = ""
    if b_value is not None:
        # B: its own value first, so A's SET has something to overwrite.
        await s.change(s.b, f"SET {name}", f"SET {name} = {b_value}")
        b_part = f"B: SET {name}={b_value}. "
    b_before = await s.observe(s.b, f"read {name}", setting(name))
    # A: its own value (as the server spells it: the witness's own transaction tells), set in autocommit.
    a_set = await s.spell(name, a_value)
    if a_set is None or a_set == b_before:
        raise ProbeError(f"A's {name} ({said(a_set)}) equals B's own or cannot be set, so a leak could not be told "
                         "apart; choose a value that differs from the default")
    await s.change(s.a, f"SET {name}", f"SET {name} = {a_value}")
    # A: still its value in its next statement? B: reads the setting; then A reads it again after B.
    a_next = await s.observe(s.a, f"read {name}", setting(name))
    b_seen = await s.observe(s.b, f"read {name}", setting(name))
    b_told = s.b.reported(name)
    a_seen = await s.observe(s.a, f"read {name}", setting(name))
    told = "not reported" if b_told is None else repr(b_told)
    heard = "no ParameterStatus told its driver" if b_told is None else f"its driver was told {told}"
    return Observation(
        evidence=f"{b_part}A: SET {name}={said(a_set)}" + (f", then read {said(a_next)}" if a_next != a_set else "")
        + f". B read {said(b_seen)} ({heard}). A read {said(a_seen)}",
        leaked=b_seen == a_set or (b_value is not None and a_seen == b_before),
        lost=a_seen != a_set or a_next != a_set,
        misreported=b_told is not None and b_told != b_seen,
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
    await s.change(s.a, "SET leakcheck.tenant", "SET leakcheck.tenant = 'tenant_a'")
    # B: never set it; current_setting(..., true) is NULL or '' in a fresh session.
    seen = await s.observe(s.b, "read leakcheck.tenant", setting("leakcheck.tenant"))
    mine = await s.observe(s.a, "read leakcheck.tenant", setting("leakcheck.tenant"))
    return Observation(
        evidence=f"A: SET leakcheck.tenant='tenant_a'. B read {said(seen)}. A read {said(mine)}",
        leaked=seen == "tenant_a",
        lost=mine != "tenant_a",
    )


@probe("set_role", "SET ROLE to a less privileged role", security=True, fixtures=True)
async def set_role(s: Scenario) -> Observation:
    # A: switch to another role for the rest of its session.
    await s.change(s.a, "SET ROLE", "SET ROLE leakcheck_other")
    # B: which role does B's query run as?
    seen = await s.observe(s.b, "read current_user", "current_user")
    mine = await s.observe(s.a, "read current_user", "current_user")
    return Observation(
        evidence=f"A: SET ROLE leakcheck_other. B's current_user is {said(seen)}; A's is {said(mine)}",
        leaked=seen == "leakcheck_other",
        lost=mine != "leakcheck_other",
    )


async def _moved(s: Scenario, name: str, value: str) -> Observation:
    await s.keep_a_home()  # where the pooler chooses servers itself, H holds the one A must not use yet
    # A: sets the value on the server it has now (as the server spells it: the witness's own transaction).
    a_set = await s.spell(name, value)
    await s.change(s.a, f"SET {name}", f"SET {name} = {value}")
    await s.observe(s.a, f"read {name}", setting(name))  # A's next statement: the server B will claim
    # A: reads it back while B holds that server, i.e. from another server connection;
    # B, now on A's old server, reads it too (the reverse direction).
    async with s.a_on_another_server():
        a_seen = await s.observe(s.a, f"read {name} elsewhere", setting(name))
        b_seen = await s.observe(s.b, f"read {name} on A's server", setting(name))
    return Observation(
        evidence=f"A: SET {name}={said(a_set)}. On another server connection A read {said(a_seen)}; "
        f"B, on A's old one, read {said(b_seen)}",
        lost=a_seen != a_set,
        leaked=b_seen == a_set,
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
