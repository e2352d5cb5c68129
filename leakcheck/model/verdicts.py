"""Verdicts, the records that carry them, and the pure classifier that decides them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from leakcheck.model.target import Driver, Pooler, Route, Target
from leakcheck.model.versions import Version


class Verdict(StrEnum):
    """What a probe measured for one (cell, driver). The headline of an outcome's facts."""

    ISOLATED = "isolated"  #: the state stayed with the client that set it
    LEAKS = "leaks"  #: the other client saw, or was affected by, the state
    LOST = "lost"  #: the client's own state was gone when it ran again
    BREAKS = "breaks"  #: using the feature raised errors
    #: a write the application was told is committed is not in the database, and no error reached the
    #: application: the most severe verdict (a gate fails on it even where `leaks` is accepted)
    LOSES_WRITES = "loses_writes"
    ERROR = "error"  #: the harness could not measure (e.g. no proof of a shared server)
    NOT_APPLICABLE = "not_applicable"  #: measured: the pooler refused what the probe needs (e.g. a transaction block)
    SKIPPED = "skipped"  #: not run

    @property
    def is_problem(self) -> bool:
        return self in (Verdict.LEAKS, Verdict.LOST, Verdict.BREAKS, Verdict.LOSES_WRITES)


class Fact(StrEnum):
    """One thing a probe saw. An outcome keeps all of them; the verdict is the first in HEADLINE order."""

    BROKE = "broke"  #: a statement of the feature under test failed
    LEAKED = "leaked"  #: the other client saw, or was affected by, the state
    LOST = "lost"  #: the client's own state was gone
    MISREPORTED = "misreported"  #: a driver was told (ParameterStatus) a value the server did not have
    #: the driver or the pooler got over what the other client did by itself (a retry, a re-prepare, a
    #: silent replacement of a statement): how the application kept going, never a verdict of its own
    RECOVERED = "recovered"
    #: what the application lost (the outcome oracles, probes/outcomes.py):
    LOST_WRITE = "lost_write"  #: a write the application was told is committed is not in the database
    DISCONNECTED = "disconnected"  #: a client's connection was closed under it (the error class in the evidence)
    #: a client was handed another server connection mid-session: its session state stayed with the old one
    MOVED = "moved"
    OTHER_RESULT = "other_result"  #: a call returned another client's result, not the caller's own
    #: a client's call did not return: it waited for a server connection another client's unfinished transaction
    #: held (the pool stalled), or its driver retried for ever
    STALLED = "stalled"
    SILENT = "silent"  #: no error reached the application for what it lost (a write, its server, its result)


#: The documented order: the first fact present names the verdict (none: isolated). A lost write that
#: no error told the application of comes first of all (`classify`): LOSES_WRITES.
HEADLINE: tuple[tuple[Fact, Verdict], ...] = (
    (Fact.BROKE, Verdict.BREAKS),
    (Fact.STALLED, Verdict.BREAKS),
    (Fact.DISCONNECTED, Verdict.BREAKS),
    (Fact.LOST_WRITE, Verdict.BREAKS),  # not silent: an error told the application
    (Fact.LEAKED, Verdict.LEAKS),
    (Fact.OTHER_RESULT, Verdict.LEAKS),
    (Fact.LOST, Verdict.LOST),
    (Fact.MOVED, Verdict.LOST),
)


#: The facts a verdict's own word already says (the rest are shown beside it).
_SAID_BY = {Verdict.BREAKS: (Fact.BROKE,), Verdict.LEAKS: (Fact.LEAKED,), Verdict.LOST: (Fact.LOST,),
            Verdict.LOSES_WRITES: (Fact.LOST_WRITE, Fact.SILENT)}


def headline(facts: Sequence[Fact]) -> tuple[Verdict, tuple[Fact, ...]]:
    """The verdict the facts name, and the facts that name it."""
    if Fact.LOST_WRITE in facts and Fact.SILENT in facts:
        return Verdict.LOSES_WRITES, (Fact.LOST_WRITE, Fact.SILENT)
    for fact, verdict in HEADLINE:
        if fact in facts:
            return verdict, (fact,)
    return Verdict.ISOLATED, ()


class Scope(StrEnum):
    """How long the state a probe exercises lives in PostgreSQL."""

    SESSION = "session"  #: until the session ends: on one shared session it must leak
    TRANSACTION = "transaction"  #: until the transaction ends: it must never leak


class Slot(StrEnum):
    """Which server connection an observation is meant to run on, in transaction mode."""

    HOME = "home"  #: the server A and B share (a pool of one has only this one)
    AWAY = "away"  #: another server connection (A moved while B held HOME)


@dataclass(frozen=True)
class ServerId:
    """A server connection's identity: pid plus backend start, so a reused pid cannot pass."""

    pid: int
    started: str

    def __str__(self) -> str:
        return f"pid {self.pid}"


@dataclass(frozen=True)
class Proof:
    """The server identity one client's statement ran on, read in that statement (or its transaction)."""

    step: str
    client: str
    server: ServerId
    slot: Slot = Slot.HOME
    #: which of the route's server connections in turn: a pooler that closed the one A and B shared hands
    #: out a new one (Fact.MOVED); proofs of one epoch and slot must name one server connection
    epoch: int = 0

    def describe(self) -> str:
        return f"{self.client} {self.step}: {self.server}"


def expected_same(route: Route, p: Proof, q: Proof) -> bool:
    """Whether two proofs must name one server connection on this route."""
    if route is Route.TRANSACTION:
        return p.slot is q.slot and p.epoch == q.epoch
    if route is Route.SHARED:
        return True
    return p.client == q.client  # negative controls: each client keeps its own session


def broken_proofs(route: Route, proofs: Sequence[Proof]) -> list[str]:
    """Each pair of proofs whose relation is not the one the route requires, described."""
    out = []
    for i, p in enumerate(proofs):
        for q in proofs[i + 1 :]:
            same = p.server == q.server
            if same != expected_same(route, p, q):
                want = "the same" if expected_same(route, p, q) else "different"
                out.append(f"{p.describe()} and {q.describe()} (started {p.server.started} / "
                           f"{q.server.started}) should be {want} server connections")
    return out


@dataclass(frozen=True)
class Observation:
    """What a probe saw. Facts only; `classify` turns them into a verdict."""

    evidence: str
    leaked: bool = False
    lost: bool = False
    broke: str | None = None
    misreported: bool = False
    details: tuple[tuple[str, str], ...] = ()
    recovered: str | None = None  #: how the driver or pooler recovered (Fact.RECOVERED), in the evidence too
    #: what the application lost, each in words (also in the evidence): the outcome oracles' facts
    lost_write: str | None = None
    disconnected: str | None = None
    moved: str | None = None
    other_result: str | None = None
    stalled: str | None = None
    silent: bool = False  #: no error reached the application for what it lost

    @property
    def facts(self) -> tuple[Fact, ...]:
        lost_something = any(x is not None for x in (self.lost_write, self.moved, self.other_result))
        seen = {Fact.BROKE: self.broke is not None, Fact.LEAKED: self.leaked, Fact.LOST: self.lost,
                Fact.MISREPORTED: self.misreported, Fact.RECOVERED: self.recovered is not None,
                Fact.LOST_WRITE: self.lost_write is not None, Fact.DISCONNECTED: self.disconnected is not None,
                Fact.MOVED: self.moved is not None, Fact.OTHER_RESULT: self.other_result is not None,
                Fact.STALLED: self.stalled is not None,
                Fact.SILENT: self.silent and lost_something}
        return tuple(f for f in Fact if seen[f])


@dataclass(frozen=True)
class Outcome:
    """One measured result: the probe and its typed target, the verdict, every fact seen, the evidence."""

    probe: str
    target: Target
    verdict: Verdict
    evidence: str
    details: tuple[tuple[str, str], ...] = field(default=())
    facts: tuple[Fact, ...] = field(default=())
    security: bool = False

    @property
    def pg(self) -> Version:
        return self.target.pg

    @property
    def pooler(self) -> Pooler | None:
        return self.target.pooler

    @property
    def route(self) -> Route:
        return self.target.route

    @property
    def driver(self) -> Driver:
        return self.target.driver

    @property
    def column(self) -> str:
        return self.target.column

    @property
    def other_facts(self) -> tuple[Fact, ...]:
        """Facts seen besides the verdict's own word (e.g. a break that also leaked: BREAKS+leaked; a break that
        was a disconnect: BREAKS+disconnected)."""
        return tuple(f for f in self.facts if f not in _SAID_BY.get(self.verdict, ()))


def classify(route: Route, proofs: Sequence[Proof], observation: Observation) -> tuple[Verdict, str]:
    """The verdict and its evidence. No proof of the expected server sharing, no verdict.

    Every proof must relate to every other as the route requires; a verdict other than breaks
    needs proofs from both clients (a break, a disconnect or a stalled pool may rest on the proof of the
    client that broke).
    """
    if not proofs:
        return Verdict.ERROR, f"no server identity proof was taken. {observation.evidence}"
    failed = broken_proofs(route, proofs)
    if failed:
        return Verdict.ERROR, "the clients did not share the server as the probe requires: " + "; ".join(failed)
    servers = "; ".join(sorted({f"{p.client} on {p.server}" for p in proofs}))
    evidence = f"{observation.evidence} [{servers}]"
    facts = observation.facts
    verdict, named = headline(facts)
    if verdict is not Verdict.BREAKS and not {"A", "B"} <= {p.client for p in proofs}:
        return Verdict.ERROR, f"only {', '.join(sorted({p.client for p in proofs}))} proved its server. {evidence}"
    lead = {Fact.BROKE: observation.broke, Fact.DISCONNECTED: observation.disconnected,
            Fact.STALLED: observation.stalled, Fact.LOST_WRITE: observation.lost_write}.get(named[0]) if named else None
    return verdict, (f"{lead}. {evidence}" if lead else evidence)


def unshared(observation: Observation, why: str) -> tuple[Verdict, str]:
    """The verdict when the pooler never let A and B share a server connection (`why`, run/runner.py's
    never_shared): not applicable, unless the application lost a write it was told is committed. That needs no
    sharing to be proven (the witness read PostgreSQL itself after the run): it is the application's outcome,
    never hidden by "not applicable" (LOSES_WRITES when no error told it; BREAKS when one did)."""
    if Fact.LOST_WRITE not in observation.facts:
        return Verdict.NOT_APPLICABLE, why
    # the other facts were measured on servers A and B never shared: they name nothing here
    verdict = Verdict.LOSES_WRITES if Fact.SILENT in observation.facts else Verdict.BREAKS
    return verdict, f"{observation.lost_write} lost. {observation.evidence}. The clients shared no server: {why}"
