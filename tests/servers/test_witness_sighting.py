"""The witness sees a client's step by the tag at the end of its statement in pg_stat_activity, which keeps only
track_activity_query_size bytes of it: the servers leakcheck starts keep enough for a long statement (a
discovery snapshot is about 1,700 bytes), where PostgreSQL's default (1024) cut the tag off."""

from __future__ import annotations

import pytest

from leakcheck.model.target import Driver, Route
from leakcheck.model.verdicts import Observation, Verdict
from leakcheck.probes.base import probe
from leakcheck.probes.scenario import Scenario
from leakcheck.probes.witness import tag
from tests.support.servers import Measure

pytestmark = pytest.mark.servers


@probe("witness_long_statement", "a tagged statement longer than 1024 bytes")
async def _long_statement(s: Scenario) -> Observation:
    assert s.witness is not None
    await s.observe(s.a, "connected", "1")
    await s.observe(s.b, "connected", "1")
    s.witness.start()
    sql = s.tagged(s.a, "SELECT '" + "x" * 1500 + "'::text")
    assert len(sql.encode()) > 1024
    await s.a.query(sql)
    seen = s.witness.look(tag(s.token, s.a.label))
    return Observation(evidence=f"A's {len(sql.encode())}-byte statement: {'sighted' if seen else 'not sighted'}")


def test_a_tagged_statement_longer_than_1024_bytes_is_sighted_by_the_witness(measure: Measure) -> None:
    got = measure(_long_statement, "16", None, Driver.PSYCOPG, Route.DIRECT)
    assert got.verdict is Verdict.ISOLATED and "statement: sighted" in got.evidence, got.evidence
