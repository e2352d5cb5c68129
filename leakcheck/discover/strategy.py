"""Hypothesis strategies for sequences of ops (pure).

Ops are drawn from groups with equal weight (so the 126 setting ops do not crowd out the 8 cursor
ops), groups in order of simplicity: hypothesis shrinks an op towards an earlier group, an
observation first. The raw list is `repair`ed into a sequence a pool of one can run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from hypothesis import strategies as st

from leakcheck.discover.ops import Kind, Op, repair

#: Groups of kinds, simplest first.
GROUPS: tuple[frozenset[Kind], ...] = (
    frozenset({Kind.OBSERVE}),
    frozenset({Kind.SET, Kind.RESET}),
    frozenset({Kind.SET_CONFIG}),
    frozenset({Kind.SET_LOCAL}),
    frozenset({Kind.SET_ROLE, Kind.RESET_ROLE, Kind.RESET_ALL}),
    frozenset({Kind.CREATE_TEMP, Kind.READ_TEMP, Kind.DROP_TEMP}),
    frozenset({Kind.PREPARE, Kind.EXECUTE, Kind.DEALLOCATE, Kind.DEALLOCATE_ALL}),
    frozenset({Kind.PROTOCOL, Kind.FREE}),
    frozenset({Kind.DECLARE, Kind.FETCH, Kind.CLOSE}),
    frozenset({Kind.LOCK, Kind.XACT_LOCK, Kind.UNLOCK, Kind.UNLOCK_ALL}),
    frozenset({Kind.LISTEN, Kind.UNLISTEN, Kind.NOTIFY}),
    frozenset({Kind.NEXTVAL, Kind.LASTVAL}),
    frozenset({Kind.BEGIN, Kind.COMMIT, Kind.ROLLBACK}),
    frozenset({Kind.DISCARD}),
)
assert len(frozenset().union(*GROUPS)) == len(Kind), "every kind belongs to a group"


def grouped(universe: Iterable[Op]) -> list[list[Op]]:
    """The universe split by GROUPS, empty groups left out, universe order kept within each."""
    ops = list(universe)
    return [g for g in ([op for op in ops if op.kind in kinds] for kinds in GROUPS) if g]


def sequences(universe: Iterable[Op], max_ops: int) -> st.SearchStrategy[tuple[Op, ...]]:
    """Repaired sequences of 1..max_ops drawn ops (repair may drop or add a few)."""
    groups = grouped(universe)
    if not groups:
        raise ValueError("no ops to draw from")
    one = st.one_of([st.sampled_from(g) for g in groups])
    fix: Callable[[list[Op]], tuple[Op, ...]] = repair
    return st.lists(one, min_size=1, max_size=max_ops).map(fix)
