"""Every way a run is asked to stop ends like Ctrl-C: a KeyboardInterrupt, so the servers are cleaned up.

SIGINT (Ctrl-C), SIGTERM (CI cancelling a job), SIGHUP (terminal closed, SSH dropped) and SIGQUIT
(Ctrl-\\) would otherwise end the process on the spot, leaving data folders and shared memory behind.
SIGKILL cannot be caught: what it leaves, the next run sweeps (provision/host/sweep.py).

Never lost: the handler also records the signal, so a KeyboardInterrupt that Python swallowed (raised
inside a finalizer or a garbage-collector callback: "Exception ignored in ...") is raised again at the
next safe point, `check()` (each discover measurement, each matrix test, before any output is written).

Only a server's fork holds a stop signal back (provision/host/forks.py), for milliseconds: while servers
get ready, a stop signal acts at once.

Once stopped, asyncio's reports of what the stop left behind ("Task exception was never retrieved" for a
probe's task whose agent was stopped under it, "Task was destroyed but it is pending!") are not printed:
they would come as tracebacks after the run said "interrupted", about work the stop itself abandoned.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import termios
import threading
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

from leakcheck.provision.host.forks import STOP_SIGNALS

_Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None

#: The stop signal this run received (None: none yet); cleared when the handlers are restored.
_received: list[signal.Signals] = []
#: Whether this process was ever stopped by one (never cleared: what the stop abandoned is collected later).
_stopped: list[bool] = []


class _AbandonedByTheStop(logging.Filter):
    """On asyncio's logger: nothing once the process was stopped (see the module's docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _stopped


logging.getLogger("asyncio").addFilter(_AbandonedByTheStop())


def raise_interrupt(signum: int, frame: FrameType | None) -> NoReturn:
    """A signal handler: stop the way Ctrl-C does (and remember it: see check)."""
    if not _received:
        _received.append(signal.Signals(signum))
    _stopped[:] = [True]
    if signum == signal.SIGHUP:
        _detach_from_hung_up_terminal()
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def received() -> signal.Signals | None:
    """The stop signal the run received, if any (its KeyboardInterrupt may have been swallowed)."""
    return _received[0] if _received else None


def check() -> None:
    """A safe point: raise the KeyboardInterrupt of a stop signal received earlier, again."""
    if _received:
        raise KeyboardInterrupt(f"signal {_received[0].name}")


def _detach_from_hung_up_terminal() -> None:
    """After a hang-up, writing to the terminal fails (EIO) and would abort the cleanup half-way.

    Every descriptor of a terminal that is gone (also the copies pytest's capture keeps to restore
    later) is pointed at /dev/null; a terminal that still answers is left alone (`kill -HUP`).
    """
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in _open_fds():
            if fd != devnull and _hung_up(fd):
                os.dup2(devnull, fd, inheritable=os.get_inheritable(fd))
    finally:
        os.close(devnull)


def _open_fds() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return [0, 1, 2]


def _hung_up(fd: int) -> bool:
    try:
        termios.tcgetattr(fd)
    except termios.error as exc:
        return bool(exc.args and exc.args[0] == errno.EIO)
    return False


def install() -> Callable[[], None]:
    """Make every cleanup signal raise KeyboardInterrupt; returns what restores the previous handlers.

    Only the main thread may set handlers; elsewhere this changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: dict[signal.Signals, _Handler] = {}
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) == signal.SIG_IGN and signum == signal.SIGHUP:
            continue  # started with nohup: a hang-up is meant not to stop the run
        previous[signum] = signal.signal(signum, raise_interrupt)

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _received.clear()

    return restore
