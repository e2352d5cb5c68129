"""Advisory locks: session-level versus transaction-level."""

from __future__ import annotations

import zlib

from ..errors import ProbeError
from ..verdicts import Observation
from .base import Probe, Scenario, probe


def _key(s: Scenario) -> int:
    return zlib.crc32(s.token.encode()) & 0x7FFFFFFF


@probe("advisory_lock", "session advisory lock (pg_advisory_lock)")
async def advisory_lock(s: Scenario) -> Observation:
    key = _key(s)
    # A: takes a session-level lock and keeps it.
    await s.a.execute(f"SELECT pg_advisory_lock({key})")
    await s.shared("after A's lock")
    # B: a separate session cannot take A's lock; a shared one "re-enters" it.
    got = await s.b.fetchval(f"SELECT pg_try_advisory_lock({key})")
    if got:
        await s.b.execute(f"SELECT pg_advisory_unlock({key})")
    # A: does it still hold its lock?
    held = await s.a.fetchval(
        f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = {key} AND pid = pg_backend_pid()"
    )
    await s.a.execute("SELECT pg_advisory_unlock_all()")
    return Observation(
        evidence=f"A took pg_advisory_lock({key}); B's pg_try_advisory_lock gave {got!r}; "
        f"A's session holds {held} such lock(s)",
        leaked=bool(got),
        lost=int(held) == 0,
    )


@probe("advisory_xact_lock", "transaction advisory lock (pg_advisory_xact_lock)")
async def advisory_xact_lock(s: Scenario) -> Observation:
    key = _key(s)
    # A: a lock scoped to one transaction, released at COMMIT.
    await s.a.execute("BEGIN")
    await s.a.execute(f"SELECT pg_advisory_xact_lock({key})")
    held = await s.a.fetchval(f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = {key}")
    await s.a.execute("COMMIT")
    if int(held) == 0:
        raise ProbeError(f"A's transaction did not hold advisory lock {key}; nothing was exercised")
    await s.shared("after A's COMMIT")
    # B: nobody should hold the lock any more.
    left = await s.b.fetchval(f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = {key}")
    got = await s.b.fetchval(f"SELECT pg_try_advisory_xact_lock({key})")
    return Observation(
        evidence=f"A took pg_advisory_xact_lock({key}) and committed; B saw {left} lock(s) left "
        f"and pg_try_advisory_xact_lock gave {got!r}",
        leaked=int(left) > 0 or not got,
    )


PROBES: tuple[Probe, ...] = (advisory_lock, advisory_xact_lock)
