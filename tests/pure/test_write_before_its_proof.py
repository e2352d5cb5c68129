"""A write is in the ledger as soon as the client's own call returned, before the follow-up proof its step may take
(`Scenario.call`'s "where"): a proof that stalls after a write the application was told is committed never hides
that write, and a missing row is a lost write in the stalled outcome's facts (run/runner.py: a Stalled probe's
observation goes through `Scenario.finish`)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from leakcheck.model.target import Route
from leakcheck.model.verdicts import Fact, Observation, Proof, ServerId, Verdict, classify
from leakcheck.probes.outcomes import Stalled
from leakcheck.probes.scenario import Scenario

SERVER = ServerId(7, "1733000000000000")


class _Witness:
    """Sees none of the client's statements (a pooler's reset followed each), and finds none of its rows."""

    def start(self) -> None:
        pass

    def fits(self, statement: str) -> str:
        return statement

    def look(self, tag_text: str) -> None:
        return None

    def present(self, table: str, ids: list[str], column: str = "id") -> set[str]:
        return set()


class _Client:
    """Its INSERT returns success (no rows); its next statement, the follow-up proof, stalls."""

    label = "A"

    async def query(self, sql: str) -> list[tuple[Any, ...]]:
        if sql.startswith("INSERT"):
            return []
        raise Stalled("A's 'INSERT: where' waited 10 s for a server connection: the pool stalled")

    async def prepared(self, sql: str) -> list[tuple[Any, ...]]:
        return await self.query(sql)


def _stalled_after(step: str) -> Observation:
    a = _Client()
    s = Scenario(a=cast(Any, a), b=cast(Any, _Client()), route=Route.TRANSACTION, witness=cast(Any, _Witness()))

    async def body() -> None:
        if step == "write":
            await s.write(cast(Any, a), "INSERT")
        else:  # a security probe's own INSERT, its row named by a column of its table
            await s.run(cast(Any, a), "INSERT", "INSERT INTO lc_audit (note) VALUES ('n')",
                        wrote=("public.lc_audit", "note", "n"))

    with pytest.raises(Stalled) as stalled:
        asyncio.run(body())
    return s.finish(Observation(evidence="the probe ended there", stalled=str(stalled.value)))


@pytest.mark.parametrize("step", ["write", "probe's INSERT"])
def test_a_write_told_committed_whose_follow_up_proof_stalls_is_a_lost_write_when_its_row_is_missing(
        step: str) -> None:
    seen = _stalled_after(step)
    assert {Fact.STALLED, Fact.LOST_WRITE, Fact.SILENT} <= set(seen.facts), seen.evidence
    assert "A's row" in seen.evidence and "is not in the database" in seen.evidence
    proofs = [Proof("before", "A", SERVER), Proof("before", "B", SERVER)]
    assert classify(Route.TRANSACTION, proofs, seen)[0] is Verdict.LOSES_WRITES
