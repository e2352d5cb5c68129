"""Files given to leakcheck (matrix, baseline, results, --bouncer-ini), checked before they are read.

A regular file of at most MAX_BYTES, parsed without running out of stack, or a one-line
UsageError before any server starts. A FIFO, a device or a socket is never opened (a FIFO would
block the run until something writes to it). A baseline or results file may be gzip-compressed
(`read_text`: told by its first bytes, whatever its name; config/output_files.py writes gzip to a
`.gz` path).
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from leakcheck.model.errors import UsageError

#: The largest file leakcheck reads: 64 MiB, far above any matrix, baseline, ini or results file of a
#: matrix that fits MAX_RUNS (run/lanes.py).
MAX_BYTES = 64 * 1024 * 1024

#: The first two bytes of a gzip file (RFC 1952).
GZIP_MAGIC = b"\x1f\x8b"

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


def read_text(path: Path, where: str) -> str:
    """The UTF-8 text of a checked file (check_file), decompressed when it is gzip: at most MAX_BYTES
    either way. OSError and UnicodeDecodeError as `Path.read_text` raises them (the caller words
    them); a damaged or too large gzip file is a one-line UsageError naming `where`."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_BYTES + 1)
    if data[:2] == GZIP_MAGIC:
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as unzipped:
                data = unzipped.read(MAX_BYTES + 1)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise UsageError(f"{where}: {path} is a damaged gzip file ({exc}); give the whole file, "
                             "or its uncompressed text") from None
        if len(data) > MAX_BYTES:
            raise UsageError(f"{where}: {path} holds more than the {MAX_BYTES // 2**20} MiB leakcheck reads once "
                             "decompressed; give the right file, or split it")
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()  # newlines as Path.read_text reads them


def read_file(path: Path, option: str, what: str, hint: str, missing: str) -> str:
    """check_file, then read_text: a missing, unreadable or non-UTF-8 file is a one-line UsageError naming
    `option` (`missing`: what to do when there is none; `hint`: what to give instead of a file not `what`)."""
    check_file(path, option)
    try:
        return read_text(path, option)
    except FileNotFoundError:
        raise UsageError(f"{option}: {path} does not exist; {missing}") from None
    except OSError as exc:
        raise UsageError(f"{option}: cannot read {path} ({exc.strerror or exc}); fix its permissions") from None
    except UnicodeDecodeError:
        raise UsageError(f"{option}: {path} is not UTF-8 text, so not {what}; {hint}") from None
