"""Verdicts, the records that carry them, and the pure classifier that decides them."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Verdict(StrEnum):
    """What a probe measured for one (cell, driver)."""

    ISOLATED = "isolated"  #: the state stayed with the client that set it
    LEAKS = "leaks"  #: the other client saw, or was affected by, the state
    LOST = "lost"  #: the client's own state was gone when it ran again
    BREAKS = "breaks"  #: using the feature raised errors
    ERROR = "error"  #: the harness could not measure (e.g. no proof of a shared server)
    SKIPPED = "skipped"  #: not run (deselected, or not applicable)

    @property
    def is_problem(self) -> bool:
        return self in (Verdict.LEAKS, Verdict.LOST, Verdict.BREAKS)


class Route(StrEnum):
    """How the two clients reach PostgreSQL."""

    TRANSACTION = "transaction"  #: through PgBouncer, pool_mode=transaction: the subject
    SESSION = "session"  #: control: through PgBouncer, pool_mode=session
    DIRECT = "direct"  #: control: two direct PostgreSQL sessions

    @property
    def is_control(self) -> bool:
        return self is not Route.TRANSACTION


class Relation(StrEnum):
    SAME = "same"
    DIFFERENT = "different"


@dataclass(frozen=True)
class PidCheck:
    """Two `pg_backend_pid()` readings and what a transaction-mode pool must show for them."""

    step: str
    first: tuple[str, int]  # (client label, pid)
    second: tuple[str, int]
    pooled: Relation = Relation.SAME

    def expected(self, route: Route) -> Relation:
        if route is Route.TRANSACTION:
            return self.pooled
        # Controls: each client keeps its own session, and the two never share one.
        return Relation.SAME if self.first[0] == self.second[0] else Relation.DIFFERENT

    def holds(self, route: Route) -> bool:
        seen = Relation.SAME if self.first[1] == self.second[1] else Relation.DIFFERENT
        return seen is self.expected(route)

    def describe(self) -> str:
        (la, pa), (lb, pb) = self.first, self.second
        return f"{self.step}: {la} pid {pa}, {lb} pid {pb}"


@dataclass(frozen=True)
class Observation:
    """What a probe saw. Facts only; `classify` turns them into a verdict."""

    evidence: str
    leaked: bool = False
    lost: bool = False
    broke: str | None = None
    details: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Outcome:
    """One measured result: the report key and the verdict with its evidence."""

    probe: str
    pg: str
    bouncer: str  # "" for the direct route
    route: Route
    driver: str
    verdict: Verdict
    evidence: str
    details: tuple[tuple[str, str], ...] = field(default=())

    @property
    def column(self) -> str:
        where = f"pg{self.pg}" + (f"/pgbouncer{self.bouncer}" if self.bouncer else "")
        if self.route is not Route.TRANSACTION:
            where += f"/{self.route.value}"
        return f"{where}/{self.driver}"


def classify(route: Route, checks: tuple[PidCheck, ...], observation: Observation) -> tuple[Verdict, str]:
    """The verdict and its evidence. No proof of the expected server sharing, no verdict."""
    if not checks:
        return Verdict.ERROR, f"no pg_backend_pid() proof was taken. {observation.evidence}"
    failed = [c for c in checks if not c.holds(route)]
    if failed:
        wanted = "; ".join(f"{c.describe()} (expected {c.expected(route).value})" for c in failed)
        return Verdict.ERROR, f"the clients did not share the server as the probe requires: {wanted}"
    pids = "; ".join(c.describe() for c in checks)
    evidence = f"{observation.evidence} [{pids}]"
    if observation.broke is not None:
        return Verdict.BREAKS, f"{observation.broke}. {evidence}"
    if observation.leaked:
        return Verdict.LEAKS, evidence
    if observation.lost:
        return Verdict.LOST, evidence
    return Verdict.ISOLATED, evidence
