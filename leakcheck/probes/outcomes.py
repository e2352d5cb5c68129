"""What the application lost: the outcome oracles every scenario keeps, beside the state its probe looks at.

- **Writes** (`Fact.LOST_WRITE`): every row a client writes through `Scenario.write` (or a probe's own INSERT
  run with `wrote=`: the security probes' rows in lc_audit and lc_child) goes into the ledger as soon as the
  client's call returned, before any follow-up proof of its step, with whether the application was told it
  is committed (its autocommit statement, or its transaction's commit, returned without an error): a later
  step that stalls never hides it. After the probe (a stalled one too) the witness reads them back from PostgreSQL
  itself: a row the application was told is committed and is not there is a lost write; *silent* when
  no error reached that client between the write and the end of its transaction.
- **Connections** (`Fact.DISCONNECTED`, `Fact.MOVED`): a step that may end its client's connection says so
  (`Scenario.run(..., may_disconnect=True)`); an error that ends it is recorded with its class. A client
  whose next step ran on another server connection after the one the clients shared ended (the witness
  saw it gone) was *moved*: its session state stayed behind (silent when that step raised nothing).
- **Results** (`Fact.OTHER_RESULT`): a step that knows what its own answer is (`own=`) and got another
  value got someone else's result (always silent: it came back as a success).

Pure bookkeeping: the scenario feeds it, `facts` turns it into the observation's outcome fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from leakcheck.model.verdicts import Observation, ServerId

#: The table every write of the oracles goes to (provision/postgres/fixtures.py makes it).
WRITES_TABLE = "lc_writes"


def write_statement(row: str, who: str) -> str:
    """The INSERT of one write (`Scenario.write`, and discovery's scripts): idempotent, since a driver's prepared
    path may run a statement several times (pgjdbc's prepareThreshold)."""
    return f"INSERT INTO {WRITES_TABLE} (id, who) VALUES ('{row}', '{who}') ON CONFLICT (id) DO NOTHING"


class Stalled(Exception):  # noqa: N818 - an outcome, not an error: what the application saw
    """A client's call waited past its bound for a server connection another client's unfinished transaction
    held: the pool stalled. The probe ends there; what was seen is its outcome (Fact.STALLED)."""


@dataclass
class Write:
    """One row a client wrote: its id, who wrote it, at which step, and what the application was told."""

    id: str  #: the value of `column` that names the row in `table`
    who: str
    step: str
    table: str = WRITES_TABLE
    column: str = "id"
    #: None while its transaction is open; then True (told committed) or False (told it failed, rolled back)
    told_committed: bool | None = None
    #: an error that reached the writer between the write and the end of its transaction
    error_after: str | None = None


@dataclass
class Ledger:
    """The outcome oracles' records for one scenario (module docstring)."""

    writes: list[Write] = field(default_factory=list)
    disconnects: list[str] = field(default_factory=list)
    moves: list[tuple[str, bool]] = field(default_factory=list)  #: (words, silent)
    others: list[str] = field(default_factory=list)
    _open: dict[str, list[Write]] = field(default_factory=dict)  #: writes inside each client's open transaction

    def wrote(self, write: Write, *, in_transaction: bool, failed: str | None) -> None:
        """A write's statement returned (`failed`: its error). In autocommit its success is its commit."""
        if failed is not None:
            write.told_committed = False
            write.error_after = failed
        elif not in_transaction:
            write.told_committed = True
        self.writes.append(write)
        if in_transaction and failed is None:
            self._open.setdefault(write.who, []).append(write)

    def errored(self, who: str, error: str) -> None:
        """An error reached `who` (any step): its open transaction's writes are no longer silent."""
        for write in self._open.get(who, ()):
            write.error_after = write.error_after or error

    def ended(self, who: str, committed: bool, error: str | None = None) -> None:
        """`who`'s transaction ended: its commit returned success (committed), or it rolled back or failed."""
        for write in self._open.pop(who, []):
            write.told_committed = committed and error is None
            if error is not None:
                write.error_after = write.error_after or error

    def disconnected(self, who: str, step: str, error: str) -> None:
        self.disconnects.append(f"{who}'s connection was closed at {step!r}: {error}")

    def moved(self, who: str, step: str, old: ServerId, new: ServerId, silent: bool) -> None:
        self.moves.append((f"{who} was handed server connection {new} at {step!r} after the one it shared, {old}, "
                           "ended: its session state stayed behind", silent))

    def other_result(self, who: str, step: str, got: object, own: object) -> None:
        self.others.append(f"{who}'s {step!r} returned {got!r}, not its own {own!r}")

    def told_committed(self) -> list[Write]:
        return [w for w in self.writes if w.told_committed]

    def facts(self, present: set[str], observation: Observation) -> Observation:
        """The observation with what the application lost added (facts and evidence). `present`: the ids
        of this ledger's writes the witness found in PostgreSQL after the run."""
        lost = [w for w in self.told_committed() if w.id not in present]
        # silent: no error told the application; for lost writes (the headline, Verdict.LOSES_WRITES) theirs alone
        silent_loss = (any(w.error_after is None for w in lost) if lost
                       else any(s for _, s in self.moves) or bool(self.others))
        parts = []
        if lost:
            parts.append("lost writes: " + "; ".join(
                f"{w.who}'s row {w.id} ({w.step}) was reported committed and is not in the database"
                + (f" (then {w.error_after})" if w.error_after else ", and no error reached the application")
                for w in lost))
        kept = [w for w in self.told_committed() if w.id in present]
        if kept and not lost:
            parts.append(f"every write reported committed is in the database ({len(kept)})")
        parts += self.disconnects + [m for m, _ in self.moves] + self.others
        if not (lost or self.disconnects or self.moves or self.others or kept):
            return observation
        return replace(
            observation,
            evidence=f"{observation.evidence}. Outcome: {'; '.join(parts)}",
            lost_write="; ".join(f"{w.who}'s {w.step}" for w in lost) or observation.lost_write,
            disconnected="; ".join(self.disconnects) or observation.disconnected,
            moved="; ".join(m for m, _ in self.moves) or observation.moved,
            other_result="; ".join(self.others) or observation.other_result,
            silent=observation.silent or silent_loss,
        )
