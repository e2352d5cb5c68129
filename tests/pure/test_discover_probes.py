"""The probes discovery found, against a stand-in scenario (no servers): what their evidence claims."""

from __future__ import annotations

import asyncio
from typing import Any

from leakcheck.drivers.interface import ServerError
from leakcheck.model.verdicts import Observation
from leakcheck.probes.base import Attempt
from leakcheck.probes.discovered import temp_buffers_blocked


class Stage:
    """A scenario whose B gets `tried` for its SET temp_buffers (its value, read back next); A's table always
    resolves."""

    a, b = "A", "B"
    resets_after_transaction = False

    def __init__(self, tried: Attempt) -> None:
        self.tried = tried

    def name(self, base: str) -> str:
        return f"lc_{base}"

    async def change(self, client: str, step: str, sql: str) -> None:
        return None

    async def run(self, client: str, step: str, sql: str) -> Attempt:
        if client == "A":
            return Attempt(1)
        return self.tried if self.tried.failed else Attempt()

    async def observe(self, client: str, step: str, expr: str) -> Any:
        return self.tried.value if client == "B" else "lc_tmpbuf"


def measured(tried: Attempt) -> Observation:
    return asyncio.run(temp_buffers_blocked.body(Stage(tried)))  # type: ignore[arg-type]


def test_temp_buffers_blocked_blames_another_sessions_temp_table_only_when_22023_was_seen() -> None:
    blocked = measured(Attempt(error=ServerError("22023", "invalid value for parameter")))
    assert blocked.leaked and blocked.broke is None and "another session's temp table" in blocked.evidence
    fine = measured(Attempt("2000kB"))
    assert not fine.leaked and fine.broke is None and "22023" not in fine.evidence
    assert "read back '2000kB'" in fine.evidence


def test_temp_buffers_blocked_reports_a_change_that_failed_otherwise_as_broken() -> None:
    seen = measured(Attempt(error=ServerError("42501", "permission denied")))
    assert not seen.leaked and seen.broke is not None and "another session's" not in seen.evidence


def test_temp_buffers_blocked_reports_a_change_read_back_otherwise_as_lost_by_b() -> None:
    seen = measured(Attempt("8MB"))
    assert not seen.leaked and seen.broke is None and seen.lost and "not '2000kB'" in seen.evidence
