"""Hypothesis strategies for sequences of ops (pure).

A sequence is drawn as chunks, each either one op or a *unit of work*: one client's transaction as
applications write it, BEGIN, one to three steps of that client, COMMIT. A step is a statement's
lifecycle: a row written (plainly or the prepared way) or a prepared SELECT, freed right after or not
(the application's statement object going out of scope, where the driver can free one); an SQL-prepared
statement made, executed, bound or deallocated; a cursor; or any op. Both kinds of chunk are drawn
equally often, so a short lifecycle (begin, a prepared write, free, commit) comes in about one sequence
of fifteen (tests/pure/test_discover_ops.py measures it), not one in thousands as single ops drawn by
groups would give it.

Single ops are drawn from groups with equal weight (so the 126 setting ops do not crowd out the 8 cursor
ops), groups in order of simplicity: hypothesis shrinks an op towards an earlier group, an observation
first, and a unit of work towards a single op. At most `max_ops` drawn ops are kept; the list is
`repair`ed into a sequence a pool of one can run.
"""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import strategies as st

from leakcheck.discover.ops import Kind, Op, Who, repair

#: Groups of kinds, simplest first.
GROUPS: tuple[frozenset[Kind], ...] = (
    frozenset({Kind.OBSERVE}),
    frozenset({Kind.SET, Kind.RESET}),
    frozenset({Kind.SET_CONFIG}),
    frozenset({Kind.SET_LOCAL}),
    frozenset({Kind.SET_ROLE, Kind.RESET_ROLE, Kind.RESET_ALL}),
    frozenset({Kind.CREATE_TEMP, Kind.READ_TEMP, Kind.DROP_TEMP}),
    frozenset({Kind.WRITE}),
    frozenset({Kind.PREPARE, Kind.EXECUTE, Kind.DEALLOCATE, Kind.DEALLOCATE_ALL, Kind.BIND}),
    frozenset({Kind.PROTOCOL, Kind.FREE}),
    frozenset({Kind.DECLARE, Kind.FETCH, Kind.CLOSE}),
    frozenset({Kind.LOCK, Kind.XACT_LOCK, Kind.UNLOCK, Kind.UNLOCK_ALL}),
    frozenset({Kind.LISTEN, Kind.UNLISTEN, Kind.NOTIFY}),
    frozenset({Kind.NEXTVAL, Kind.LASTVAL}),
    frozenset({Kind.BEGIN, Kind.COMMIT, Kind.ROLLBACK}),
    frozenset({Kind.DISCARD}),
)
assert len(frozenset().union(*GROUPS)) == len(Kind), "every kind belongs to a group"

#: The ops a unit of work's statement step runs through the driver (and may free right after).
STATEMENTS = frozenset({Kind.WRITE, Kind.PROTOCOL})
#: The other groups a unit of work draws its steps from, besides any op.
LIFECYCLE: tuple[frozenset[Kind], ...] = (
    frozenset({Kind.PREPARE, Kind.EXECUTE, Kind.DEALLOCATE, Kind.BIND}),
    frozenset({Kind.DECLARE, Kind.FETCH, Kind.CLOSE}),
)
#: Ops a unit of work draws per transaction at most.
UNIT_OPS = 3


def grouped(universe: Iterable[Op], groups: tuple[frozenset[Kind], ...] = GROUPS) -> list[list[Op]]:
    """The universe split by `groups`, empty groups left out, universe order kept within each."""
    ops = list(universe)
    return [g for g in ([op for op in ops if op.kind in kinds] for kinds in groups) if g]


def _as(who: Who, op: Op) -> Op:
    return Op(who, op.kind, op.arg, op.variant)


def _unit(who: Who, steps: list[list[Op]]) -> list[Op]:
    return [Op(who, Kind.BEGIN), *(_as(who, op) for step in steps for op in step), Op(who, Kind.COMMIT)]


def _alone(op: Op) -> list[Op]:
    return [op]


def _statement(op: Op, free: bool) -> list[Op]:
    return [op, Op(op.who, Kind.FREE)] if free else [op]


def sequences(universe: Iterable[Op], max_ops: int) -> st.SearchStrategy[tuple[Op, ...]]:
    """Repaired sequences of 1..max_ops drawn ops (repair may drop or add a few)."""
    ops = list(universe)
    groups = grouped(ops)
    if not groups:
        raise ValueError("no ops to draw from")
    one = st.one_of([st.sampled_from(g) for g in groups])
    # st.builds, not .map: hypothesis flattens a one_of (and a map of one) into the one_of around it, which
    # would weigh each group like a whole unit of work
    chunks: list[st.SearchStrategy[list[Op]]] = [st.builds(_alone, one)]
    a_side = [op for op in ops if op.who is Who.A]  # a unit's ops are its client's: drawn as A's, then moved
    if any(op.kind is Kind.BEGIN for op in ops) and a_side:
        made = [op for op in a_side if op.kind in STATEMENTS]
        frees = any(op.kind is Kind.FREE for op in ops)
        steps = [st.builds(_statement, st.sampled_from(made), st.booleans() if frees else st.just(False))] if made \
            else []
        steps += [st.builds(_alone, st.sampled_from(g)) for g in grouped(a_side, LIFECYCLE)]
        steps.append(st.builds(_alone, st.one_of([st.sampled_from(g) for g in grouped(a_side)])))
        chunks.append(st.builds(_unit, st.sampled_from(sorted({op.who for op in ops})),
                                st.lists(st.one_of(steps), min_size=1, max_size=UNIT_OPS)))

    def fix(drawn: list[list[Op]]) -> tuple[Op, ...]:
        return repair([op for chunk in drawn for op in chunk][:max_ops])

    return st.lists(st.one_of(chunks), min_size=1, max_size=max_ops).map(fix)
