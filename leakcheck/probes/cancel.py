"""Cancel requests: does a client's cancel stop its own statement, and only its own?

Nobody answers a cancel request (PgBouncer closes its connection without a word), so the probes
observe the long statement itself. It waits for an advisory lock that C, a direct session, holds:
when C lets go it completes normally, so a lost cancel costs the probe at most CANCEL_BOUND, not
seconds of pg_sleep, and "completed normally" means what it says. The statement cannot return its
own server identity while it runs: C reads it from pg_stat_activity (Scenario.running).

A cancel that has not stopped the statement counts as one that never will after CANCEL_BOUND from its
delivery, or sooner on evidence: A's driver returned only once its peer had closed the cancel connection
(the peer read the request), and then the route said that no cancel request is in flight any more
(Scenario.cancels_settled: PostgreSQL closes that connection once it signalled the backend; PgBouncer
1.18+ counts a forwarded request until PostgreSQL closed the connection it went on). A backend signalled
before C lets go fails its statement with 57014 when it wakes, so the statement's result once C let go
is the measurement, whenever the cancel landed.

Only that evidence makes a cancel *lost*: where the route cannot say whether a cancel request is still in
flight (Odyssey, pgpool-II, a fleet, a running pooler, PgBouncer before 1.18), a statement still waiting at
the bound that then completed normally once C let go may have met a cancel that was merely slow, so the
probe is an error, never a verdict (`Sent.unsettled`).
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass, replace

from leakcheck.drivers.interface import Client
from leakcheck.model.errors import NotApplicable, ProbeError
from leakcheck.model.verdicts import Observation, Scope
from leakcheck.probes.base import Attempt, Probe, attempt, probe, said
from leakcheck.probes.scenario import Scenario

#: Seconds the long statement has to be seen running (C polls pg_stat_activity).
START_BOUND = 5.0
#: Seconds a cancel has, from its delivery (the driver's cancel call returned), to stop the long
#: statement (then C lets go), unless the route said sooner that none is in flight. Generous: the pooler
#: forwards it on a new connection, and PostgreSQL forks a backend for it, which on a loaded 2-core
#: machine took over 2 s (a control came out lost, when the bound still made a verdict: now `Sent.unsettled`).
CANCEL_BOUND = 5.0
#: Seconds the long statement, and a driver's cancel call, have to end once C let go.
FINISH_BOUND = 10.0
#: Seconds between looks at the statement, and at the route's word on cancels in flight.
LOOK = 0.02


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

    async def release(self) -> Attempt:
        """C lets go of the lock; the statement's result (bounded)."""
        c = await self.s.c()
        await c.query(f"SELECT pg_advisory_unlock({self.key})")
        assert self.task is not None
        return await asyncio.wait_for(self.task, FINISH_BOUND)


@dataclass(frozen=True)
class Sent:
    """What became of a cancel sent while the long statement waited."""

    #: seconds from the cancel's start until the statement ended, if it ended before the wait did
    acted: float | None
    #: what said no cancel request was in flight any more, with when, if that ended the wait
    settled: str | None
    #: the statement's result once C let go
    result: Attempt
    #: the driver's cancel call's own result
    call: Attempt
    #: whether the witness still saw the statement waiting when the bound passed (None: the wait ended sooner)
    waiting_at_bound: bool | None = None

    @property
    def stopped(self) -> bool:
        """The statement ended as a cancel ends it: 57014, or its connection closed (pgx v4 closes it)."""
        error = self.result.error
        return self.result.state("57014") or self.result.state("08006") or (error is not None and error.closed)

    def story(self) -> str:
        """What the statement did, in evidence words: how the wait for it ended, then its result."""
        if self.acted is not None:
            return f"{'was stopped' if self.stopped else 'ended'} after {self.acted * 1000:.0f} ms ({self.result})"
        waited = f"had not ended when {self.settled}" if self.settled else f"had not ended within {CANCEL_BOUND:.0f} s"
        then = ("was stopped" if self.stopped else "failed" if self.result.failed else "completed normally")
        return f"{waited}, and {then} once C let go ({self.result})"

    @property
    def unsettled(self) -> bool:
        """The wait ended at the bound with nothing said (neither the statement ended nor the route said no cancel
        was in flight), and C's release let the statement complete: a cancel still in flight looks the same as
        a lost one, so nothing was measured."""
        return self.acted is None and self.settled is None and not self.result.failed

    def unsettled_error(self, whose: str) -> ProbeError:
        seen = {True: "the witness still saw it waiting on C's lock then", False: "the witness no longer saw it "
                "waiting then", None: "there was no witness"}[self.waiting_at_bound]
        return ProbeError(
            f"{whose} statement {self.story()}{self.reported()}; {seen}. Nothing said whether the cancel request "
            f"was lost or still on its way (this route cannot say whether one is in flight), so no verdict: a "
            f"cancel slower than {CANCEL_BOUND:.0f} s on a loaded machine is not a lost one")

    def reported(self) -> str:
        """The driver's words when its cancel call reported a failure: evidence only, since a peer closes a
        cancel connection without an answer and what counts is whether the statement stopped."""
        return f" (the driver reported: {self.call.error})" if self.call.failed else ""

    def details(self) -> tuple[tuple[str, str], ...]:
        return (("cancel_acted_ms", f"{self.acted * 1000:.0f}" if self.acted is not None else ""),)


async def _cancel_beside(s: Scenario, long: Long) -> Sent:
    """A's driver cancels while `long` runs; the statement's result once C let go. The cancel call runs
    beside the wait, since some drivers answer a cancel only after the statement before it (PDO);
    NotApplicable when A's driver cannot cancel."""
    assert long.task is not None
    loop = asyncio.get_running_loop()
    began = loop.time()
    cancelling = asyncio.create_task(attempt(s.a.cancel()))
    acted: float | None = None
    settled: str | None = None
    waiting: bool | None = None
    try:
        # The bound counts from the cancel's delivery (the driver's call returned), not from its start:
        # a slow machine's connect to the pooler must not turn into a lost cancel.
        await asyncio.wait({cancelling, long.task}, timeout=FINISH_BOUND, return_when=asyncio.FIRST_COMPLETED)
        if not (cancelling.done() and not cancelling.cancelled() and isinstance(cancelling.exception(), NotApplicable)):
            acted, settled = await _until_ended_or_settled(s, long.task, cancelling, began)
            if acted is None and settled is None and s.witness is not None:  # the bound passed: on the server?
                waiting = s.witness.running(long.marker) is not None
        # else the driver cannot cancel: nothing to wait for (raised below, once C let go)
    finally:
        result = await long.release()  # C lets go: a statement the cancel did not stop completes now
    return Sent(acted, settled, result, await asyncio.wait_for(cancelling, FINISH_BOUND), waiting)


async def _until_ended_or_settled(s: Scenario, task: asyncio.Task[Attempt], cancelling: asyncio.Task[Attempt],
                                  began: float) -> tuple[float | None, str | None]:
    """Seconds from `began` until the statement ended, if it did within CANCEL_BOUND; else None, with what
    said that no cancel request was in flight any more if that came first (`_settled`, asked while the
    statement is still watched, and only until the bound)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CANCEL_BOUND
    while True:
        left = deadline - loop.time()
        done, _ = await asyncio.wait({task}, timeout=max(0.0, min(LOOK, left)))
        if done:
            return loop.time() - began, None
        if left <= LOOK:
            return None, None
        asking = asyncio.ensure_future(_settled(s, cancelling))
        until = max(0.0, deadline - loop.time())
        await asyncio.wait({asking, task}, timeout=until, return_when=asyncio.FIRST_COMPLETED)
        if task.done() or not asking.done():  # it ended while the route was asked, or the route took the bound
            asking.cancel()
            await asyncio.gather(asking, return_exceptions=True)
            continue
        said = asking.result()
        if said is not None:
            return None, f"{said} ({(loop.time() - began) * 1000:.0f} ms after the cancel began)"


async def _settled(s: Scenario, cancelling: asyncio.Task[Attempt]) -> str | None:
    """What said that no cancel request is in flight any more: asked only once A's driver returned after
    its peer closed the cancel connection, and only where the route can tell (Scenario.cancels_settled)."""
    if s.cancels_settled is None or not cancelling.done():
        return None
    call = cancelling.result()
    if call.failed or call.value is not True:
        return None
    said = await s.cancels_settled()
    return f"A's driver had seen its peer close the cancel connection, and {said}" if said else None


@probe("cancel_own", "cancel request (does A's driver cancel A's own running statement?)", scope=Scope.TRANSACTION)
async def cancel_own(s: Scenario) -> Observation:
    return await _cancel_own(s)


@probe("cancel_own_protocol_32", "cancel request with protocol 3.2's longer key (A asks for 3.2 at connect, libpq "
       "18's max_protocol_version): does A's driver still cancel A's own statement?", scope=Scope.TRANSACTION,
       protocol="3.2")
async def cancel_own_protocol_32(s: Scenario) -> Observation:
    # A: connected asking for protocol 3.2 (the runner); PostgreSQL 18 gives it 3.2 and a 256-bit cancel key, a
    # server or pooler that speaks only 3.0 answers with NegotiateProtocolVersion and a 32-bit key.
    spoken = s.a.protocol()
    seen = await _cancel_own(s)
    return replace(seen, evidence=f"A asked for protocol 3.2 and speaks {said(spoken)}. {seen.evidence}",
                   details=(*seen.details, ("protocol", str(spoken))))


async def _cancel_own(s: Scenario) -> Observation:
    # B: takes its proof first (in a pool of one, the server A is about to use); a driver may close
    # the connection it cancelled on (pgx), which on the shared control is B's too.
    await s.observe(s.b, "before A's statement", "1")
    long = Long(s, s.a, "cancel_own", session_end_observed=True)
    # A: a long statement (it waits for C's lock); C sees it run on A's server connection.
    await long.start("long statement")
    # A: its driver cancels it; how long until the statement ends?
    sent = await _cancel_beside(s, long)
    if sent.acted is not None and not sent.result.failed:
        raise ProbeError(f"A's statement completed while C held the lock it waited for ({sent.result}): "
                         "nothing was exercised")
    if sent.unsettled:  # lost only where the route said no cancel was in flight any more
        raise sent.unsettled_error("A's")
    return Observation(
        evidence=f"A's statement waited on C's lock; A's driver sent a cancel{sent.reported()}: the statement "
        f"{sent.story()}",
        lost=not sent.result.failed,
        broke=f"A's statement failed: {sent.result}" if sent.result.failed and not sent.stopped else None,
        details=sent.details(),
    )


@probe("cancel_late", "cancel request sent late (does A's old cancel key stop B's statement?)")
async def cancel_late(s: Scenario) -> Observation:
    long = Long(s, s.b, "cancel_late", session_end_observed=True)
    # A: one statement, finished: A's server connection is free again.
    await s.observe(s.a, "runs and finishes", "1")
    # B: a long statement on the same server connection (a pool of one), seen running by C.
    await long.start("long statement")
    # A: its driver sends a cancel with A's key, while A runs nothing.
    sent = await _cancel_beside(s, long)
    return Observation(
        evidence=f"A finished; B's statement waited on C's lock; A's driver sent a cancel with A's key"
        f"{sent.reported()}: B's statement {sent.story()}",
        leaked=sent.stopped,
        broke=f"B's statement failed: {sent.result}" if sent.result.failed and not sent.stopped else None,
        details=sent.details(),
    )


PROBES: tuple[Probe, ...] = (cancel_own, cancel_late, cancel_own_protocol_32)
