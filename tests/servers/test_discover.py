"""Discovery on real servers: it finds leaks through the pooler, and nothing on the controls.

A smoke run, not a measurement: PostgreSQL 16 and PgBouncer 1.24 with psycopg, a fixed seed and
small budgets (`leakcheck discover` measures with the real default budget).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from leakcheck.discover import command, lab
from leakcheck.discover.differential import Differential
from leakcheck.discover.engine import discover
from leakcheck.discover.findings import Search
from leakcheck.discover.ops import Kind, Op, Who
from leakcheck.discover.options import Options
from leakcheck.model.target import Driver, Route
from leakcheck.provision.native import NativeBackend
from tests.support.discover_lab import discover_lab

pytestmark = pytest.mark.servers


def _lab(native: NativeBackend, route: Route) -> lab.Lab:
    return discover_lab(native, route, "1.24")


def test_discovery_finds_a_leak_through_the_pooler_within_seconds(native: NativeBackend) -> None:
    with Differential(_lab(native, Route.TRANSACTION), Driver.PSYCOPG) as measure:
        found = discover(measure, Search(seed=1, budget=3.0, max_examples=300, max_ops=6))
    assert found.findings, f"nothing found: {found.stopped}"
    first = found.findings[0]
    assert first.diffs and first.comparison.subject_servers.startswith("A and B on pid ")


def test_a_known_leak_replays_as_a_difference_with_proofs(native: NativeBackend) -> None:
    with Differential(_lab(native, Route.TRANSACTION), Driver.ASYNCPG) as measure:
        comparison = measure((Op(Who.A, Kind.PREPARE, "s1"), Op(Who.B, Kind.EXECUTE, "s1")))
    keys = [(d.who, d.key) for d in comparison.diffs]
    assert (Who.B, "result:execute") in keys and (Who.B, "prepared") in keys


@pytest.mark.parametrize("route", [Route.DIRECT, Route.SESSION])
def test_the_controls_find_nothing(native: NativeBackend, route: Route) -> None:
    with Differential(_lab(native, route), Driver.PSYCOPG) as measure:
        found = discover(measure, Search(seed=1, budget=20.0, max_examples=40, max_ops=8))
    assert found.findings == []
    assert found.stopped.startswith("round 1 found nothing new in ")  # the distinct ones of 40 draws


def test_the_command_prints_each_finding_writes_its_file_and_exits_1_for_new_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    opts = Options(cell=(("leakcheck_pg", "16"), ("leakcheck_bouncer", "1.24")), budget=3.0, seed=3,
                   max_examples=300, out=tmp_path)
    code = command.run(opts)
    out = capsys.readouterr().out
    files = sorted(tmp_path.glob("pg16.*-pgbouncer1.24.*-psycopg-transaction-*.sql"))
    summary = out.strip().splitlines()[-2]
    assert summary.startswith("discover: PostgreSQL 16.") and " known" in summary and " new" in summary
    assert files and all(f.read_text() in out for f in files)
    assert code == (1 if any("-new-" in f.name for f in files) else 0)
