"""Advisory locks: session-level versus transaction-level."""

from __future__ import annotations

import zlib

from leakcheck.model.errors import ProbeError
from leakcheck.model.verdicts import Observation, Scope
from leakcheck.probes.base import Probe, probe, said
from leakcheck.probes.scenario import Scenario


def _key(s: Scenario) -> int:
    return zlib.crc32(s.token.encode()) & 0x7FFFFFFF


def _held(key: int, where: str) -> str:
    """How many holds of advisory lock `key` there are (`where`: an extra pg_locks condition)."""
    return (f"(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = {key} "
            f"AND granted AND {where})")


@probe("advisory_lock", "session advisory lock (pg_advisory_lock)")
async def advisory_lock(s: Scenario) -> Observation:
    key = _key(s)
    # A: takes a session-level lock and keeps it.
    await s.change(s.a, "pg_advisory_lock", f"SELECT pg_advisory_lock({key})")
    # B: does B's own session hold A's lock? Does any session still hold it?
    b_holds = await s.observe(s.b, "read pg_locks", _held(key, "pid = pg_backend_pid()"))
    anyone = await s.observe(s.b, "read pg_locks", _held(key, "true"))
    # B: a separate session cannot take A's lock; a shared one "re-enters" it.
    got = await s.observe(s.b, "pg_try_advisory_lock", f"pg_try_advisory_lock({key})")
    if got:
        await s.run(s.b, "unlock", f"SELECT pg_advisory_unlock({key})")
    # A: does its own session still hold the lock?
    a_holds = await s.observe(s.a, "read pg_locks", _held(key, "pid = pg_backend_pid()"))
    await s.run(s.a, "unlock all", "SELECT pg_advisory_unlock_all()")
    return Observation(
        evidence=f"A: pg_advisory_lock({key}). B's session holds it {b_holds} time(s), any session "
        f"{anyone}; B's pg_try_advisory_lock gave {said(got)}. A's session holds it {a_holds} time(s)",
        leaked=int(b_holds) > 0,
        lost=int(a_holds) == 0,
    )


@probe("advisory_xact_lock", "transaction advisory lock (pg_advisory_xact_lock)", scope=Scope.TRANSACTION)
async def advisory_xact_lock(s: Scenario) -> Observation:
    key = _key(s)
    # A: a lock scoped to one transaction (opened through its driver's API), released at COMMIT.
    held = await s.transaction(s.a, "pg_advisory_xact_lock", f"SELECT pg_advisory_xact_lock({key})",
                               f"SELECT {_held(key, 'true')}")
    if held.failed or int(held.value) == 0:
        raise ProbeError(f"A's transaction did not hold advisory lock {key} ({held}); nothing was exercised")
    # B: nobody should hold the lock any more.
    left = await s.observe(s.b, "read pg_locks", _held(key, "true"))
    got = await s.run(s.b, "pg_try_advisory_xact_lock", f"SELECT pg_try_advisory_xact_lock({key})")
    return Observation(
        evidence=f"A: pg_advisory_xact_lock({key}), COMMIT. B saw {left} hold(s) left "
        f"and pg_try_advisory_xact_lock gave {got}",
        leaked=int(left) > 0 or got.value is False,
        broke=str(got) if got.failed else None,
    )


PROBES: tuple[Probe, ...] = (advisory_lock, advisory_xact_lock)
