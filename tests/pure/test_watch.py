"""The watcher (run/watch.py) ends a probe once its server is gone, and a fork holds a stop signal only
for itself (provision/host/forks.py). Pure: coroutines and this process's own signals, no server."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from leakcheck.provision.host import forks
from leakcheck.provision.host.process import stopped
from leakcheck.run import signals
from leakcheck.run.watch import LOST_BOUND, ServerLost, run_watched, watched


async def _forever() -> str:
    await asyncio.sleep(3600)
    return "never"


async def _stubborn() -> str:
    """A clean-up that waits again after each cancel (as psycopg's cancel of a statement does)."""
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue


def test_a_probe_whose_server_is_gone_ends_with_server_lost_naming_it() -> None:
    looks = iter([None, None, "PgBouncer 1.24: it is stopped (SIGSTOP)"])
    with pytest.raises(ServerLost, match="PgBouncer 1.24: it is stopped"):
        asyncio.run(watched(_forever(), 60, lambda: next(looks)))


def test_a_probe_that_ignores_its_cancel_is_left_after_the_lost_bound() -> None:
    started = time.monotonic()
    with pytest.raises(ServerLost):
        run_watched(_stubborn(), 60, lambda: "PostgreSQL 16: it was ended by SIGKILL")
    assert time.monotonic() - started < 10 * LOST_BOUND


def test_a_probe_with_its_servers_running_gives_its_result() -> None:
    async def quick() -> str:
        await asyncio.sleep(0.25)
        return "measured"

    assert asyncio.run(watched(quick(), 60, lambda: None)) == "measured"


def test_a_probe_past_its_timeout_is_a_timeout_error() -> None:
    with pytest.raises(TimeoutError):
        asyncio.run(watched(_forever(), 0.3, lambda: None))


def test_a_running_process_is_not_stopped_and_one_that_is_gone_is_not_either() -> None:
    assert not stopped(os.getpid())
    assert not stopped(2**22 + 1)  # above pid_max: no such process


def test_a_stop_signal_inside_a_fork_acts_right_after_it() -> None:
    restore = signals.install()
    try:
        with pytest.raises(KeyboardInterrupt), forks.held():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler would run here, between bytecodes: held instead
                pass
            Path(os.devnull).stat()  # still inside: nothing raised yet
            reached = True
        assert reached
    finally:
        restore()
