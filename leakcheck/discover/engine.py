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
finds nothing or the budget is spent. Every round's candidates are then reduced op by op while
their signature still shows (`tighten`: 1-minimal), a round the budget cut short for a quarter of
the budget more. Candidates changing the same states are one finding, their
other signatures shown with it. A harness failure (`Abort`) stops the run: it is never a finding.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import ClassVar

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as with_seed

from leakcheck.discover.compare import Comparison
from leakcheck.discover.examples import Keyed
from leakcheck.discover.findings import (
    Candidate,
    Discovery,
    Finding,
    Round,
    Search,
    changed,
    first_unexplained,
    is_outcome,
    size,
    unexplained,
)
from leakcheck.discover.known import label, signature
from leakcheck.discover.ops import Op, repair
from leakcheck.discover.strategy import sequences
from leakcheck.discover.trace import harness_failed

log = logging.getLogger(__name__)

Measure = Callable[[tuple[Op, ...]], Comparison]

#: Bump when ops, rendering or signatures change meaning: examples saved before are keyed apart.
MODEL_VERSION = "discover-4"


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


def _prefix(search: Search, explained: Iterable[Candidate]) -> bytes:
    known = sorted(f"{c.signature}@{','.join(sorted(changed(c.ops)))}" for c in explained)
    text = "|".join([MODEL_VERSION, search.database_key, str(search.max_ops), *known])
    return hashlib.sha256(text.encode()).hexdigest()[:16].encode() + b":"


def measured(measure: Measure, ops: tuple[Op, ...]) -> Comparison:
    """One measurement; a harness failure is an `Abort` (it stops the run; hypothesis never shrinks it)."""
    try:
        return measure(ops)
    except Exception as exc:  # noqa: BLE001 - Abort is a BaseException and passes through
        raise harness_failed(ops, exc) from exc


class Remembered:
    """A search's measurements, each sequence measured once: hypothesis reaches one repaired sequence by many
    draws (repair and the op limit fold them together), above all while it shrinks, and each measurement
    is a real run of both routes. Confirmations (`confirm`) measure again, for real."""

    def __init__(self, measure: Measure) -> None:
        self.measure = measure
        self.seen: dict[tuple[Op, ...], Comparison] = {}

    def __call__(self, ops: tuple[Op, ...]) -> Comparison:
        if ops not in self.seen:
            self.seen[ops] = measured(self.measure, ops)
        return self.seen[ops]


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
        found.examples += int(not isinstance(measure, Remembered) or ops not in measure.seen)
        comparison = measured(measure, ops)
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
    run = configured(with_seed(search.seed + number - 1)(given(sequences(search.ops, search.max_ops))(test)))
    try:
        run()
        found.status = "nothing found"
    except BaseException as exc:  # noqa: BLE001 - sorted by round_status, which re-raises what is not ours
        found.status = round_status(exc, found_any=bool(best))
        log.debug("round %d ended with %s", number, type(exc).__name__)
    found.seconds = time.monotonic() - started
    # Not yet known to be 1-minimal (hypothesis' shrinking may have stopped, or the budget cut it): tighten.
    found.candidates = sorted((replace(c, shrunk=False) for c in best.values()), key=lambda c: size(c.ops))
    return found


def round_status(exc: BaseException, found_any: bool) -> str:
    """How a round ended, from what hypothesis raised: "budget" (out of time), "found" (differences,
    alone or in a group, possibly with the budget's end); anything else (an Abort, Ctrl-C, a bug) is raised."""
    if isinstance(exc, _OutOfTime):
        return "budget"
    if isinstance(exc, BaseExceptionGroup):
        others = exc.split((Difference, _OutOfTime))[1]
        if others is not None:
            raise next(_leaves(others)) from exc
        return "found" if found_any else "budget"
    if isinstance(exc, Difference) or (isinstance(exc, Exception) and found_any):
        return "found"
    raise exc


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    """The exceptions in a (nested) group."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


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
            got = measured(measure, trial)
            if c.signature in unexplained(got.diffs, trial, explained):
                ops, comparison = trial, got
                break
        else:
            return replace(c, ops=ops, comparison=comparison, shrunk=True)
    return replace(c, ops=ops, comparison=comparison, shrunk=False)


Labeller = Callable[[Candidate], tuple[tuple[str, ...], tuple[str, ...]]]


def mapped(c: Candidate) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A candidate's label by the probe mapping alone, (probe ids, what no probe lists), judged on
    the difference it was found for (its signature's), not on an earlier, already explained one."""
    diffs = c.comparison.diffs
    own = [d for d in diffs if signature(d, c.ops) == c.signature]
    return label(c.ops, [*own[:1], *(d for d in diffs if d not in own[:1])])


def merge(candidates: Iterable[Candidate], labeller: Labeller = mapped) -> list[Finding]:
    """One finding per set of changed states, label (known or new) and loss: the earliest round's smallest
    example, with the others (other signatures of the same states) as `also`. A new effect of a
    state is never hidden under a known finding of that state, and what an application lost never
    under a difference of state (each loss is a finding of its own)."""
    Group = tuple[frozenset[str], bool, str]
    groups: dict[Group, list[tuple[Candidate, tuple[tuple[str, ...], tuple[str, ...]]]]] = {}
    for c in candidates:
        probes, unlisted = labeller(c)
        lost = c.signature if is_outcome(c.signature) else ""
        groups.setdefault((changed(c.ops), bool(probes) and not unlisted, lost), []).append((c, (probes, unlisted)))
    findings = []
    for group in groups.values():
        group.sort(key=lambda item: (item[0].round, size(item[0].ops)))
        first, (probes, unlisted) = group[0]
        findings.append(Finding(first.ops, first.comparison, first.signature, first.round, first.shrunk, probes,
                                unlisted, also=tuple(c for c, _ in group[1:]),
                                found_after=min(c.found_after for c, _ in group)))
    return sorted(findings, key=lambda f: (f.round, size(f.ops)))


def discover(measure: Measure, search: Search) -> Discovery:
    """Rounds until one finds nothing new or the budget is spent."""
    measure = Remembered(measure)
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
        # Every candidate is reduced op by op before it explains anything (hypothesis' shrink is
        # shortlex, not 1-minimal); a round the budget cut gets the grace period for it.
        until = time.monotonic() + GRACE * search.budget if found.status == "budget" else deadline
        earlier = explained[: len(explained) - len(found.candidates)]
        found.candidates = [tighten(measure, c, earlier, until) for c in found.candidates]
        explained[len(earlier):] = found.candidates
        if found.status == "budget":
            stopped = "the budget was spent"
            break
        if not found.candidates:
            stopped = f"round {number} found nothing new in {found.examples} sequences"
            break
    return Discovery(merge(explained), rounds, stopped, explained)


def confirm(measure: Measure, findings: Iterable[Finding], tries: int = 2) -> Iterator[Finding]:
    """Each finding run `tries` more times: how often the same signature comes back."""
    for f in findings:
        again = 0
        for _ in range(tries):
            comparison = measured(measure, f.ops)
            if any(signature(d, f.ops) == f.signature for d in comparison.diffs):
                again += 1
        yield replace(f, reproduced=(again + 1, tries + 1))
