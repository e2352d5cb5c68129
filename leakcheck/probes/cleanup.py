"""Another client's clean-up of prepared statements (Prisma's `pgbouncer=true` DEALLOCATE ALL, a
pool's DISCARD ALL, a DEALLOCATE by name): does A's next prepared execution still work, and how?"""

from __future__ import annotations

from leakcheck.model.verdicts import Observation
from leakcheck.probes.base import Attempt, Probe, probe
from leakcheck.probes.prepared import fails, first_failed, names_after, names_holding, prepare_in_a, retried
from leakcheck.probes.scenario import Scenario


async def _a_runs_again(s: Scenario, marker: str, before: list[str], after: list[str], b_did: str,
                        b_failed: Attempt | None = None) -> Observation:
    """A's prepared run after B's clean-up, in autocommit as the application runs it (retried once if it
    failed, as an application's next request is); then an observer reads A's server's statements. Facts:
    B's clean-up removed A's statements from the server they share (leaked), A's run failed (broke), A's
    run worked but its statement is no longer prepared there (lost), A got another value than its own
    (leaked), the driver or pooler got over it (recovered)."""
    run = await s.prepared(s.a, "prepared run after B's clean-up", f"'{marker}'::text", own=marker)
    names = [] if run.failed else await names_after(s, marker)
    retry, recovered = await retried(s, s.a, "prepared run after B's clean-up", marker, run)
    removed = [n for n in before if n not in after]
    foreign = not retry.failed and retry.value != marker
    if removed and not run.failed and names:  # gone, yet A's run found it prepared: made again for A
        recovered = f"A's statement was prepared again on the server as {names} (by the pooler or the driver)"
    return Observation(
        evidence=f"A prepared SELECT '{marker}'. B saw {before} and {b_did}, then saw {after}; A's next prepared "
        f"run gave {run}" + (f" (prepared there as {names})" if names else "")
        + (f", its retry {retry}" if run.failed else "") + (" (not A's own value)" if foreign else ""),
        leaked=bool(removed) or foreign,
        lost=not run.failed and not names,
        broke=fails(("A after B's clean-up", run), *((("B", b_failed),) if b_failed is not None else ())),
        recovered=recovered,
    )


async def _cleanup_all(s: Scenario, command: str) -> Observation:
    marker = s.name("prep")
    first, _ = await prepare_in_a(s, marker)
    if first.failed:
        return first_failed(first)
    # B: the statements holding A's text on the server they share, then the clean-up. DISCARD ALL
    # cannot run in a transaction block: B's reads before and after carry its proofs (a pool of one).
    before = await s.observe_array(s.b, "read pg_prepared_statements", names_holding(marker))
    done = await s.run(s.b, command, command)
    after = await s.observe_array(s.b, f"read pg_prepared_statements after {command}", names_holding(marker))
    # A: its next prepared execution.
    return await _a_runs_again(s, marker, before, after, f"ran {command}: {done}", done if done.failed else None)


@probe("cleanup_deallocate_all", "another client's DEALLOCATE ALL (Prisma's pgbouncer=true) under A's statement")
async def cleanup_deallocate_all(s: Scenario) -> Observation:
    return await _cleanup_all(s, "DEALLOCATE ALL")


@probe("cleanup_discard_all", "another client's DISCARD ALL (a pool's reset) under A's prepared statement")
async def cleanup_discard_all(s: Scenario) -> Observation:
    return await _cleanup_all(s, "DISCARD ALL")


@probe("cleanup_deallocate_named", "another client's DEALLOCATE of A's prepared statement by its name")
async def cleanup_deallocate_named(s: Scenario) -> Observation:
    marker = s.name("prep")
    first, _ = await prepare_in_a(s, marker)
    if first.failed:
        return first_failed(first)
    # B: reads the names of A's statements (the driver's or PgBouncer's PGBOUNCER_n) and drops the first.
    before = await s.observe_array(s.b, "read pg_prepared_statements", names_holding(marker))
    if not before:
        after: list[str] = []
        did = "had no name to deallocate"
    else:
        quoted = '"' + before[0].replace('"', '""') + '"'
        dropped = await s.run(s.b, f"DEALLOCATE {before[0]}", f"DEALLOCATE {quoted}")
        after = await s.observe_array(s.b, "read pg_prepared_statements after DEALLOCATE", names_holding(marker))
        did = f"ran DEALLOCATE {before[0]}: {dropped}"
    # A: its next prepared execution (B's DEALLOCATE failing is no break of A's: it is recorded, not counted).
    return await _a_runs_again(s, marker, before, after, did)


PROBES: tuple[Probe, ...] = (cleanup_deallocate_all, cleanup_discard_all, cleanup_deallocate_named)
