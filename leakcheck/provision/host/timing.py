"""Where this process spends its time, for scripts/benchmark.py: timers around a run's phases.

Off unless the environment variable LEAKCHECK_TIMINGS names a file: then every `timed(phase)` adds its
seconds and a count to the phase (from any thread), `mark(name)` keeps the wall-clock time of the
first (or, with `last=True`, the latest) call, and at exit the totals are written to that file as
JSON: `{"phases": {phase: [seconds, count]}, "marks": {name: epoch seconds}}`. Off, `timed` returns
one shared no-op context manager and `mark` returns at once: nothing is measured or written.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager

_FILE = os.environ.get("LEAKCHECK_TIMINGS") or None
_OFF: AbstractContextManager[None] = contextlib.nullcontext()
_lock = threading.Lock()
_phases: dict[str, list[float]] = {}
_marks: dict[str, float] = {}


@contextlib.contextmanager
def _timer(phase: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        seconds = time.perf_counter() - started
        with _lock:
            total = _phases.setdefault(phase, [0.0, 0])
            total[0] += seconds
            total[1] += 1


def timed(phase: str) -> AbstractContextManager[None]:
    """A context manager adding its duration to `phase` (a no-op unless timings are on)."""
    return _OFF if _FILE is None else _timer(phase)


def mark(name: str, *, last: bool = False) -> None:
    """Remember when `name` happened (its first time, or its latest with `last`)."""
    if _FILE is None:
        return
    now = time.time()
    with _lock:
        if last or name not in _marks:
            _marks[name] = now


def _write() -> None:
    if _FILE is None:
        return
    with _lock:
        data = {"phases": dict(_phases), "marks": dict(_marks)}
    with contextlib.suppress(OSError), open(_FILE, "w", encoding="utf-8") as f:
        json.dump(data, f)


atexit.register(_write)
