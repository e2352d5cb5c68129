"""--record's read-merge-write under a lock: processes writing one file at once lose no entry."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

from leakcheck.config import output_files
from leakcheck.gate import expectations, record
from leakcheck.model.target import Route
from leakcheck.model.verdicts import Outcome, Verdict
from leakcheck.probes import PROBES
from tests.pure.outcomes import make, with_controls

WRITERS, SAVES = 5, 5


def _outcome(probe: str) -> Outcome:
    return make(probe, "16.14", "1.24.1", Route.TRANSACTION, "psycopg", Verdict.LEAKS, "e")


def _writer(path: str, writer: int, go: Any = None) -> None:
    if go is not None:
        go.wait(30)  # every writer starts at once: their read-merge-writes overlap
    for n in range(SAVES):
        record.save(Path(path), with_controls(_outcome(PROBES[writer * SAVES + n].id)))


def test_concurrent_writers_of_one_file_lose_no_entry(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    spawn = multiprocessing.get_context("spawn")
    go = spawn.Event()
    writers = [spawn.Process(target=_writer, args=(str(path), w, go)) for w in range(WRITERS)]
    for p in writers:
        p.start()
    go.set()
    for p in writers:
        p.join(60)
    assert [p.exitcode for p in writers] == [0] * WRITERS
    assert len(expectations.load(path)) == WRITERS * SAVES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]  # no lock or temp file left


def test_a_writer_waits_while_another_holds_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    spawn = multiprocessing.get_context("spawn")
    with output_files.locked(path):
        waiting = spawn.Process(target=_writer, args=(str(path), 0))
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive() and not path.exists()
    waiting.join(60)
    assert waiting.exitcode == 0 and len(expectations.load(path)) == SAVES
