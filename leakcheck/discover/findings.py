"""The records discovery keeps: candidates (one per signature and round), findings, the search's
knobs and what each round did; and the small pure rules that order and explain candidates."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from hypothesis.database import ExampleDatabase

from leakcheck.discover.compare import Comparison, Diff
from leakcheck.discover.known import family, kind_of, signature, state, states
from leakcheck.discover.ops import UNIVERSE, Abilities, Op, universe

_INDEX = {op: i for i, op in enumerate(UNIVERSE)}


def size(ops: Sequence[Op]) -> tuple[int, list[int]]:
    """Smaller is simpler: fewer ops, then ops earlier in the universe."""
    return len(ops), [_INDEX.get(op, len(_INDEX)) for op in ops]


def changed(ops: Iterable[Op]) -> frozenset[str]:
    """The states a sequence changes (all of its ops' when none changes state: resets, reads)."""
    ops = tuple(ops)
    return states(ops) or present(ops)


def present(ops: Iterable[Op]) -> frozenset[str]:
    return frozenset(state(family(op)) for op in ops)


@dataclass(frozen=True)
class Candidate:
    """The smallest sequence seen with one signature in one round."""

    ops: tuple[Op, ...]
    comparison: Comparison
    signature: str
    round: int = 0
    found_after: float = 0.0  # seconds into the search when its signature was first seen
    shrunk: bool = True  # False: the budget ended its round before hypothesis finished shrinking

    def explains(self, sig: str, ops: Sequence[Op]) -> bool:
        """This signature, in a sequence holding every kind of state this candidate changed."""
        held = {kind_of(s) for s in present(ops)}
        return sig == self.signature and {kind_of(s) for s in changed(self.ops)} <= held


def unexplained(diffs: Iterable[Diff], ops: Sequence[Op], explained: Sequence[Candidate]) -> list[str]:
    """The signatures of the differences no earlier candidate explains, in step order."""
    sigs = dict.fromkeys(signature(d, ops) for d in diffs)
    return [sig for sig in sigs if not any(c.explains(sig, ops) for c in explained)]


def first_unexplained(diffs: Iterable[Diff], ops: Sequence[Op], explained: Sequence[Candidate]) -> str | None:
    """The signature of the first difference no earlier candidate explains, what an application lost
    (`outcome:...`) before any difference of state: a sequence that lost a commit is searched and shrunk
    for that, even where another client's setting showed a step earlier."""
    sigs = unexplained(diffs, ops, explained)
    return next((sig for sig in sigs if is_outcome(sig)), next(iter(sigs), None))


def is_outcome(sig: str) -> bool:
    """The signature is what an application lost (compare.outcomes), not a difference of state."""
    return sig.startswith("outcome:")


@dataclass(frozen=True)
class Finding:
    """A shrunk sequence and what differed, labelled known (probe ids) or new (what no probe lists)."""

    ops: tuple[Op, ...]
    comparison: Comparison
    signature: str
    round: int
    shrunk: bool
    probes: tuple[str, ...]
    unlisted: tuple[str, ...]
    also: tuple[Candidate, ...] = ()  # other effects of the same states (other signatures)
    reproduced: tuple[int, int] = (0, 0)  # (times the signature came back, confirmation runs)
    found_after: float = 0.0  # seconds into the search when it was first seen (unshrunk)

    @property
    def known(self) -> bool:
        return bool(self.probes) and not self.unlisted

    @property
    def diffs(self) -> tuple[Diff, ...]:
        return self.comparison.diffs


@dataclass(frozen=True)
class Search:
    """How the engine searches (everything but the measurement)."""

    seed: int
    budget: float  # seconds, shared by all rounds
    max_examples: int  # per round
    max_ops: int
    database: ExampleDatabase | None = None
    database_key: str = ""  # what was measured (versions, route, driver): examples are kept apart by it
    ops: tuple[Op, ...] = universe(Abilities())  # what may be drawn: the driver's (default psycopg's, asyncpg's)


@dataclass
class Round:
    number: int
    examples: int = 0
    status: str = ""  # "found", "nothing found", "budget"
    seconds: float = 0.0
    candidates: list[Candidate] = field(default_factory=list)


@dataclass
class Discovery:
    findings: list[Finding]  # merged and labelled by the probe mapping alone
    rounds: list[Round]
    stopped: str
    candidates: list[Candidate] = field(default_factory=list)  # every round's, for merging again
