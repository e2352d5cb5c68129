"""Files given to leakcheck (matrix, baseline, results, --bouncer-ini), checked before they are read.

A regular file of at most MAX_BYTES, parsed without running out of stack, or a one-line
UsageError before any server starts. A FIFO, a device or a socket is never opened (a FIFO would
block the run until something writes to it).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from leakcheck.model.errors import UsageError

#: The largest file leakcheck reads: 64 MiB, far above any matrix, baseline, ini or results file of a
#: matrix that fits MAX_RUNS (run/lanes.py).
MAX_BYTES = 64 * 1024 * 1024

T = TypeVar("T")

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_file(path: Path, where: str) -> None:
    """A regular file of at most MAX_BYTES, or nothing there or a folder (the caller says so in its
    own words); anything else is a one-line UsageError naming `where`. Opens nothing."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"{where}: cannot read {path} ({exc.strerror or exc})") from None
    if stat.S_ISDIR(found.st_mode):
        return
    kind = next((name for test, name in _KINDS if test(found.st_mode)), None)
    if kind is not None or not stat.S_ISREG(found.st_mode):
        raise UsageError(f"{where}: {path} is {kind or 'not a regular file'}, not a file leakcheck reads; "
                         "give the path of a regular file")
    if found.st_size > MAX_BYTES:
        raise UsageError(f"{where}: {path} is {found.st_size / 2**20:.0f} MiB, more than the {MAX_BYTES // 2**20} MiB "
                         "leakcheck reads; give the right file, or split it")


def parse(loads: Callable[[str], T], text: str, where: str) -> T:
    """`loads(text)` (json.loads, tomllib.loads); a document nested too deep for the parser is a
    one-line UsageError, not a RecursionError traceback."""
    try:
        return loads(text)
    except RecursionError:
        raise UsageError(f"{where}: it is nested too deeply to read (thousands of levels); no leakcheck file "
                         "nests more than a few levels") from None
