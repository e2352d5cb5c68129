"""PHP PDO's lost commit (issue 24), measured end to end: a transaction that frees its prepared statement before
COMMIT loses its row through PgBouncer's statement tracking while commit() returns true. The matrix must call it
a lost write no error told the application on exactly the tracking cells, and nothing of the kind elsewhere or on
any control."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.servers

RUN = ["--pg=16", "--bouncer=1.18", "--drivers=pdo", "--probes=tx_free_before_commit", "--jobs=2",
       "--results=r.json", "-p", "no:cacheprovider"]


def test_pdo_loses_its_commit_silently_on_exactly_the_cells_that_track_statements(pytester: pytest.Pytester) -> None:
    pytester.runpytest_inprocess(*RUN[:1], "--bouncer=1.24,1.26", *RUN[2:],
                                 "--bouncer-set=max_prepared_statements=0,200")
    outcomes = json.loads((pytester.path / "r.json").read_text())["outcomes"]
    measured = {(o["route"], (o["pooler"] or {}).get("label", "")): o for o in outcomes}
    tracking = {label for route, label in measured if route == "transaction" and "max_prepared_statements=200" in label}
    assert tracking == {"pgbouncer1.24.1[max_prepared_statements=200]", "pgbouncer1.26.1[max_prepared_statements=200]"}
    for (route, label), o in measured.items():
        if route == "transaction" and label in tracking:
            assert o["verdict"] == "loses_writes" and {"lost_write", "silent"} <= set(o["facts"]), (label, o)
            assert "not in the database" in o["evidence"]
        else:
            assert o["verdict"] == "isolated" and "lost_write" not in o["facts"], (route, label, o["evidence"])


def test_pdo_keeps_its_commit_on_the_default_1_18(pytester: pytest.Pytester) -> None:
    pytester.runpytest_inprocess(*RUN[:1], "--bouncer=1.18", *RUN[2:], "--controls=no")
    (o,) = json.loads((pytester.path / "r.json").read_text())["outcomes"]
    assert o["verdict"] == "isolated" and "every write reported committed is in the database" in o["evidence"]
