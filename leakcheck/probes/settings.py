"""Session settings: SET, SET LOCAL, search_path, tracked parameters, custom GUCs, roles."""

from __future__ import annotations

from leakcheck.drivers.interface import Client
from leakcheck.model.errors import ProbeError
from leakcheck.model.faults import machine_fault
from leakcheck.model.verdicts import Observation, Scope
from leakcheck.probes.base import Attempt, Probe, probe, said
from leakcheck.probes.outcomes import WRITES_TABLE
from leakcheck.probes.prepared import fails
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
    return await _parameter(s, "IntervalStyle", "sql_standard", None)  # ActiveRecord sets iso_8601 at connect


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


async def _set_undone(s: Scenario, savepoint: bool) -> Observation:
    """A tracked parameter set inside A's transaction, then undone by ROLLBACK (or ROLLBACK TO SAVEPOINT and
    COMMIT): PostgreSQL restores the value and reports it again (ParameterStatus); does the pooler's cache of
    the clients' parameters restore it too?"""
    name, b_value, a_value = "TimeZone", "'Asia/Tokyo'", "'Pacific/Chatham'"
    # B: a value of its own first, so a value the pooler puts back wrongly has somewhere to show.
    await s.change(s.b, f"SET {name}", f"SET {name} = {b_value}")
    b_own = await s.observe(s.b, f"read {name}", setting(name))
    a_own = await s.observe(s.a, f"read {name}", setting(name))
    a_set = await s.spell(name, a_value)
    if a_set is None or a_set in (a_own, b_own):
        raise ProbeError(f"A's {name} ({said(a_set)}) cannot be told apart from the values before it")
    # A: BEGIN through its driver; [SAVEPOINT;] SET; the SET undone: ROLLBACK TO SAVEPOINT and COMMIT, or ROLLBACK.
    began = await s.begin(s.a, "transaction")
    if began.failed:
        raise ProbeError(f"A's BEGIN failed: {began}")
    if savepoint:
        await s.change(s.a, "SAVEPOINT", "SAVEPOINT lc_before_set")
    await s.change(s.a, f"SET {name}", f"SET {name} = {a_value}")
    inside = await s.observe(s.a, f"read {name} inside", setting(name))
    if savepoint:
        await s.change(s.a, "ROLLBACK TO SAVEPOINT", "ROLLBACK TO SAVEPOINT lc_before_set")
        ended = await s.commit(s.a, "transaction")
    else:
        ended = await s.rollback(s.a, "transaction")
    if inside != a_set or ended.failed:
        raise ProbeError(f"A's SET {name} read {said(inside)} inside its transaction, which then ended with {ended}: "
                         "nothing was exercised")
    # A: its value after the transaction; B: its own, on the server A used; A again after B.
    a_after = await s.observe(s.a, f"read {name} after", setting(name))
    b_seen = await s.observe(s.b, f"read {name} after A", setting(name))
    b_told = s.b.reported(name)
    a_again = await s.observe(s.a, f"read {name} again", setting(name))
    a_told = s.a.reported(name)
    undone = "ROLLBACK TO SAVEPOINT, COMMIT" if savepoint else "ROLLBACK"
    told = [f"{who}'s driver was told {t!r}, the server had {said(v)}"
            for who, t, v in (("A", a_told, a_again), ("B", b_told, b_seen)) if t is not None and t != v]
    return Observation(
        evidence=f"B: SET {name}={said(b_own)}. A (read {said(a_own)}): BEGIN; "
        + ("SAVEPOINT; " if savepoint else "") + f"SET {name}={said(a_set)}; {undone}. A then read {said(a_after)}, "
        f"B read {said(b_seen)}, A read {said(a_again)}" + (f"; {'; '.join(told)}" if told else ""),
        leaked=a_set in (a_after, a_again, b_seen) or b_seen != b_own,
        lost=a_own not in (a_after, a_again) or a_after != a_again,
        misreported=bool(told),
    )


@probe("set_rollback", "SET of a tracked parameter (TimeZone) rolled back: does the pooler's parameter cache "
       "put the rolled-back value back, for A or for B?", scope=Scope.TRANSACTION)
async def set_rollback(s: Scenario) -> Observation:
    return await _set_undone(s, savepoint=False)


@probe("set_rollback_savepoint", "SET of a tracked parameter (TimeZone) undone by ROLLBACK TO SAVEPOINT, then COMMIT",
       scope=Scope.TRANSACTION)
async def set_rollback_savepoint(s: Scenario) -> Observation:
    return await _set_undone(s, savepoint=True)


def _ended(got: Attempt) -> bool:
    """The step's error ended its client's session (faults.py: a connection exception, or a closed connection):
    the ledger has it as a disconnect (an agent's error does not say whether its connection closed)."""
    return got.error is not None and machine_fault(got.error.sqlstate, closed=got.error.closed,
                                                   session_end_observed=False) is not None


@probe("search_path_emptied", "search_path emptied by a dump or restore session (pg_dump's preamble, "
       "set_config('search_path', '', false)): does B's unqualified table still resolve?", fixtures=True)
async def search_path_emptied(s: Scenario) -> Observation:
    path = f"SELECT {setting('search_path')}"
    table = f"SELECT count(*)::int FROM {WRITES_TABLE} WHERE id = '{s.token}'"  # unqualified, as applications write
    # B: its application's unqualified query works.
    before = await s.run(s.b, "unqualified SELECT", table)
    if before.failed:
        raise ProbeError(f"B's unqualified SELECT failed before A did anything: {before}")
    # A: the first statement of every pg_dump output (a restore through the pool runs it too).
    await s.change(s.a, "pg_dump's preamble", "SELECT pg_catalog.set_config('search_path', '', false)")
    # B: its search_path and its unqualified query; A: still its empty path; B again after A. Each may end the
    # client's connection (a pooler that cannot restore the empty value), which is then an outcome.
    closed: set[str] = set()

    async def step(client: Client, name: str, sql: str) -> Attempt:
        if client.label in closed:
            return Attempt(value="not run: its connection was closed")
        got = await s.run(client, name, sql, may_disconnect=True)
        if _ended(got):
            closed.add(client.label)
        return got

    b_path = await step(s.b, "read search_path", path)
    b_told = s.b.reported("search_path")
    b_read = await step(s.b, "unqualified SELECT again", table)
    a_path = await step(s.a, "read search_path", path)
    b_after = await step(s.b, "read search_path after A", path)
    steps = (("B's read", b_path), ("B's SELECT", b_read), ("A's read", a_path), ("B's read after A", b_after))
    misreported = b_told is not None and not b_path.failed and b_told != b_path.value
    failures = [(what, got) for what, got in steps if got.failed and not got.state("42P01") and not _ended(got)]
    return Observation(
        evidence=f"A: set_config('search_path', '', false). B read {b_path} (its driver was told {said(b_told)}), its "
        f"unqualified SELECT gave {b_read}; A read {a_path}; B then read {b_after}",
        leaked=b_path.value == "" or b_read.state("42P01") or b_after.value == "",
        lost=not a_path.failed and a_path.value != "",
        misreported=misreported,
        broke=fails(*failures),
    )


PROBES: tuple[Probe, ...] = (
    statement_timeout, set_local, search_path, timezone, datestyle, intervalstyle,
    application_name, application_name_empty, custom_setting, set_role, custom_setting_moved, timezone_moved,
    set_rollback, set_rollback_savepoint, search_path_emptied,
)
