"""What leakcheck started from a server's folder, written there as it starts it: when that server's main
process ends without its own shutdown, the run (process.py) or the sweep of a killed run (sweep.py) finds
exactly what it left.

One JSON object a line, appended (a line torn by a kill is skipped when read):

- `{"pid": 123, "start": 456}`: a server's main process (its start, clock ticks since boot: a pid that
  another process took since has another start);
- `{"shm": 34, "key": 0, "uid": 101}` or `{"sem": 2, ...}`: a System V object its processes created,
  found once it answered (sysv.py).

The folder belongs to the server user, who could write this file too: nothing it names is acted on
unless it is the server user's own (a process of that user running a server program, an object that user
created), as with the owner marker (owner.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from leakcheck.provision.host.sysv import NAMES, SysvObject

LEDGER = "leakcheck-started.jsonl"


@dataclass(frozen=True)
class Started:
    pid: int
    start: int


def _append(folder: Path, records: Iterable[dict[str, int]]) -> None:
    text = "".join(json.dumps(record) + "\n" for record in records)
    if not text:
        return
    fd = os.open(folder / LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode())  # one write: a line is whole, or torn only by a kill
    finally:
        os.close(fd)


def record_process(folder: Path, pid: int, start: int) -> None:
    _append(folder, [{"pid": pid, "start": start}])


def record_objects(folder: Path, objects: Iterable[SysvObject]) -> None:
    _append(folder, [{obj.kind: obj.id, "key": obj.key, "uid": obj.uid} for obj in objects])


def parse(text: str) -> tuple[list[Started], list[SysvObject]]:
    """The processes and objects a ledger's text names (lines it cannot read are skipped)."""
    started: list[Started] = []
    objects: list[SysvObject] = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
            if "pid" in record:
                started.append(Started(int(record["pid"]), int(record["start"])))
            else:
                kind = next(k for k in NAMES if k in record)
                objects.append(SysvObject(kind, int(record[kind]), int(record["key"]), int(record["uid"])))
        except (ValueError, TypeError, KeyError, StopIteration, AttributeError):
            continue
    return started, objects


def read(folder: Path) -> tuple[list[Started], list[SysvObject]]:
    try:
        return parse((folder / LEDGER).read_text(errors="replace"))
    except OSError:
        return [], []
