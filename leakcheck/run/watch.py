"""While a probe runs, the servers it depends on are watched: one that dies or is stopped ends the probe.

Without it a probe whose PgBouncer was stopped (SIGSTOP) waited out its whole timeout, and one whose
PostgreSQL was killed failed with the driver's words ("server conn crashed?") instead of the cause. The
backend says what ended (NativeBackend.gone: a waitpid and a read of /proc/PID/stat per process, cheap),
the watcher asks every WATCH_INTERVAL seconds; when a server is gone the probe's task is cancelled (its
clients close), cancelled again while it still runs, and the probe is an error naming that server within
LOST_BOUND seconds. Never a verdict: `ServerLost` is raised whatever the probe would have returned.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from leakcheck.drivers.interface import ServerError
from leakcheck.model.errors import LeakcheckError, MachineFault

T = TypeVar("T")

#: Seconds between two looks at the processes a probe depends on.
WATCH_INTERVAL = 0.1
#: Seconds a probe whose server is gone may take to end (its clients close; psycopg would otherwise try
#: to cancel its statement on the gone server for up to 10 s): then the watcher stops waiting for it.
LOST_BOUND = 1.0

#: Why a server the probe uses no longer serves (its name and how it ended), else None.
Gone = Callable[[], str | None]


class ServerLost(LeakcheckError):
    """A server a probe depends on died or was stopped while the probe ran: an error, never a verdict."""

    @classmethod
    def during_probe(cls, gone: str) -> ServerLost:
        return cls(f"{gone} (during the probe: nothing was measured)")


def run_watched(work: Coroutine[Any, Any, T], timeout: float, gone: Gone) -> T:
    """`watched` on a loop of its own, like asyncio.run, but its ending is bounded too: what the probe left
    running is cancelled and waited for LOST_BOUND seconds at most, then dropped with the loop."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(watched(work, timeout, gone))
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.wait(left, timeout=LOST_BOUND))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


async def watched(work: Coroutine[Any, Any, T], timeout: float, gone: Gone) -> T:
    """`work`'s result, TimeoutError after `timeout` seconds, or ServerLost as soon as `gone()` names a server."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    deadline = loop.time() + timeout
    while True:
        left = deadline - loop.time()
        done, _ = await asyncio.wait({task}, timeout=min(WATCH_INTERVAL, max(left, 0)))
        lost = gone()
        if lost is not None:
            await _end(task)
            raise ServerLost.during_probe(lost)
        if done:
            if not task.cancelled() and _connection_failed(task.exception()):
                # The driver's error ("server conn crashed?") can arrive before the death is visible:
                # a failure is looked at again for LOST_BOUND seconds, so its cause is named.
                lost = await _settled(gone)
                if lost is not None:
                    raise ServerLost.during_probe(lost)
            return task.result()
        if left <= 0:
            await _end(task)
            raise TimeoutError


def _connection_failed(exc: BaseException | None) -> bool:
    """A failure that a server's death shows as (a broken connection), not a probe's own refusal."""
    if isinstance(exc, (MachineFault, OSError)):
        return True
    return isinstance(exc, ServerError) and (exc.closed or exc.sqlstate.startswith(("08", "57P")))


async def _settled(gone: Gone) -> str | None:
    """`gone()` looked at every WATCH_INTERVAL for LOST_BOUND seconds: the first server named, else None."""
    loop = asyncio.get_running_loop()
    until = loop.time() + LOST_BOUND
    while loop.time() < until:
        await asyncio.sleep(WATCH_INTERVAL)
        lost = gone()
        if lost is not None:
            return lost
    return None


async def _end(task: asyncio.Future[Any]) -> None:
    """Cancel `task` (again every WATCH_INTERVAL while it runs: each cancel ends one wait of its clean-up),
    for LOST_BOUND seconds at most; its own failure is dropped (the reason is the gone server)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + LOST_BOUND
    while not task.done() and loop.time() < until:
        task.cancel()
        await asyncio.wait({task}, timeout=WATCH_INTERVAL)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" warning
