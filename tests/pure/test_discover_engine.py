"""The hypothesis rounds, with a stand-in measurement (no servers): shrinking, rounds, budget, aborts."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from hypothesis.database import InMemoryExampleDatabase

from leakcheck.discover.compare import Comparison, Diff
from leakcheck.discover.engine import discover, mapped, merge, run_round, tighten
from leakcheck.discover.examples import Keyed
from leakcheck.discover.findings import Candidate, Search, first_unexplained
from leakcheck.discover.ops import Kind, Op, Who
from leakcheck.discover.trace import Abort

A, B = Who.A, Who.B


def leaky(ops: tuple[Op, ...]) -> Comparison:
    """As if A's SET work_mem and SQL PREPARE leaked to B's final snapshot, and nothing else differed."""
    diffs = []
    if any(op.kind is Kind.SET and op.arg == "work_mem" and op.who is A for op in ops):
        diffs.append(Diff(len(ops) + 1, B, "setting:work_mem", "'1111kB'", "'4MB'"))
    if any(op.kind is Kind.PREPARE and op.who is A for op in ops):
        diffs.append(Diff(len(ops) + 1, B, "prepared", "['lc_s1=lc_A_s1']", "[]"))
    return Comparison(tuple(diffs))


SEARCH = Search(seed=7, budget=60.0, max_examples=1000, max_ops=6)


def test_discovery_shrinks_each_leak_to_its_one_op_and_stops_when_a_round_finds_nothing() -> None:
    # 1000 sequences a round: A's SET work_mem is one op of about a thousand a draw can give, yet a sequence
    # draws up to 6 (and units of work hold ops of any kind too)
    found = discover(leaky, replace(SEARCH, max_examples=1000))
    assert sorted((len(f.ops), f.ops[0].kind) for f in found.findings) == [(1, Kind.PREPARE), (1, Kind.SET)]
    assert {f.ops[0].arg for f in found.findings if f.ops[0].kind is Kind.SET} == {"work_mem"}
    assert all(f.shrunk for f in found.findings)
    assert found.stopped.startswith(f"round {len(found.rounds)} found nothing new")
    labels = {f.ops[0].kind: (f.probes, f.unlisted) for f in found.findings}
    assert labels == {Kind.SET: ((), ("session:work_mem",)), Kind.PREPARE: (("sql_prepare",), ())}


def test_a_later_round_fails_only_on_differences_no_earlier_candidate_explains() -> None:
    first = run_round(leaky, SEARCH, 1, time.monotonic() + 60)
    assert first.candidates
    for c in first.candidates:
        assert first_unexplained(c.comparison.diffs, c.ops, first.candidates) is None
        assert first_unexplained(c.comparison.diffs, c.ops, []) == c.signature


def test_another_effect_of_a_found_state_is_still_unexplained() -> None:
    seen = Candidate((Op(A, Kind.PROTOCOL, "p1"),), Comparison(()), "prepared statements")
    collision = (Op(A, Kind.PROTOCOL, "p1"), Op(B, Kind.PROTOCOL, "p1"))
    diffs = [Diff(1, B, "result:protocol", "error 42P05", "'lc_B_p1'"), Diff(3, B, "prepared", "x", "y")]
    assert first_unexplained(diffs, collision, [seen]) == "prepared statements/protocol result"
    assert first_unexplained(diffs[1:], collision, [seen]) is None


def test_the_budget_ends_the_search_and_keeps_what_was_found() -> None:
    def slow(ops: tuple[Op, ...]) -> Comparison:
        time.sleep(0.01)
        return leaky(ops)

    found = discover(slow, Search(seed=7, budget=0.5, max_examples=10_000, max_ops=6))
    assert found.stopped == "the budget was spent"
    assert found.rounds[-1].status == "budget"


def test_an_example_the_budget_left_unshrunk_loses_every_op_it_does_not_need() -> None:
    ops = (Op(A, Kind.OBSERVE), Op(A, Kind.SET, "work_mem"), Op(A, Kind.LOCK, "1"), Op(B, Kind.RESET_ALL))
    cut = Candidate(ops, leaky(ops), "setting:work_mem", shrunk=False)
    tight = tighten(leaky, cut, [], time.monotonic() + 10)
    assert tight.ops == (Op(A, Kind.SET, "work_mem"),) and tight.shrunk
    assert not tighten(leaky, cut, [], time.monotonic()).shrunk


def test_a_harness_failure_stops_discovery_and_is_never_shrunk() -> None:
    calls = []

    def broken(ops: tuple[Op, ...]) -> Comparison:
        calls.append(ops)
        raise ValueError("the pooler went away")

    with pytest.raises(Abort, match="the pooler went away"):
        discover(broken, SEARCH)
    assert len(calls) == 1


def test_candidates_that_change_the_same_states_merge_into_the_earliest_smallest() -> None:
    small = Candidate((Op(A, Kind.PREPARE, "s1"),), Comparison(()), "prepared statements", round=1)
    big = Candidate((Op(A, Kind.PREPARE, "s1"), Op(B, Kind.EXECUTE, "s1")), Comparison(()), "x", round=1)
    later = Candidate((Op(B, Kind.PREPARE, "s2"),), Comparison(()), "y", round=2)
    (finding,) = merge([later, big, small])
    assert finding.ops == small.ops and finding.also == (big, later)


def test_a_lost_commit_is_a_finding_of_its_own_never_an_also_of_a_state_with_the_same_ops() -> None:
    ops = (Op(A, Kind.BEGIN), Op(A, Kind.PROTOCOL, "p1"), Op(A, Kind.WRITE), Op(A, Kind.FREE), Op(A, Kind.COMMIT))
    state = Candidate(ops, Comparison((Diff(6, B, "prepared", "['<protocol>=lc_A_p1']", "[]"),)), "prepared statements")
    lost = Candidate(ops, Comparison((Diff(4, A, "outcome:lost write", "lost", "kept"),)), "outcome:lost write")
    findings = merge([state, lost])
    assert [f.signature for f in findings] == ["prepared statements", "outcome:lost write"]
    assert findings[1].probes == ("tx_free_before_commit",)


def test_what_an_application_lost_comes_before_an_earlier_difference_of_state() -> None:
    ops = (Op(A, Kind.SET, "work_mem"), Op(B, Kind.BEGIN), Op(B, Kind.WRITE), Op(B, Kind.COMMIT))
    diffs = [Diff(1, B, "result:begin", "x", "y"), Diff(3, B, "outcome:lost write", "lost", "kept")]
    assert first_unexplained(diffs, ops, []) == "outcome:lost write"
    assert first_unexplained(diffs[:1], ops, []) == "transactions/begin result"


def test_a_search_measures_each_sequence_once_however_often_hypothesis_reaches_it() -> None:
    seen: list[tuple[Op, ...]] = []

    def counted(ops: tuple[Op, ...]) -> Comparison:
        seen.append(ops)
        return leaky(ops)

    found = discover(counted, replace(SEARCH, max_examples=300))
    assert len(seen) == len(set(seen))
    assert sum(r.examples for r in found.rounds) <= len(seen)  # the rounds' own; reducing candidates measures too


def test_the_example_database_keeps_each_configuration_apart() -> None:
    inner = InMemoryExampleDatabase()
    one, two = Keyed(inner, b"one:"), Keyed(inner, b"two:")
    one.save(b"k", b"v")
    assert list(one.fetch(b"k")) == [b"v"] and list(two.fetch(b"k")) == []
    one.move(b"k", b"j", b"v")
    assert list(one.fetch(b"j")) == [b"v"]
    one.delete(b"j", b"v")
    assert list(inner.fetch(b"one:j")) == []


def test_an_explanation_holds_for_any_setting_of_the_same_kind_when_the_signature_names_none() -> None:
    collision = Candidate((Op(A, Kind.SET_CONFIG, "work_mem", "session bound"),
                           Op(B, Kind.SET_CONFIG, "search_path", "session bound")), Comparison(()),
                          "prepared statements/set_config result")
    other = (Op(B, Kind.SET_CONFIG, "bytea_output", "session bound"), Op(A, Kind.SET, "TimeZone"))
    assert collision.explains("prepared statements/set_config result", other)
    assert not collision.explains("setting:TimeZone", other)
    assert not collision.explains("prepared statements/set_config result", (Op(A, Kind.PROTOCOL, "p1"),))


def test_a_new_effect_of_a_state_is_its_own_finding_next_to_the_known_one() -> None:
    seen = Candidate((Op(A, Kind.PROTOCOL, "p1"),), Comparison((Diff(2, B, "prepared", "x", "[]"),)),
                     "prepared statements", round=1)
    kicked = Candidate((Op(A, Kind.PROTOCOL, "p1"), Op(A, Kind.DISCARD, "ALL"), Op(A, Kind.PROTOCOL, "p1")),
                       Comparison((Diff(2, A, "result:protocol", "error 08003", "error 26000"),)),
                       "prepared statements/protocol result", round=2)

    def probe_isolated_for_kicks(c: Candidate) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return ("protocol_prepare",), (("protocol_prepare: isolated here",) if c is kicked else ())

    known, new = merge([seen, kicked], probe_isolated_for_kicks)
    assert (known.ops, known.unlisted, known.also) == (seen.ops, (), ())
    assert (new.ops, new.unlisted) == (kicked.ops, ("protocol_prepare: isolated here",))


def test_a_candidate_is_labelled_by_the_difference_it_was_found_for() -> None:
    ops = (Op(A, Kind.PROTOCOL, "p1"), Op(B, Kind.OBSERVE), Op(A, Kind.DISCARD, "ALL"))
    diffs = (Diff(1, B, "prepared", "['<protocol>=lc_A_p1']", "[]"), Diff(4, B, "server connection", "#2", "#1"))
    probes, unlisted = mapped(Candidate(ops, Comparison(diffs), "server connection"))
    assert unlisted == ("effect: server connection",)


def test_a_round_claims_no_candidate_shrunk_until_tighten_found_no_op_to_leave_out() -> None:
    first = run_round(leaky, SEARCH, 1, time.monotonic() + 60)
    assert first.candidates and not any(c.shrunk for c in first.candidates)
    found = discover(leaky, SEARCH)
    assert all(c.shrunk for c in found.candidates) and all(len(c.ops) == 1 for c in found.candidates)


def test_a_round_ending_in_a_group_of_differences_and_the_budget_counts_as_found() -> None:
    from leakcheck.discover.engine import _OutOfTime, difference_type, round_status

    leak = difference_type("session:work_mem")("session:work_mem: A: SET work_mem")
    assert round_status(BaseExceptionGroup("two", [leak, _OutOfTime()]), found_any=True) == "found"
    assert round_status(ExceptionGroup("one", [leak]), found_any=True) == "found"
    assert round_status(_OutOfTime(), found_any=True) == "budget"


def test_an_abort_or_ctrl_c_inside_a_group_is_raised_not_taken_for_a_finding() -> None:
    from leakcheck.discover.engine import _OutOfTime, difference_type, round_status

    leak = difference_type("session:work_mem")("x")
    with pytest.raises(Abort):
        round_status(BaseExceptionGroup("mixed", [leak, Abort("B's proof is missing")]), found_any=True)
    with pytest.raises(KeyboardInterrupt):
        round_status(KeyboardInterrupt(), found_any=True)
    with pytest.raises(RuntimeError):
        round_status(RuntimeError("a bug"), found_any=False)
    with pytest.raises(ValueError):
        round_status(BaseExceptionGroup("bug", [_OutOfTime(), ValueError("a bug")]), found_any=True)
