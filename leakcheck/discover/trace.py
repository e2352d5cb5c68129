"""What one run of a sequence on one route recorded: each step's result, every proof, and what the
applications lost that only the run can tell (pure data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from leakcheck.discover.ops import Op, Who
from leakcheck.discover.render import Names
from leakcheck.model.errors import one_line
from leakcheck.model.faults import NO_SQLSTATE
from leakcheck.model.target import Route
from leakcheck.model.verdicts import ServerId


@dataclass(frozen=True)
class Failure:
    """A statement's error: SQLSTATE (compared) and message (shown)."""

    sqlstate: str
    message: str

    def __str__(self) -> str:
        if self.sqlstate == NO_SQLSTATE:
            return f"an error without SQLSTATE {self.message}".strip()
        return f"error {self.sqlstate} {self.message}".strip()


@dataclass(frozen=True)
class Event:
    """One step: an op's result (`value`, the first column of its last statement's first row), or a
    snapshot's (`fields`: key -> value); `failure` when it failed. `op` is None for the final snapshots."""

    index: int
    who: Who
    op: Op | None
    value: Any = None
    fields: tuple[tuple[str, Any], ...] = ()
    failure: Failure | None = None
    proof_at: int | None = None  # the index of the step whose proof covers this one (None: unproven)
    ran: bool = True  # False: the run ended before this step (the pool stalled)

    @property
    def is_snapshot(self) -> bool:
        return self.op is None or self.op.kind == "observe"


@dataclass(frozen=True)
class Proof:
    """A server identity a client's step ran on, read in that statement or its transaction block."""

    index: int
    who: Who
    server: ServerId


#: How a lost write says that nothing told its client (compare and known read it).
SILENT = "no error reached"


class Lost(StrEnum):
    """What an application lost, as the outcome oracles see it (probes/outcomes.py): a difference of its own kind."""

    WRITE = "lost write"  #: a row its client was told is committed is not in the database ("a commit was lost")
    OTHER_RESULT = "other result"  #: a call returned a value that is not its own ("B got A's result")
    DISCONNECTED = "disconnected"  #: the client's connection was closed under it
    MOVED = "moved"  #: the client went on on another server connection, its session state left behind
    STALLED = "stalled"  #: a call waited for a server connection another client's open transaction held


@dataclass(frozen=True)
class Loss:
    """One thing a client lost at a step: `compared` in words that do not depend on the run (no ids, no pids),
    `shown` with what a reader needs (the error, the value)."""

    index: int
    who: Who
    what: Lost
    compared: str
    shown: str


@dataclass
class Trace:
    """A route's run of one sequence: events in order (the ops, then A's and B's final snapshot), and the
    losses the run alone can tell (writes read back, a stall); compare.outcomes adds what events show."""

    route: Route
    names: Names
    events: list[Event] = field(default_factory=list)
    proofs: list[Proof] = field(default_factory=list)
    losses: list[Loss] = field(default_factory=list)

    def servers(self, who: Who | None = None) -> set[ServerId]:
        return {p.server for p in self.proofs if who is None or p.who is who}


class Abort(BaseException):
    """The harness could not measure (a proof is missing or wrong, a server broke, a step hung).
    A BaseException, so hypothesis never takes it for a difference to shrink: the run stops."""


def harness_failed(ops: tuple[Op, ...], exc: Exception) -> Abort:
    """The `Abort` for a measurement that raised: one line naming the sequence and the error."""
    return Abort(f"the harness failed on {', '.join(map(str, ops)) or 'no ops'}: {type(exc).__name__}: "
                 f"{one_line(exc)}")
