"""Security probes: state that guards identity or data. Each shows what B could read or do.

The objects they use (roles, lc_* tables, a policy, a sequence) are made once per server by
provision/postgres/fixtures.py; the clients log in as the application role leakcheck_app, which is no
superuser and inherits no privilege of the roles it may SET ROLE to.
"""

from __future__ import annotations

import asyncio
import zlib

from leakcheck.drivers.interface import ServerError
from leakcheck.model.errors import NotApplicable, ProbeError
from leakcheck.model.faults import machine_fault
from leakcheck.model.verdicts import Observation, Scope
from leakcheck.probes.base import Attempt, Login, Probe, attempt, probe, said
from leakcheck.probes.scenario import Scenario
from leakcheck.probes.settings import lit, setting


@probe("session_authorization", "SET SESSION AUTHORIZATION (B's session_user, and whom B's writes name)",
       security=True, login=Login.SUPERUSER, fixtures=True)
async def session_authorization(s: Scenario) -> Observation:
    note = s.name("note")
    # A (a superuser application acting for a user): becomes leakcheck_app for the rest of its session.
    await s.change(s.a, "SET SESSION AUTHORIZATION", "SET SESSION AUTHORIZATION leakcheck_app")
    # B: who is it now? Its audit row records session_user.
    seen = await s.observe(s.b, "read session_user", "session_user")
    wrote = await s.run(s.b, "INSERT", f"INSERT INTO lc_audit (note) VALUES ({lit(note)}) RETURNING who",
                        wrote=("public.lc_audit", "note", note))
    mine = await s.observe(s.a, "read session_user", "session_user")
    s.read_back()  # before the clean-up: a row B was told is committed and is missing is a lost write
    await s.run(s.b, "clean up", f"DELETE FROM public.lc_audit WHERE note = {lit(note)}")
    return Observation(
        evidence=f"A: SET SESSION AUTHORIZATION leakcheck_app. B's session_user is {said(seen)}; B's audit row "
        f"was recorded as {wrote}. A's session_user is {said(mine)}",
        leaked=seen == "leakcheck_app",
        lost=mine != "leakcheck_app",
        broke=str(wrote) if wrote.failed else None,
    )


@probe("set_role_privileged", "SET ROLE to a more privileged role (B reads a table only it may read)",
       security=True, fixtures=True)
async def set_role_privileged(s: Scenario) -> Observation:
    # A: takes on a role that may read lc_secret, and reads it.
    await s.change(s.a, "SET ROLE", "SET ROLE leakcheck_priv")
    mine = await s.run(s.a, "read lc_secret", "SELECT string_agg(secret, ',') FROM lc_secret")
    if mine.failed and not mine.state("42501"):  # refused: its role was gone when it ran again (lost)
        raise ProbeError(f"A could not read lc_secret as leakcheck_priv ({mine}); nothing was exercised")
    # B: never changed role; lc_secret must be out of its reach (42501).
    read = await s.run(s.b, "read lc_secret", "SELECT string_agg(secret, ',') FROM lc_secret")
    role = await s.observe(s.b, "read current_user", "current_user")
    # A: still that role in a later transaction?
    again = await s.observe(s.a, "read current_user", "current_user")
    return Observation(
        evidence=f"A: SET ROLE leakcheck_priv, read {mine}. B (current_user {said(role)}) read lc_secret: {read}. "
        f"A's current_user then was {said(again)}",
        leaked=not read.failed,
        lost=again != "leakcheck_priv" or mine.failed,
        broke=str(read) if read.failed and not read.state("42501") else None,
    )


_ROWS = "ARRAY(SELECT secret FROM lc_tenant_rows ORDER BY secret)"


@probe("rls_tenant", "row-level security by a tenant setting: set_config('app.tenant', ..., false)",
       security=True, fixtures=True)
async def rls_tenant(s: Scenario) -> Observation:
    # A: picks its tenant for the session; the policy on lc_tenant_rows shows A only its rows.
    await s.change(s.a, "set_config", "SELECT set_config('app.tenant', 'tenant_a', false)")
    mine = await s.observe_array(s.a, "read its rows", _ROWS)  # none: its tenant was gone already (lost)
    # B: set no tenant, so the policy must show it nothing.
    seen = await s.observe_array(s.b, "read lc_tenant_rows", _ROWS)
    again = await s.observe_array(s.a, "read its rows", _ROWS)
    return Observation(
        evidence=f"A: set_config('app.tenant','tenant_a',false), saw rows {mine}. B (no tenant) saw {seen}. "
        f"A then saw {again}",
        leaked=bool(seen),
        lost=again != mine or not mine,
    )


@probe("rls_tenant_local", "row-level security by a tenant setting: set_config('app.tenant', ..., true)",
       scope=Scope.TRANSACTION, security=True, fixtures=True)
async def rls_tenant_local(s: Scenario) -> Observation:
    # A: picks its tenant for one transaction only (opened through its driver's API).
    mine = await s.transaction(s.a, "set_config local", "SELECT set_config('app.tenant', 'tenant_a', true)",
                               f"SELECT {_ROWS}")
    if not mine.value:
        raise ProbeError(f"A saw no rows of tenant_a inside its transaction ({mine}); nothing was exercised")
    seen = await s.observe_array(s.b, "read lc_tenant_rows", _ROWS)
    return Observation(
        evidence=f"A: set_config('app.tenant','tenant_a',true) saw {mine.value}, COMMIT. B (no tenant) saw {seen}",
        leaked=bool(seen),
    )


@probe("temp_shadow", "a temp table shadowing a real table (where B's unqualified INSERT goes)",
       security=True, fixtures=True)
async def temp_shadow(s: Scenario) -> Observation:
    note = s.name("note")
    # A: a temp table named like the real table lc_audit; pg_temp comes first in every search_path.
    await s.change(s.a, "CREATE TEMP TABLE lc_audit", "CREATE TEMP TABLE lc_audit (note text, who text)")
    # B: writes to "lc_audit", meaning the real one, then looks for its row there.
    wrote = await s.run(s.b, "INSERT", f"INSERT INTO lc_audit (note) VALUES ({lit(note)})",
                        wrote=("public.lc_audit", "note", note))
    real = await s.observe(s.b, "read public.lc_audit",
                           f"(SELECT count(*) FROM public.lc_audit WHERE note = {lit(note)})")
    # A: finds B's row in its own temp table?
    exists = await s.observe(s.a, "to_regclass", "to_regclass('pg_temp.lc_audit')::text")
    caught = await s.run(s.a, "read its temp table", f"SELECT count(*) FROM pg_temp.lc_audit WHERE note = {lit(note)}")
    if not caught.failed and int(caught.value or 0) > 0:
        s.found(note)  # B's row is in the database, in A's temp table (the leak), where the witness cannot read
    s.read_back()  # before the clean-up
    await s.run(s.b, "clean up", f"DELETE FROM public.lc_audit WHERE note = {lit(note)}")
    return Observation(
        evidence=f"A: CREATE TEMP TABLE lc_audit. B's INSERT INTO lc_audit gave {wrote}; public.lc_audit then "
        f"held {real} of B's rows; A's temp table ({said(exists)}) held {caught}",
        leaked=(not caught.failed and int(caught.value or 0) > 0) or (not wrote.failed and int(real) == 0),
        lost=exists is None,
        broke=str(wrote) if wrote.failed else None,
    )


@probe("lastval", "currval/lastval (B gets A's sequence value instead of 55000)", security=True, fixtures=True)
async def lastval(s: Scenario) -> Observation:
    # A: draws a value from a sequence.
    value = await s.observe(s.a, "nextval", "nextval('lc_seq')")
    # B: never drew one, so lastval() and currval() must fail with 55000.
    last = await s.run(s.b, "lastval", "SELECT lastval()")
    curr = await s.run(s.b, "currval", "SELECT currval('lc_seq')")
    mine = await s.run(s.a, "lastval", "SELECT lastval()")
    return Observation(
        evidence=f"A: nextval('lc_seq') = {said(value)}. B's lastval() gave {last}, currval() {curr}. "
        f"A's lastval() gave {mine}",
        leaked=not last.failed or not curr.failed,
        lost=mine.state("55000"),
        broke=next((str(r) for r in (last, curr, mine) if r.failed and not r.state("55000")), None),
    )


@probe("read_only", "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY (B's writes refused?)",
       security=True, fixtures=True)
async def read_only(s: Scenario) -> Observation:
    note = s.name("note")
    await s.change(s.a, "SET SESSION CHARACTERISTICS", "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    b_seen = await s.observe(s.b, "read default_transaction_read_only", setting("default_transaction_read_only"))
    wrote = await s.run(s.b, "INSERT", f"INSERT INTO lc_audit (note) VALUES ({lit(note)})",
                        wrote=("public.lc_audit", "note", note))
    mine = await s.observe(s.a, "read default_transaction_read_only", setting("default_transaction_read_only"))
    s.read_back()  # before the clean-up
    await s.run(s.b, "clean up", f"DELETE FROM public.lc_audit WHERE note = {lit(note)}")
    return Observation(
        evidence=f"A: SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY. B read "
        f"default_transaction_read_only={said(b_seen)}; B's INSERT gave {wrote}. A read {said(mine)}",
        leaked=b_seen == "on" or wrote.state("25006"),
        lost=mine != "on",
        broke=str(wrote) if wrote.failed and not wrote.state("25006") else None,
    )


@probe("replication_role", "session_replication_role = replica (B's foreign key skipped?)",
       security=True, fixtures=True)
async def replication_role(s: Scenario) -> Observation:
    orphan = 1_000_000 + zlib.crc32(s.token.encode()) % 1_000_000  # no such lc_parent row
    await s.change(s.a, "SET session_replication_role", "SET session_replication_role = replica")
    b_seen = await s.observe(s.b, "read session_replication_role", setting("session_replication_role"))
    # B: a child row whose parent does not exist must fail its foreign key (23503).
    wrote = await s.run(s.b, "INSERT", f"INSERT INTO lc_child (parent) VALUES ({orphan})",
                        wrote=("public.lc_child", "parent", str(orphan)))
    mine = await s.observe(s.a, "read session_replication_role", setting("session_replication_role"))
    s.read_back()  # before the clean-up
    await s.run(s.a, "clean up", f"DELETE FROM lc_child WHERE parent = {orphan}")
    return Observation(
        evidence=f"A: SET session_replication_role = replica. B read {said(b_seen)}; B's INSERT of an orphan "
        f"lc_child row gave {wrote if wrote.failed else 'success: the foreign key was skipped'}. A read {said(mine)}",
        leaked=b_seen == "replica" or not wrote.failed,
        lost=mine != "replica",
        broke=str(wrote) if wrote.failed and not wrote.state("23503") else None,
    )


@probe("lock_timeout", "SET lock_timeout (does B's lock wait give up early?)", security=True)
async def lock_timeout(s: Scenario) -> Observation:
    key = zlib.crc32(s.token.encode()) & 0x7FFFFFFF
    await s.change(s.a, "SET lock_timeout", "SET lock_timeout = '10ms'")
    b_seen = await s.observe(s.b, "read lock_timeout", setting("lock_timeout"))
    # When B has A's setting: C (outside the pool) holds a lock, and B waits for it, bounded by its
    # own statement_timeout (B's own setting is the answer; the wait only shows the effect).
    waited = Attempt("not run")
    if b_seen == "10ms":
        try:
            waited = await _wait_for_a_lock_c_holds(s, key)
        except NotApplicable as missing:  # no direct session (a DSN without --direct-dsn): B's read decides
            waited = Attempt(f"not run: {missing}")
    mine = await s.observe(s.a, "read lock_timeout", setting("lock_timeout"))
    return Observation(
        evidence=f"A: SET lock_timeout='10ms'. B read {said(b_seen)}; B's wait for a lock C held gave {waited} "
        f"(55P03: A's lock_timeout; 57014: B's own 150ms statement_timeout). A read {said(mine)}",
        leaked=b_seen == "10ms" or waited.state("55P03"),
        lost=mine != "10ms",
        broke=str(waited) if waited.failed and not (waited.state("55P03") or waited.state("57014")) else None,
    )


async def _wait_for_a_lock_c_holds(s: Scenario, key: int) -> Attempt:
    """C (a direct session) holds an advisory lock; B waits for it, bounded by its own 150ms statement_timeout."""
    c = await s.c()
    await c.execute(f"SELECT pg_advisory_lock({key})")
    try:
        return await s.transaction(s.b, "wait for C's lock", "SET LOCAL statement_timeout = '150ms'",
                                   f"SELECT pg_advisory_xact_lock({key})::text")
    finally:
        await attempt(c.execute(f"SELECT pg_advisory_unlock({key})"))


@probe("idle_in_transaction_timeout", "SET idle_in_transaction_session_timeout (is B's session ended?)",
       security=True)
async def idle_in_transaction_timeout(s: Scenario) -> Observation:
    # A: one statement outside a transaction block (inside one, A's own timeout could end A
    # between its statements on a loaded machine); its proof is in the same statement.
    mine = await s.observe(s.a, "set_config", "set_config('idle_in_transaction_session_timeout', '50ms', false)")
    b_seen = await s.observe(s.b, "read it", setting("idle_in_transaction_session_timeout"))
    # When B has A's setting: B opens a transaction, thinks for 0.15 s, goes on. Ended by A's
    # timeout, its next statement fails (B's own setting is the answer; this shows the effect).
    went_on = Attempt("not run")
    if b_seen == "50ms":
        try:
            went_on = await _idle_in_a_block(s)
        except NotApplicable as refused:  # statement mode: B's read above is the (proven) answer
            went_on = Attempt(f"not run, the pooler refused the block: {refused}")
    return Observation(
        evidence=f"A: set_config('idle_in_transaction_session_timeout', '50ms', false) gave {said(mine)}. "
        f"B read {said(b_seen)}; "
        f"after idling 0.15 s in a transaction B's next statement gave {went_on}",
        leaked=b_seen == "50ms" or went_on.failed,
    )


async def _idle_in_a_block(s: Scenario) -> Attempt:
    """B opens a transaction, idles 0.15 s in it, and goes on: what its next statement gave."""
    ended = True  # B's session being ended is what this step observes, not a machine fault
    began = await attempt(s.b.begin(), session_end_observed=ended)
    # On a loaded machine B may be ended before its first statement in the block: that is the
    # effect itself, not a harness failure (B's proof above still holds).
    # (no proof here: B's read above proved its server; a backend the timeout ends right after this step
    # could not be confirmed by the witness any more)
    proven = await attempt(s.b.query("SELECT 1"), session_end_observed=ended) if not began.failed else began
    if proven.failed:
        went_on = proven
    else:
        await asyncio.sleep(0.15)
        went_on = await attempt(s.b.query("SELECT 1"), session_end_observed=ended)
    await attempt(s.b.rollback(), session_end_observed=ended)
    return went_on


@probe("client_encoding", "SET client_encoding (does B get bytes its driver cannot read?)", security=True)
async def client_encoding(s: Scenario) -> Observation:
    await s.change(s.a, "SET client_encoding", "SET client_encoding = 'LATIN1'")
    mine = await s.observe(s.a, "read client_encoding", setting("client_encoding"))
    b_seen = await s.observe(s.b, "read client_encoding", setting("client_encoding"))
    try:
        text = said(await s.observe(s.b, "read a non-ASCII text", "'é'::text"))
    except ServerError as exc:
        if machine_fault(exc.sqlstate, closed=exc.closed):
            raise  # the machine's failure is no finding (faults.py)
        text = f"{type(exc).__name__}: {exc}"
    except UnicodeError as exc:  # a driver that cannot decode the bytes is the finding (a timeout, a forged proof,
        text = f"{type(exc).__name__}: {exc}"  # a stall, a refusal are the harness's or an outcome: they pass)
    return Observation(
        evidence=f"A: SET client_encoding='LATIN1' (read {said(mine)}). B read {said(b_seen)} and got 'é' back as "
        f"{text}",
        leaked=b_seen == "LATIN1" or text != repr("é"),
        lost=mine != "LATIN1",
    )


PROBES: tuple[Probe, ...] = (
    session_authorization, set_role_privileged, rls_tenant, rls_tenant_local, temp_shadow, lastval, read_only,
    replication_role, lock_timeout, idle_in_transaction_timeout, client_encoding,
)
