"""Cancel requests: does a client's cancel stop its own statement, and only its own?

Nobody answers a cancel request (PgBouncer closes its connection without a word), so the probes
observe the long statement itself. It waits for an advisory lock that C, a direct session, holds:
when C lets go it completes normally, so a lost cancel costs the probe CANCEL_BOUND, not seconds
of pg_sleep, and "completed normally" means what it says. The statement cannot return its own
server identity while it runs: C reads it from pg_stat_activity (Scenario.running).
"""

from __future__ import annotations

import asyncio
import zlib

from leakcheck.drivers.clients import Client
from leakcheck.model.errors import NotApplicable, ProbeError
from leakcheck.model.verdicts import Observation, Scope
from leakcheck.probes.base import Attempt, Probe, Scenario, attempt, probe

#: Seconds the long statement has to be seen running (C polls pg_stat_activity).
START_BOUND = 5.0
#: Seconds a cancel has, from its delivery (the driver's cancel call returned), to stop the long
#: statement (then C lets go). Generous: the pooler forwards it on a new connection, and PostgreSQL forks a
#: backend for it, which on a loaded 2-core machine took over 2 s (a control came out lost).
CANCEL_BOUND = 5.0
#: Seconds the long statement, and a driver's cancel call, have to end once C let go.
FINISH_BOUND = 10.0


class Long:
    """`client`'s statement waiting for C's advisory lock, run as a task; `release()` lets it complete."""

    def __init__(self, s: Scenario, client: Client, stem: str, *, session_end_observed: bool = False) -> None:
        self.s, self.client = s, client
        self.key = zlib.crc32(f"{s.token}{stem}".encode()) & 0x7FFFFFFF
        self.marker = s.name(stem)
        self.session_end_observed = session_end_observed
        self.task: asyncio.Task[Attempt] | None = None

    async def start(self, step: str) -> None:
        c = await self.s.c()
        await c.query(f"SELECT 1 FROM pg_advisory_lock({self.key})")  # (no void column: pgjdbc cannot read one)
        sql = f"SELECT 1 FROM pg_advisory_xact_lock({self.key}) /* {self.marker} */"
        self.task = asyncio.create_task(attempt(self.client.query(sql), session_end_observed=self.session_end_observed))
        try:
            await self.s.running(self.client, step, self.marker, START_BOUND)
        except BaseException:
            await self.release()
            raise

    async def ended_within(self, seconds: float, since: float) -> float | None:
        """Seconds from `since` (the loop's clock) until the statement ended, if it ended within `seconds` of it."""
        assert self.task is not None
        loop = asyncio.get_running_loop()
        done, _ = await asyncio.wait({self.task}, timeout=max(0.0, since + seconds - loop.time()))
        return loop.time() - since if done else None

    async def release(self) -> Attempt:
        """C lets go of the lock; the statement's result (bounded)."""
        c = await self.s.c()
        await c.query(f"SELECT pg_advisory_unlock({self.key})")
        assert self.task is not None
        return await asyncio.wait_for(self.task, FINISH_BOUND)


def _failed(sent: Attempt) -> str:
    """The driver's words when its cancel call reported a failure: evidence only, since a peer closes a
    cancel connection without an answer and what counts is whether the statement stopped."""
    return f" (the driver reported: {sent.error})" if sent.failed else ""


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds is not None else f"not within {CANCEL_BOUND:.0f} s"


async def _cancel_beside(s: Scenario, long: Long) -> tuple[float | None, Attempt, Attempt]:
    """A's driver cancels while `long` runs: seconds until `long` ended (None: not within
    CANCEL_BOUND of the cancel's delivery), its result once C let go, and the cancel call's own
    result. The cancel call runs beside the wait, since some drivers answer a cancel only after the
    statement before it (PDO); NotApplicable when A's driver cannot cancel."""
    assert long.task is not None
    loop = asyncio.get_running_loop()
    began = loop.time()
    cancelling = asyncio.create_task(attempt(s.a.cancel()))
    try:
        # The bound counts from the cancel's delivery (the driver's call returned), not from its start:
        # a slow machine's connect to the pooler must not turn into a lost cancel.
        await asyncio.wait({cancelling, long.task}, timeout=FINISH_BOUND, return_when=asyncio.FIRST_COMPLETED)
        if cancelling.done() and not cancelling.cancelled() and isinstance(cancelling.exception(), NotApplicable):
            acted = None  # the driver cannot cancel: nothing to wait for (raised below, once C let go)
        else:
            acted = await long.ended_within(loop.time() - began + CANCEL_BOUND, began)
    finally:
        result = await long.release()  # C lets go: a statement the cancel did not stop completes now
    return acted, result, await asyncio.wait_for(cancelling, FINISH_BOUND)


def _stopped(result: Attempt) -> bool:
    """The statement ended as a cancel ends it: 57014, or its connection closed (pgx v4 closes it)."""
    return result.state("57014") or result.state("08006") or (result.error is not None and result.error.closed)


@probe("cancel_own", "cancel request (does A's driver cancel A's own running statement?)", scope=Scope.TRANSACTION)
async def cancel_own(s: Scenario) -> Observation:
    # B: takes its proof first (in a pool of one, the server A is about to use); a driver may close
    # the connection it cancelled on (pgx), which on the shared control is B's too.
    await s.observe(s.b, "before A's statement", "1")
    long = Long(s, s.a, "cancel_own", session_end_observed=True)
    # A: a long statement (it waits for C's lock); C sees it run on A's server connection.
    await long.start("long statement")
    # A: its driver cancels it; how long until the statement ends?
    acted, result, sent = await _cancel_beside(s, long)
    if acted is not None and not result.failed:
        raise ProbeError(f"A's statement completed while C held the lock it waited for ({result}): "
                         "nothing was exercised")
    cancelled = acted is not None and _stopped(result)
    return Observation(
        evidence=f"A's statement waited on C's lock; A's driver sent a cancel{_failed(sent)}: the statement "
        + (f"ended after {_ms(acted)} with {result}" if acted is not None
           else f"was not stopped within {CANCEL_BOUND:.0f} s and completed when C let go ({result})"),
        lost=acted is None,
        broke=f"A's statement failed: {result}" if acted is not None and not cancelled else None,
        details=(("cancel_acted_ms", f"{acted * 1000:.0f}" if acted is not None else ""),),
    )


@probe("cancel_late", "cancel request sent late (does A's old cancel key stop B's statement?)")
async def cancel_late(s: Scenario) -> Observation:
    long = Long(s, s.b, "cancel_late", session_end_observed=True)
    # A: one statement, finished: A's server connection is free again.
    await s.observe(s.a, "runs and finishes", "1")
    # B: a long statement on the same server connection (a pool of one), seen running by C.
    await long.start("long statement")
    # A: its driver sends a cancel with A's key, while A runs nothing.
    acted, result, sent = await _cancel_beside(s, long)
    cancelled = acted is not None and _stopped(result)
    return Observation(
        evidence=f"A finished; B's statement waited on C's lock; A's driver sent a cancel with A's key"
        f"{_failed(sent)}: B's statement "
        + (f"was stopped after {_ms(acted)} ({result})" if cancelled else
           f"ended after {_ms(acted)} with {result}" if acted is not None
           else f"completed normally when C let go ({result})"),
        leaked=cancelled,
        broke=f"B's statement failed: {result}" if acted is not None and not cancelled else None,
        details=(("cancel_acted_ms", f"{acted * 1000:.0f}" if acted is not None else ""),),
    )


PROBES: tuple[Probe, ...] = (cancel_own, cancel_late)
