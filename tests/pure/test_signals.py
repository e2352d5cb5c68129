"""A stop signal is never lost: one Python swallowed (raised in a finalizer) is raised again at a safe point."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from leakcheck.run import signals


@pytest.fixture
def installed() -> Iterator[None]:
    restore = signals.install()
    yield
    restore()


class _SignalsInItsFinalizer:
    """An object whose finalizer is interrupted: Python prints "Exception ignored in" and goes on."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs between bytecodes, here, inside __del__
            pass


def _swallowed_interrupt() -> None:
    ring: list[object] = [_SignalsInItsFinalizer()]
    ring.append(ring)  # a cycle: only the garbage collector finalizes it
    del ring
    gc.collect()


def test_a_ctrl_c_swallowed_by_a_finalizer_is_raised_again_at_the_next_safe_point(
    installed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ignored: list[sys.UnraisableHookArgs] = []
    monkeypatch.setattr(sys, "unraisablehook", ignored.append)
    _swallowed_interrupt()  # Python went on after the interrupt ("Exception ignored in ...")
    assert [type(u.exc_value) for u in ignored] == [KeyboardInterrupt]
    assert signals.received() is signal.SIGINT
    with pytest.raises(KeyboardInterrupt, match="signal SIGINT"):
        signals.check()


def test_a_safe_point_without_a_signal_lets_the_run_go_on(installed: None) -> None:
    signals.check()
    assert signals.received() is None


def test_restoring_the_handlers_forgets_the_signal() -> None:
    restore = signals.install()
    with pytest.raises(KeyboardInterrupt):
        signals.raise_interrupt(signal.SIGTERM, None)
    assert signals.received() is signal.SIGTERM
    restore()
    signals.check()
    assert signals.received() is None


#: A command interrupted while a task it started had failed unseen (as a probe's task whose agent was
#: stopped): Python reports such a task when it is collected, after the command said "interrupted".
_LEFT_BEHIND = """
import asyncio, os, signal, sys, time
from leakcheck.cli.exits import guarded

def body():
    loop = asyncio.new_event_loop()

    async def fails():
        raise RuntimeError("the agent was stopped")

    task = loop.create_task(fails())
    loop.run_until_complete(asyncio.sleep(0.01))  # it failed; nobody asks it
    loop.close()
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
    return 0

sys.exit(guarded(body))
"""


def test_nothing_but_interrupted_is_said_of_tasks_a_ctrl_c_left_behind() -> None:
    done = subprocess.run([sys.executable, "-c", _LEFT_BEHIND], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 130
    assert done.stderr == "leakcheck: interrupted\n"
