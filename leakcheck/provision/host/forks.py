"""Stop signals are held only while a server is forked, never while it gets ready.

A stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT: run/signals.py makes each a KeyboardInterrupt) that lands
inside `subprocess.Popen`, between the fork and Popen's return, leaves a server nobody holds a handle on.
`held()` keeps such a signal for the few milliseconds of the fork and delivers it right after, when the
process is known and its stop() works. Waiting for a server to answer is not held: a stop signal then
ends the run at once (a pooler stopped before it answers used to hold it for its 15 s readiness bound).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

#: The signals that stop a run the way Ctrl-C does.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold the stop signals (main thread only: elsewhere they reach the main thread anyway), then give the
    first one to the handler that was in place, as if it had just arrived."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[signal.Signals] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        caught.append(signal.Signals(signum))

    previous = {s: signal.signal(s, hold) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if caught:
            handler = previous[caught[0]]
            if callable(handler):
                handler(caught[0], None)
            elif handler == signal.SIG_DFL and caught[0] is signal.SIGINT:
                raise KeyboardInterrupt
            elif handler == signal.SIG_DFL:
                signal.raise_signal(caught[0])
