"""Rounds of hypothesis searches for sequences whose route differs from the reference.

A difference has a *signature*: the state its observation reads and, for an op's result, the op
(`setting:work_mem`, `prepared statements`, `prepared statements/protocol result`; known.signature).
A sequence fails with an exception type per signature, so hypothesis keeps and shrinks one example
per signature (its multiple-bug mode). Every candidate it shrinks *explains* its signature in any
sequence that holds the kinds of state it changed (known.states, known.kind_of: SET x and
set_config('x', ..., false) both change `session:x`, of kind `session`; the signature names x).
The next round generates from every op again, but a sequence fails only on a difference no
earlier candidate explains: the same leak never comes back, while another effect of
a found state (B's `_pg3_0` colliding with A's, not just B seeing A's statement) or its interaction
with another state (A's temp table making B's SET temp_buffers fail) still can. Rounds stop when one
finds nothing or the budget is spent (a round cut short has its examples reduced op by op for a
quarter of the budget more: `tighten`). Candidates changing the same states are one finding, their
other signatures shown with it. A harness failure (`Abort`) stops the run: it is never a finding.
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
from .examples import Keyed
from .known import family, kind_of, label, signature, state, states
from .ops import UNIVERSE, Op, repair
from .strategy import sequences
from .trace import Abort

log = logging.getLogger(__name__)

Measure = Callable[[tuple[Op, ...]], Comparison]

#: Bump when ops, rendering or signatures change meaning: examples saved before are keyed apart.
MODEL_VERSION = "discover-2"


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
    """The signature of the first difference no earlier candidate explains."""
    return next(iter(unexplained(diffs, ops, explained)), None)


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


def _prefix(search: Search, explained: Iterable[Candidate]) -> bytes:
    known = sorted(f"{c.signature}@{','.join(sorted(changed(c.ops)))}" for c in explained)
    text = "|".join([MODEL_VERSION, search.database_key, str(search.max_ops), *known])
    return hashlib.sha256(text.encode()).hexdigest()[:16].encode() + b":"


def run_round(measure: Measure, search: Search, number: int, deadline: float,
              explained: Sequence[Candidate] = ()) -> Round:
    """One hypothesis run: the smallest example seen per signature no earlier candidate explains."""
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
        sig = first_unexplained(comparison.diffs, ops, explained)
        if sig is not None:
            first = best[sig].found_after if sig in best else time.monotonic() - origin
            if sig not in best or size(ops) < size(best[sig].ops):
                best[sig] = Candidate(ops, comparison, sig, number, first)
            raise difference_type(sig)(f"{sig}: {', '.join(map(str, ops))}")

    database = Keyed(search.database, _prefix(search, explained)) if search.database is not None else None
    configured = settings(
        max_examples=search.max_examples, deadline=None, database=database, report_multiple_bugs=True,
        phases=(Phase.reuse, Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet, print_blob=False,
    )
    run = configured(with_seed(search.seed + number - 1)(given(sequences(UNIVERSE, search.max_ops))(test)))
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
    cut = found.status == "budget"
    found.candidates = sorted((replace(c, shrunk=not cut) for c in best.values()), key=lambda c: size(c.ops))
    return found


#: A round the budget cut short has its examples reduced op by op for this share of the budget more.
GRACE = 0.25


def tighten(measure: Measure, c: Candidate, explained: Sequence[Candidate], deadline: float) -> Candidate:
    """Leave out one op at a time while the signature still shows, unexplained, until no op can go
    (then it is shrunk: 1-minimal) or the deadline passes."""
    ops, comparison = c.ops, c.comparison
    while time.monotonic() < deadline:
        for i in range(len(ops)):
            trial = repair(ops[:i] + ops[i + 1:])
            if size(trial) >= size(ops) or time.monotonic() >= deadline:
                continue
            got = measure(trial)
            if c.signature in unexplained(got.diffs, trial, explained):
                ops, comparison = trial, got
                break
        else:
            return replace(c, ops=ops, comparison=comparison, shrunk=True)
    return replace(c, ops=ops, comparison=comparison, shrunk=False)


def merge(candidates: Iterable[Candidate]) -> list[Finding]:
    """One finding per set of changed states: the earliest round's smallest example, with the other
    signatures as `also`; labelled by the probe mapping."""
    by_states: dict[frozenset[str], list[Candidate]] = {}
    for c in candidates:
        by_states.setdefault(changed(c.ops), []).append(c)
    findings = []
    for group in by_states.values():
        group.sort(key=lambda c: (c.round, size(c.ops)))
        first = group[0]
        probes, unlisted = label(first.ops, first.comparison.diffs)
        findings.append(Finding(first.ops, first.comparison, first.signature, first.round, first.shrunk, probes,
                                unlisted, also=tuple(group[1:]), found_after=min(c.found_after for c in group)))
    return sorted(findings, key=lambda f: (f.round, size(f.ops)))


def discover(measure: Measure, search: Search) -> Discovery:
    """Rounds until one finds nothing new or the budget is spent."""
    deadline = time.monotonic() + search.budget
    explained: list[Candidate] = []
    rounds: list[Round] = []
    stopped = "too many rounds"
    for number in range(1, 1000):
        found = run_round(measure, search, number, deadline, explained)
        rounds.append(found)
        explained += found.candidates
        log.info("round %d: %d new difference(s) in %d sequences, %.1f s%s", number, len(found.candidates),
                 found.examples, found.seconds, " (budget spent)" if found.status == "budget" else "")
        if found.status == "budget":
            grace = time.monotonic() + GRACE * search.budget
            earlier = explained[: len(explained) - len(found.candidates)]
            explained[len(earlier):] = [tighten(measure, c, earlier, grace) for c in found.candidates]
            stopped = "the budget was spent"
            break
        if not found.candidates:
            stopped = f"round {number} found nothing new in {found.examples} sequences"
            break
    return Discovery(merge(explained), rounds, stopped)


def confirm(measure: Measure, findings: Iterable[Finding], tries: int = 2) -> Iterator[Finding]:
    """Each finding run `tries` more times: how often the same signature comes back."""
    for f in findings:
        again = 0
        for _ in range(tries):
            comparison = measure(f.ops)
            if any(signature(d, f.ops) == f.signature for d in comparison.diffs):
                again += 1
        yield replace(f, reproduced=(again + 1, tries + 1))
