"""LEAKCHECK_TIMINGS: off, the timers are one no-op; on, the phases and marks reach the file (pure)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from leakcheck.provision.host import timing


def test_without_leakcheck_timings_every_timer_is_the_same_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEAKCHECK_TIMINGS", raising=False)
    off = importlib.reload(timing)
    assert off.timed("connects") is off.timed("statements")
    off.mark("lanes start")
    assert off._phases == {} and off._marks == {}


def test_with_leakcheck_timings_the_phases_and_marks_are_written_at_exit(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    monkeypatch.setenv("LEAKCHECK_TIMINGS", str(path))
    on = importlib.reload(timing)
    try:
        for _ in range(3):
            with on.timed("connects"):
                pass
        on.mark("lanes done")
        on.mark("lanes done", last=True)
        on._write()
    finally:
        monkeypatch.delenv("LEAKCHECK_TIMINGS")
        importlib.reload(timing)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["phases"]["connects"][1] == 3 and set(data["marks"]) == {"lanes done"}
