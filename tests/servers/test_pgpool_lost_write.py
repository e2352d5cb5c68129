"""pgpool-II 4.3 in raw mode leaves an autocommitted extended-protocol INSERT in a transaction of its own
(pgpool2#172: it sends BEGIN for a write it parses) when the driver sends Parse/Describe/Flush before its Sync,
as asyncpg does; the row is rolled back when the client leaves. The oracles must report that lost write, no
error told, on the session route and on the transaction route (where A and B never share a server: a lost
write needs no sharing); psycopg's Parse/Bind/Execute/Sync keeps it."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.servers


def test_asyncpg_s_autocommit_write_through_pgpool_4_3_is_lost_and_psycopg_s_is_kept(pytester: pytest.Pytester) -> None:
    pytester.runpytest_inprocess("--pg=16", "--pooler=pgpool:4.3", "--drivers=psycopg,asyncpg",
                                 "--probes=tx_free_before_commit", "--results=r.json", "-p", "no:cacheprovider")
    outcomes = json.loads((pytester.path / "r.json").read_text())["outcomes"]
    by = {(o["route"], o["driver"]): o for o in outcomes}
    lost = by[("session", "asyncpg")]
    assert lost["verdict"] == "loses_writes" and "B's row" in lost["evidence"], lost["evidence"]
    # the transaction route runs pgpool in session mode too: A and B on servers of their own ("not applicable"
    # for what they share), yet the lost write is the application's, and stays what it is
    pooled = by[("transaction", "asyncpg")]
    assert pooled["verdict"] == "loses_writes" and "shared no server" in pooled["evidence"], pooled["evidence"]
    assert {"lost_write", "silent"} <= set(pooled["facts"]), pooled
    assert by[("transaction", "psycopg")]["verdict"] == "not_applicable", by[("transaction", "psycopg")]["evidence"]
    for route in ("direct", "shared", "session"):
        assert by[(route, "psycopg")]["verdict"] == "isolated", by[(route, "psycopg")]["evidence"]
    for route in ("direct", "shared"):
        assert by[(route, "asyncpg")]["verdict"] == "isolated", by[(route, "asyncpg")]["evidence"]
