"""The hypothesis rounds, with a stand-in measurement (no servers): shrinking, rounds, budget, aborts."""

from __future__ import annotations

import time

import pytest
from hypothesis.database import InMemoryExampleDatabase

from leakcheck.discover.compare import Comparison, Diff
from leakcheck.discover.engine import Search, _Keyed, discover, exclusions, merge, run_round
from leakcheck.discover.ops import UNIVERSE, Kind, Op, Who
from leakcheck.discover.trace import Abort

A, B = Who.A, Who.B


def leaky(ops: tuple[Op, ...]) -> Comparison:
    """As if SET work_mem and SQL PREPARE leaked to B's final snapshot, and nothing else differed."""
    diffs = []
    if any(op.kind is Kind.SET and op.arg == "work_mem" for op in ops):
        diffs.append(Diff(len(ops) + 1, B, "setting:work_mem", "'1111kB'", "'4MB'"))
    if any(op.kind is Kind.PREPARE for op in ops):
        diffs.append(Diff(len(ops) + 1, B, "prepared", "['lc_s1=lc_A_s1']", "[]"))
    return Comparison(tuple(diffs))


SEARCH = Search(seed=7, budget=60.0, max_examples=1000, max_ops=6)


def test_discovery_shrinks_each_leak_to_its_one_op_and_stops_when_a_round_finds_nothing() -> None:
    found = discover(leaky, SEARCH)
    assert sorted((len(f.ops), f.ops[0].kind) for f in found.findings) == [(1, Kind.PREPARE), (1, Kind.SET)]
    assert {f.ops[0].arg for f in found.findings if f.ops[0].kind is Kind.SET} == {"work_mem"}
    assert all(f.shrunk for f in found.findings)
    assert found.stopped.startswith(f"round {len(found.rounds)} found nothing")
    labels = {f.ops[0].kind: (f.probes, f.unlisted) for f in found.findings}
    assert labels == {Kind.SET: ((), ("session:work_mem",)), Kind.PREPARE: (("sql_prepare",), ())}


def test_a_later_round_leaves_out_every_op_that_changes_a_found_state() -> None:
    first = run_round(leaky, UNIVERSE, SEARCH, 1, time.monotonic() + 60)
    excluded = exclusions(merge(first.candidates, 1, True))
    assert excluded and excluded <= {"session:work_mem", "sql_prepare"}


def test_the_budget_ends_the_search_and_keeps_what_was_found() -> None:
    def slow(ops: tuple[Op, ...]) -> Comparison:
        time.sleep(0.01)
        return leaky(ops)

    found = discover(slow, Search(seed=7, budget=0.5, max_examples=10_000, max_ops=6))
    assert found.stopped == "the budget was spent"
    assert found.rounds[-1].status == "budget"


def test_a_harness_failure_stops_discovery_and_is_never_shrunk() -> None:
    calls = []

    def broken(ops: tuple[Op, ...]) -> Comparison:
        calls.append(ops)
        raise ValueError("the pooler went away")

    with pytest.raises(Abort, match="the pooler went away"):
        discover(broken, SEARCH)
    assert len(calls) == 1


def test_candidates_that_change_the_same_states_merge_into_the_smallest() -> None:
    from leakcheck.discover.engine import Candidate

    small = Candidate((Op(A, Kind.PREPARE, "s1"),), Comparison(()), "prepared statements")
    big = Candidate((Op(A, Kind.PREPARE, "s1"), Op(B, Kind.EXECUTE, "s1")), Comparison(()), "prepared statements/x")
    (finding,) = merge([big, small], 1, True)
    assert finding.ops == small.ops and finding.also == ("prepared statements/x",)


def test_the_example_database_keeps_each_configuration_apart() -> None:
    inner = InMemoryExampleDatabase()
    one, two = _Keyed(inner, b"one:"), _Keyed(inner, b"two:")
    one.save(b"k", b"v")
    assert list(one.fetch(b"k")) == [b"v"] and list(two.fetch(b"k")) == []
    one.move(b"k", b"j", b"v")
    assert list(one.fetch(b"j")) == [b"v"]
    one.delete(b"j", b"v")
    assert list(inner.fetch(b"one:j")) == []
