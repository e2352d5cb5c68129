"""Rounds of hypothesis searches for sequences whose route differs from the reference.

In a round hypothesis generates sequences; a sequence with a difference fails with an exception
type per *signature* (the kind of state its first difference is about: 'setting:work_mem',
'prepared statements', 'cursors', ...), so hypothesis keeps and shrinks one example per signature
(its multiple-bug mode). The round's findings are those shrunk examples, merged when they change
the same session states (known.states: SET x and set_config('x', ..., false) both change
`session:x`). The next round leaves every op that changes a found state out of the universe, so it
can only find differences that other states cause; rounds stop when one
finds nothing, nothing is left to vary, or the budget is spent (then the round's examples are kept
as far as they were shrunk). A harness failure (`Abort`) stops the run: it is never a finding.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as with_seed
from hypothesis.database import ExampleDatabase

from .compare import Comparison, Diff
from .known import family, label, signature, state, states
from .ops import UNIVERSE, Op
from .strategy import sequences
from .trace import Abort

log = logging.getLogger(__name__)

Measure = Callable[[tuple[Op, ...]], Comparison]

#: Bump when ops, rendering or signatures change meaning: examples saved before are keyed apart.
MODEL_VERSION = "discover-1"

class Difference(Exception):
    """A sequence whose route differed from the reference; one subclass per signature."""

    signature: ClassVar[str] = ""


_TYPES: dict[str, type[Difference]] = {}


def difference_type(sig: str) -> type[Difference]:
    """The exception type of a signature (hypothesis tells failures apart by type)."""
    if sig not in _TYPES:
        _TYPES[sig] = type(f"Difference[{sig}]", (Difference,), {"signature": sig})
    return _TYPES[sig]


class _OutOfTime(BaseException):
    """The budget is spent: leaves hypothesis at once (it does not catch BaseException)."""


_INDEX = {op: i for i, op in enumerate(UNIVERSE)}


def size(ops: Sequence[Op]) -> tuple[int, list[int]]:
    """Smaller is simpler: fewer ops, then ops earlier in the universe."""
    return len(ops), [_INDEX.get(op, len(_INDEX)) for op in ops]


@dataclass(frozen=True)
class Candidate:
    ops: tuple[Op, ...]
    comparison: Comparison
    signature: str
    found_after: float = 0.0  # seconds into the search when its signature was first seen


@dataclass(frozen=True)
class Finding:
    """A shrunk sequence and what differed, labelled known (probe ids) or new (unlisted causes)."""

    ops: tuple[Op, ...]
    comparison: Comparison
    signature: str
    round: int
    shrunk: bool  # False: the budget ended the round before hypothesis finished shrinking
    probes: tuple[str, ...]
    unlisted: tuple[str, ...]
    also: tuple[str, ...] = ()  # signatures of other examples with the same causes, merged here
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


@dataclass
class Round:
    number: int
    examples: int = 0
    status: str = ""  # "found", "nothing found", "budget"
    seconds: float = 0.0
    candidates: list[Candidate] = field(default_factory=list)


@dataclass
class Discovery:
    findings: list[Finding]
    rounds: list[Round]
    stopped: str


class _Keyed(ExampleDatabase):
    """Another database's entries under a prefix: one configuration's and round's examples apart."""

    def __init__(self, inner: ExampleDatabase, prefix: bytes) -> None:
        super().__init__()
        self.inner, self.prefix = inner, prefix

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(self.prefix + key, value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.inner.fetch(self.prefix + key)

    def delete(self, key: bytes, value: bytes) -> None:
        self.inner.delete(self.prefix + key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.move(self.prefix + src, self.prefix + dest, value)


def _prefix(search: Search, excluded: Iterable[str]) -> bytes:
    text = "|".join([MODEL_VERSION, search.database_key, str(search.max_ops), *sorted(excluded)])
    return hashlib.sha256(text.encode()).hexdigest()[:16].encode() + b":"


def run_round(measure: Measure, universe: Sequence[Op], search: Search, number: int, deadline: float,
              excluded: Iterable[str] = ()) -> Round:
    """One hypothesis run over `universe`: the smallest example seen per signature."""
    found = Round(number)
    best: dict[str, Candidate] = {}
    started = time.monotonic()
    origin = deadline - search.budget  # when the search began

    def test(ops: tuple[Op, ...]) -> None:
        if time.monotonic() >= deadline:
            raise _OutOfTime
        found.examples += 1
        try:
            comparison = measure(ops)
        except Exception as exc:  # noqa: BLE001 - a harness failure stops the run; hypothesis must not shrink it
            raise Abort(f"the harness failed on {', '.join(map(str, ops))}: {type(exc).__name__}: {exc}") from exc
        if comparison.diffs:
            sig = signature(comparison.diffs[0], ops)
            first = best[sig].found_after if sig in best else time.monotonic() - origin
            if sig not in best or size(ops) < size(best[sig].ops):
                best[sig] = Candidate(ops, comparison, sig, first)
            raise difference_type(sig)(f"{sig}: {', '.join(map(str, ops))}")

    database = _Keyed(search.database, _prefix(search, excluded)) if search.database is not None else None
    configured = settings(
        max_examples=search.max_examples, deadline=None, database=database, report_multiple_bugs=True,
        phases=(Phase.reuse, Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet, print_blob=False,
    )
    run = configured(with_seed(search.seed + number - 1)(given(sequences(universe, search.max_ops))(test)))
    try:
        run()
        found.status = "nothing found"
    except _OutOfTime:
        found.status = "budget"
    except Exception as exc:  # noqa: BLE001 - hypothesis' report of the differences (one, or a group)
        if not best:
            raise
        found.status = "found"
        log.debug("round %d ended with %s", number, type(exc).__name__)
    found.seconds = time.monotonic() - started
    found.candidates = sorted(best.values(), key=lambda c: size(c.ops))
    return found


def _changed(ops: Iterable[Op]) -> frozenset[str]:
    """The states a finding is about: those its ops change, or all its families when none changes."""
    ops = tuple(ops)
    return states(ops) or frozenset(state(family(op)) for op in ops)


def merge(candidates: Iterable[Candidate], number: int, shrunk: bool) -> list[Finding]:
    """One finding per set of changed states: the smallest example, the other signatures noted."""
    by_cause: dict[frozenset[str], list[Candidate]] = {}
    for c in candidates:
        by_cause.setdefault(_changed(c.ops), []).append(c)
    findings = []
    for group in by_cause.values():
        group.sort(key=lambda c: size(c.ops))
        first = group[0]
        probes, unlisted = label(first.ops, first.comparison.diffs)
        others = tuple(dict.fromkeys(c.signature for c in group[1:] if c.signature != first.signature))
        findings.append(Finding(first.ops, first.comparison, first.signature, number, shrunk, probes, unlisted,
                                also=others, found_after=min(c.found_after for c in group)))
    return sorted(findings, key=lambda f: size(f.ops))


def exclusions(findings: Iterable[Finding]) -> set[str]:
    """States later rounds leave out: every state a finding changed (all of a finding's ops' when
    none of them changes state)."""
    out: set[str] = set()
    for f in findings:
        out |= _changed(f.ops)
    return out


def discover(measure: Measure, search: Search) -> Discovery:
    """Rounds until nothing new is found, nothing is left to vary, or the budget is spent."""
    deadline = time.monotonic() + search.budget
    findings: list[Finding] = []
    rounds: list[Round] = []
    excluded: set[str] = set()
    for number in range(1, 1000):
        universe = [op for op in UNIVERSE if state(family(op)) not in excluded]
        if not states(universe):
            return Discovery(findings, rounds, "every state-changing op was part of a finding")
        found = run_round(measure, universe, search, number, deadline, excluded)
        rounds.append(found)
        new = merge(found.candidates, number, shrunk=found.status != "budget")
        findings += new
        log.info("round %d: %d finding(s) in %d sequences, %.1f s%s", number, len(new), found.examples,
                 found.seconds, " (budget spent)" if found.status == "budget" else "")
        if found.status == "budget":
            return Discovery(findings, rounds, "the budget was spent")
        if not new:
            return Discovery(findings, rounds, f"round {number} found nothing in {found.examples} sequences")
        excluded |= exclusions(new)
    return Discovery(findings, rounds, "too many rounds")


def confirm(measure: Measure, findings: Iterable[Finding], tries: int = 2) -> Iterator[Finding]:
    """Each finding run `tries` more times: how often the same signature comes back."""
    for f in findings:
        again = 0
        for _ in range(tries):
            comparison = measure(f.ops)
            if comparison.diffs and signature(comparison.diffs[0], f.ops) == f.signature:
                again += 1
        yield replace(f, reproduced=(again + 1, tries + 1))
