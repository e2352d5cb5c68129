"""The ops model and its repair into sequences a pool of one can run (no servers)."""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, seed, settings

from leakcheck.discover.ops import (
    PREPARED,
    SETTINGS,
    UNIVERSE,
    Abilities,
    Kind,
    Op,
    Who,
    in_transaction,
    repair,
    txn_only,
    universe,
)
from leakcheck.discover.strategy import GROUPS, grouped, sequences

A, B = Who.A, Who.B


def test_the_universe_holds_each_op_once_and_the_same_ops_for_both_clients() -> None:
    assert len(set(UNIVERSE)) == len(UNIVERSE)
    as_b = {Op(B, op.kind, op.arg, op.variant) for op in UNIVERSE if op.who is A}
    assert as_b == {op for op in UNIVERSE if op.who is B}


def test_every_setting_can_be_set_reset_set_locally_and_set_config_in_four_ways() -> None:
    for s in SETTINGS:
        kinds = [op.kind for op in UNIVERSE if op.who is A and op.arg == s.name]
        assert kinds.count(Kind.SET_CONFIG) == 4
        assert {Kind.SET, Kind.RESET, Kind.SET_LOCAL} <= set(kinds)


def test_each_client_has_its_own_value_for_every_setting() -> None:
    for s in SETTINGS:
        if s.name != "default_transaction_read_only":
            assert s.value(A) != s.value(B)


def test_repair_commits_the_open_transaction_before_the_other_clients_op() -> None:
    got = repair([Op(A, Kind.BEGIN), Op(A, Kind.SET_LOCAL, "work_mem"), Op(B, Kind.OBSERVE)])
    assert got == (Op(A, Kind.BEGIN), Op(A, Kind.SET_LOCAL, "work_mem"), Op(A, Kind.COMMIT), Op(B, Kind.OBSERVE))


def test_repair_drops_what_cannot_run_and_closes_a_transaction_left_open() -> None:
    raw = [Op(A, Kind.COMMIT), Op(A, Kind.SET_LOCAL, "work_mem"), Op(A, Kind.DECLARE, "c1"),
           Op(A, Kind.DECLARE, "c1", "hold"), Op(B, Kind.BEGIN), Op(B, Kind.BEGIN), Op(B, Kind.DECLARE, "c2")]
    assert repair(raw) == (Op(A, Kind.DECLARE, "c1", "hold"), Op(B, Kind.BEGIN), Op(B, Kind.DECLARE, "c2"),
                           Op(B, Kind.COMMIT))


def test_in_transaction_marks_the_ops_after_begin_up_to_its_end() -> None:
    ops = (Op(A, Kind.SET, "work_mem"), Op(A, Kind.BEGIN), Op(A, Kind.OBSERVE), Op(A, Kind.ROLLBACK),
           Op(A, Kind.OBSERVE))
    assert in_transaction(ops) == [False, False, True, True, False]


def test_only_set_local_and_cursors_without_hold_need_a_transaction() -> None:
    assert {op.kind for op in UNIVERSE if txn_only(op)} == {Kind.SET_LOCAL, Kind.DECLARE}
    assert not txn_only(Op(A, Kind.DECLARE, "c1", "hold"))


def test_groups_cover_every_kind_and_split_the_universe() -> None:
    assert sum(len(g) for g in grouped(UNIVERSE)) == len(UNIVERSE)
    assert len(grouped(UNIVERSE)) == len(GROUPS)


@settings(max_examples=200, deadline=None, database=None)
@given(sequences(UNIVERSE, 8))
def test_generated_sequences_are_repaired_and_never_interleave_an_open_transaction(ops: tuple[Op, ...]) -> None:
    assert repair(ops) == ops
    holder = None
    for op in ops:
        assert holder is None or op.who is holder
        if op.kind is Kind.BEGIN:
            holder = op.who
        elif op.kind in (Kind.COMMIT, Kind.ROLLBACK):
            holder = None
        assert not txn_only(op) or holder is not None
    assert holder is None


def test_a_driver_draws_free_and_bind_only_where_it_can_and_an_agent_no_bound_parameter() -> None:
    native, agent = universe(Abilities(bind=True)), universe(Abilities(bound=False, free=True))
    assert not any(op.kind is Kind.FREE for op in native) and any("bound" in op.variant for op in native)
    assert any(op.kind is Kind.BIND for op in native)
    assert not any(op.kind is Kind.BIND for op in agent)
    assert any(op.kind is Kind.FREE for op in agent) and not any("bound" in op.variant for op in agent)
    assert {op.variant for op in native if op.kind is Kind.WRITE} == {"", PREPARED}


def test_a_driver_whose_settings_never_prepare_draws_no_protocol_op() -> None:
    # Django at its defaults: its prepared path is not applicable, and discovery stopped at once on it.
    ops = universe(Abilities(bound=False, free=False, prepared=False))
    assert ops and not any(op.kind in (Kind.PROTOCOL, Kind.FREE) for op in ops)
    assert any(op.kind is Kind.PROTOCOL for op in universe(Abilities(bound=False)))


def test_repair_drops_a_free_before_its_client_prepared_anything() -> None:
    drawn = [Op(A, Kind.FREE), Op(B, Kind.PROTOCOL, "p1"), Op(A, Kind.FREE), Op(A, Kind.WRITE, "", PREPARED),
             Op(A, Kind.FREE)]
    assert repair(drawn) == (Op(B, Kind.PROTOCOL, "p1"), Op(A, Kind.WRITE, "", PREPARED), Op(A, Kind.FREE))


def _frees_a_write_in_its_transaction(ops: tuple[Op, ...]) -> bool:
    """A client's transaction writes a row, then frees a prepared statement, then commits."""
    wrote: dict[Who, bool] = {}
    for op in ops:
        if op.kind is Kind.BEGIN:
            wrote[op.who] = False
        elif op.kind is Kind.WRITE and op.who in wrote:
            wrote[op.who] = True
        elif op.kind is Kind.FREE and wrote.get(op.who):
            return any(o.kind is Kind.COMMIT and o.who is op.who for o in ops[ops.index(op):])
        elif op.kind in (Kind.COMMIT, Kind.ROLLBACK):
            wrote.pop(op.who, None)
    return False


def test_a_short_statement_lifecycle_in_a_transaction_is_drawn_often() -> None:
    # begin, a write, a free, commit: what loses PDO's commit through PgBouncer 1.24. Drawn by groups alone it
    # came once in about 5000 sequences; as a unit of work it comes in about one of fifteen.
    drawn: list[bool] = []

    @seed(1)
    @settings(max_examples=600, deadline=None, database=None, phases=(Phase.generate,),
              suppress_health_check=list(HealthCheck))
    @given(sequences(universe(Abilities(bound=False, free=True)), 8))
    def draw(ops: tuple[Op, ...]) -> None:
        drawn.append(_frees_a_write_in_its_transaction(ops))

    draw()
    assert sum(drawn) >= len(drawn) / 30, f"{sum(drawn)} of {len(drawn)}"
