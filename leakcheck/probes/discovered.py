"""Probes that came from `leakcheck discover`: leaks no probe listed until discovery found them."""

from __future__ import annotations

from leakcheck.model.errors import ProbeError
from leakcheck.model.verdicts import Observation
from leakcheck.probes.base import Attempt, Probe, probe, said
from leakcheck.probes.scenario import Scenario
from leakcheck.probes.settings import setting

#: B's temp_buffers (a value no default has, so B reads back its own).
WANTED = "2000kB"


@probe("temp_buffers_blocked", "A's temp table stops B's SET temp_buffers (found by leakcheck discover)")
async def temp_buffers_blocked(s: Scenario) -> Observation:
    table = s.name("tmpbuf")
    # A: uses a temp table; from then on its session refuses a temp_buffers change (22023).
    await s.change(s.a, "CREATE TEMP TABLE", f"CREATE TEMP TABLE {table} AS SELECT 1 AS v")
    made = await s.run(s.a, "read it", f"SELECT count(*) FROM {table}")
    if made.failed and not made.state("42P01"):  # gone: a pooler's reset between A's statements (lost, below)
        raise ProbeError(f"A could not read its temp table ({made}); nothing was exercised")
    # B: never touched a temp table, so its change must work and read back as B set it.
    tried = await s.run(s.b, "SET temp_buffers", f"SET temp_buffers = '{WANTED}'")
    if not tried.failed:
        tried = Attempt(await s.observe(s.b, "read temp_buffers", setting("temp_buffers")))
    mine = await s.observe(s.a, "to_regclass", f"to_regclass('pg_temp.{table}')::text")
    blocked = tried.state("22023")
    if blocked:
        answer = f"failed: {tried} (22023: another session's temp table was used)"
    elif tried.failed:
        answer = f"failed: {tried}"
    else:
        answer = f"read back {said(tried.value)}" + ("" if tried.value == WANTED else f", not {said(WANTED)}")
    return Observation(
        evidence=f"A: CREATE TEMP TABLE {table}, read it. B's SET temp_buffers = '{WANTED}' {answer}. "
        f"A's table resolves as {said(mine)}",
        leaked=blocked,
        lost=mine is None or (not tried.failed and tried.value != WANTED),
        broke=f"B's SET temp_buffers {answer}" if tried.failed and not blocked else None,
    )


@probe("custom_setting_placeholder", "a custom setting another client only RESET or set locally: B finds it "
       "defined ('' instead of NULL) (found by leakcheck discover)")
async def custom_setting_placeholder(s: Scenario) -> Observation:
    name = f"leakcheck.{s.name('ph')}"  # unique: only this probe's A can have defined it
    # A: sets it for one transaction only (set_config(..., true)), as an RLS tenant often is, and
    # RESETs it: nothing of its value survives; the placeholder the server made for it does.
    await s.change(s.a, "set_config local", f"SELECT set_config('{name}', 'tenant_a', true)")
    await s.change(s.a, f"RESET {name}", f"RESET {name}")
    # B: never used the name: current_setting(name, true) must be NULL (a policy's coalesce() sees it).
    seen = await s.observe(s.b, f"read {name}", f"current_setting('{name}', true)")
    return Observation(
        evidence=f"A: set_config('{name}', 'tenant_a', true), RESET {name}. B's current_setting('{name}', true) "
        f"is {said(seen)} (NULL in a session where nobody used it)",
        leaked=seen is not None,
    )


PROBES: tuple[Probe, ...] = (temp_buffers_blocked, custom_setting_placeholder)
